"""``fedjax-abc compare`` at a tiny scale: files, finite numbers, the drift verdicts, options."""

import contextlib
import csv
import io
import json
import math
import os

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import compare, paper

PNG = b"\x89PNG\r\n\x1a\n"
FILES = ["compare.json", "compare.csv", "compare.png", "compare_drift.png"]
TINY = ["compare", "--fixed", "--quick", "--trials", "3", "--rounds", "100", "--seed", "5", "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert cli.main([*TINY, "--out", str(out)]) == 0
    with open(out / "compare.json") as fh:
        doc = json.load(fh)
    return out, doc, stdout.getvalue()


@pytest.mark.slow  # end to end
def test_files_written(run):
    out, doc, _ = run
    for name in FILES:
        assert os.path.getsize(out / name) > 0, name
    for name in ("compare.png", "compare_drift.png"):
        with open(out / name, "rb") as fh:
            assert fh.read(8) == PNG
        assert os.path.getsize(out / name) > 20_000
    with open(out / "compare.csv") as fh:
        rows = list(csv.reader(fh))
    n_rows = len(paper.COMPARE["d_max"]) * len(paper.COMPARE["S"]) * len(compare.ORDER)
    assert len(rows) == 1 + n_rows and all(len(r) == len(rows[0]) for r in rows)
    assert rows[0][:3] == ["d_max", "S", "algorithm"]


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


@pytest.mark.slow  # end to end
def test_numbers_finite_and_config(run):
    _, doc, _ = run
    c = doc["config"]
    assert c["trials"] == 3 and c["rounds"] == 100 and c["seed"] == 5
    assert c["rerun"] == "fedjax-abc compare --fixed --seed 5 --quick --trials 3 --rounds 100"
    assert c["Q"] == 10 and c["alpha"] == paper.COMPARE["alpha"] and c["wall_seconds"] > 0
    assert set(c["algorithms"]) == set(compare.ORDER)
    assert c["hyperparameters"]["adam_lr"] == pytest.approx(c["alpha"] * c["Q"])
    # strict JSON turns NaN and infinities into null: none may appear in the curves
    for curves in doc["curves"].values():
        for runs in curves.values():
            assert set(runs) == set(compare.ORDER)
            for name, fields in runs.items():
                for field in ("gap", "grad_norm_sq"):
                    mean, ci = fields[field]["mean"], fields[field]["ci95"]
                    assert len(mean) == len(ci) == len(doc["rounds"])
                    assert all(isinstance(v, float) and math.isfinite(v) for v in mean + ci)
    for row in doc["table"]:
        for field in ("gap", "grad_norm_sq"):
            assert math.isfinite(row[field]["mean"]) and row[field]["stderr"] >= 0
        if row["algorithm"] == "fedavg":
            assert row["gap_vs_fedavg"] is None
        else:
            cmp = row["gap_vs_fedavg"]
            assert math.isfinite(cmp["diff"]) and cmp["stderr"] >= 0
    assert all(math.isfinite(v) for v in _numbers(doc["drift"]))
    assert all(math.isfinite(v) for v in _numbers(doc["problems"]))


@pytest.mark.slow  # end to end
def test_table_matches_curves_and_pairs(run):
    _, doc, _ = run
    for row in doc["table"]:
        curve = doc["curves"][str(int(row["d_max"]))][str(row["S"])][row["algorithm"]]
        assert row["gap"]["mean"] == pytest.approx(curve["gap"]["mean"][-1], rel=1e-12)
        assert row["grad_norm_sq"]["mean"] == pytest.approx(curve["grad_norm_sq"]["mean"][-1],
                                                            rel=1e-12)
        if row["gap_vs_fedavg"]:
            base = next(r for r in doc["table"] if r["d_max"] == row["d_max"]
                        and r["S"] == row["S"] and r["algorithm"] == "fedavg")
            # the paired mean difference is the difference of the means
            assert row["gap_vs_fedavg"]["diff"] == pytest.approx(
                row["gap"]["mean"] - base["gap"]["mean"], rel=1e-9, abs=1e-15)


@pytest.mark.slow  # end to end
def test_drift_verdicts(run):
    """FedAvg's exact-gradient fixed point: x* at Q = 1 and at Dmax = 200, biased at Q > 1 for
    Dmax = 20 (alpha Q = 1 > clearance); SCAFFOLD reaches x* everywhere."""
    _, doc, text = run
    dr = doc["drift"]
    tol = doc["config"]["drift"]["tol"]
    qs = dr["q_sweep"]["Q"]
    assert qs[0] == 1 and len(qs) >= 3
    for dm in ("20", "200"):
        runs = dr["q_sweep"]["runs"][dm]
        assert all(runs["fedavg"]["converged"]) and all(runs["scaffold"]["converged"])
        assert max(abs(x) for x in runs["scaffold"]["x_minus_x_star"]) < tol
        assert abs(runs["fedavg"]["x_minus_x_star"][0]) < tol  # Q = 1: gradient descent
        assert runs["predicted_bias"] == runs["fedavg"]["biased"]
    biased20 = dr["q_sweep"]["runs"]["20"]["fedavg"]
    assert all(abs(x) > 1e-3 for x in biased20["x_minus_x_star"][1:])
    assert all(g > 1e-8 for g in biased20["grad_norm_sq"][1:])
    assert max(abs(x) for x in dr["q_sweep"]["runs"]["200"]["fedavg"]["x_minus_x_star"]) < tol
    assert dr["geometry"]["20"]["clearance"] == pytest.approx(0.2302, abs=1e-3)
    # alpha Q sweep at Q = 10: onset between 0.2 and 0.3 (Dmax 20), between 12 and 13 (Dmax 200)
    gammas = dr["gamma_sweep"]["gamma"]
    for dm, onset in (("20", 0.25), ("200", 12.5)):
        biased = dr["gamma_sweep"]["runs"][dm]["fedavg"]["biased"]
        assert biased == [g > onset for g in gammas]
    verdicts = doc["verdicts"]["drift"]
    assert verdicts[0].startswith("Dmax = 20, alpha Q = 1: FedAvg's fixed point is biased at Q = 2,")
    assert "x* at Q = 1" in verdicts[0] and "SCAFFOLD converged to x* at every Q" in verdicts[0]
    assert "FedAvg's fixed point is x* at every Q" in verdicts[1]
    assert verdicts[-1].startswith("The rule predicts FedAvg's bias in") and \
        verdicts[-1].split(" in ")[1].split(" of ")[0] == verdicts[-1].split(" of ")[1].split()[0]
    assert "client drift" in text and verdicts[0] in text


@pytest.mark.slow  # end to end
def test_stochastic_verdicts(run):
    _, doc, text = run
    lines = doc["verdicts"]["stochastic"]
    assert len(lines) == 2 * len(paper.COMPARE["d_max"]) * len(paper.COMPARE["S"]) + 1
    assert lines[0].startswith("Dmax = 20, S = 4: final gap of FedAvg")
    assert "below the clearance" in lines[-1]
    assert lines[0] in text


@pytest.mark.slow  # end to end
def test_paired_statistics_printed(run):
    _, doc, text = run
    assert len(doc["statistics"]) == len(paper.COMPARE["d_max"]) * len(paper.COMPARE["S"])
    for row in doc["table"]:
        c = row["gap_vs_fedavg"]
        if c is not None and c["p_value"] is not None:
            assert c["p_holm"] >= c["p_value"] and c["ci_low"] <= c["diff"] <= c["ci_high"]
    for group in doc["statistics"]:
        assert sorted(group["ranking"]["order"]) == sorted(compare.ORDER)
        assert np.allclose(np.sum(group["ranking"]["probabilities"], axis=0), 1.0)
    assert "paired over 3 trials" in text and "p (Holm)" in text and "ranking (P(own rank)" in text


def test_paired_difference_by_hand():
    c = compare.paired_difference([1.0, 2.0, 3.0], [0.0, 0.0, 1.0])
    # differences 1, 2, 2: mean 5/3, sample sd sqrt(1/3), stderr 1/3
    assert c["diff"] == pytest.approx(5 / 3) and c["stderr"] == pytest.approx(1 / 3)
    assert c["z"] == pytest.approx(5.0) and c["relative"] == pytest.approx(5.0)
    same = compare.paired_difference([1.0, 2.0], [1.0, 2.0])
    assert same["diff"] == 0.0 and same["z"] == 0.0


def test_geometry_and_rule_by_hand():
    geo = compare.huber_geometry(np.array([-5.0, -0.5, 0.5, 5.0]), 0.0)
    assert geo == {"near": 2, "far_left": 1, "far_right": 1, "near_sum": 0.0, "clearance": 4.0}
    assert not compare.predicted_bias(geo, 1, 100.0)  # gradient descent
    assert not compare.predicted_bias(geo, 2, 8.0)  # alpha (Q - 1) = 4 = clearance
    assert compare.predicted_bias(geo, 2, 8.5)
    lopsided = compare.huber_geometry(np.array([0.0, 0.5, 10.0]), 0.75)
    assert (lopsided["far_left"], lopsided["far_right"], lopsided["near"]) == (0, 1, 2)
    assert compare.predicted_bias(lopsided, 2, 0.01)


def test_rule_on_unbalanced_offsets():
    """Offsets 0, 0.5, 10: x* = 0.75, one client outside (right): FedAvg is biased for every
    Q > 1, however small alpha Q, and not at Q = 1; SCAFFOLD reaches x*."""
    problem = fa.problems.huber_offsets(offsets=[0.0, 0.5, 10.0])
    assert float(problem.x_star[0]) == pytest.approx(0.75)
    kw = dict(rounds=3000, x0=problem.x_star + 1.0, trials=1, key=jax.random.key(0),
              record_every=3000, oracle=fa.ExactOracle())
    dist = {}
    for Q in (1, 2):
        for name, alg in (("fedavg", fa.algorithms.FedAvg()), ("scaffold", fa.algorithms.Scaffold())):
            res = fa.simulate(problem, local_steps=Q, stepsize=0.1 / Q, algorithm=alg, **kw)
            dist[name, Q] = abs(float(res.x_final[0, 0] - problem.x_star[0]))
    assert dist["fedavg", 1] < 1e-10 and dist["fedavg", 2] > 1e-4
    assert dist["scaffold", 1] < 1e-10 and dist["scaffold", 2] < 1e-10


def test_help_lists_options(capsys):
    assert cli.main(["compare", "--help"]) == 0
    text = capsys.readouterr().out
    for opt in ("--out", "--trials", "--rounds", "--seed", "--quick", "--quiet", "SCAFFOLD",
                "FedProx", "FedAdam"):
        assert opt in text
    assert cli.main(["--help"]) == 0
    assert "compare" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["compare", "--trials", "1"],
    ["compare", "--trials", "x"],
    ["compare", "--rounds", "0"],
    ["compare", "--seed", "-3"],
    ["compare", "--precision", "float32"],
    ["compare", "extra"],
])
def test_bad_options_one_line(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("fedjax-abc: error:")


def test_unwritable_output_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["compare", "--out", str(blocker / "sub"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
