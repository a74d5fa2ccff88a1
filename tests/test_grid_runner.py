"""``fedjax-abc run GRID.toml``: the example grids run at reduced scale, write the labelled
result, the summary and the plots, give simulate's numbers, and resume where they stopped.
Parts written by another grid are not resumed, and bad settings of a grid file are refused in
one line.

The algorithms example (three parts, about 17 s) is behind the slow marker."""

import os
import pathlib
import time

import jax
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import grid

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "grids").glob("*.toml"))
SMALL = ["--trials", "8", "--rounds", "20", "--quiet"]


def test_two_example_grids_ship():
    assert [p.name for p in EXAMPLES] == ["algorithms.toml", "table2_stepsizes.toml"]


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) for p in EXAMPLES],
                         ids=lambda p: p.stem)  # 11 s and more each
def test_example_grid_runs_and_resumes(path, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)] + SMALL) == 0
    spec = grid.load_spec(str(path), trials=8, rounds=20)
    res = fa.load(out / "result.nc")
    assert isinstance(res, fa.SweepResult) and list(res.axes) == list(spec.doc["grid"])
    assert res.gap.shape[-2] == 8 and res.rounds[-1] == 20
    for name in ["summary.csv", "curves.png"] + [f"final_{a.replace('.', '_')}.png"
                                                  for a in res.axes]:
        assert (out / name).stat().st_size > 0, name
    # the last grid point is simulate's, bit for bit (to rounding where eta_g != 1)
    doc, last = spec.doc, res.results[-1]
    point = res.points[-1]
    problem = grid._problem(doc["problem"] if "problem.d_max" not in point
                            else {**doc["problem"], "d_max": point["problem.d_max"]})
    algorithm = grid._component("algorithm", spec.doc["grid"]["algorithm"][-1]) \
        if "algorithm" in point else None
    ref = fa.simulate(problem, key=jax.random.key(doc["seed"]), trials=8, rounds=20,
                      local_steps=doc["local_steps"], mode=doc["mode"], record_x=False,
                      num_sampled=point.get("num_sampled", doc.get("num_sampled")),
                      stepsize=point.get("stepsize", doc.get("stepsize")),
                      x0=problem.x_star + point.get("x0_offset", doc.get("x0_offset", 0.0)),
                      algorithm=algorithm, record_every=doc.get("record_every"))
    assert ref.equals(last)
    # an interruption after the first part: the rerun loads it and runs the others
    parts = sorted(os.listdir(out / "parts"))
    for name in parts[1:]:
        os.remove(out / "parts" / name)
    os.remove(out / "result.nc")
    capsys.readouterr()
    assert cli.main(["run", str(path), "--out", str(out)] + SMALL) == 0
    assert f"{len(parts)} parts, 1 resumed" in capsys.readouterr().out
    assert fa.load(out / "result.nc").equals(res)
    # other settings in the same folder are refused
    assert cli.main(["run", str(path), "--out", str(out), "--trials", "9", "--quiet"]) == 1


def test_bad_grid_files_are_refused(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('trials = 8\nrounds = 10\nlocal_steps = 2\nstepsize = 0.1\n'
                   '[problem]\nname = "huber_offsets"\nseed = 0\n[grid]\nrounds = [1, 2]\n')
    assert cli.main(["run", str(bad), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert "not a setting a sweep can vary" in capsys.readouterr().err
    bad.write_text('trials = 8\nbogus = 1\n')
    assert cli.main(["run", str(bad), "--quiet"]) == 1
    assert "unknown keys ['bogus']" in capsys.readouterr().err


# ------------------------------------------------------------------ parts of another grid


PARTS_GRID = ('name = "g"\nseed = 0\ntrials = 3\nrounds = 8\nrecord_every = 4\nlocal_steps = 2\n'
              'x0_offset = 2.0\n[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\nseed = 0\n'
              '[grid]\nnum_sampled = [2, 3]\nstepsize = [{}, 0.02]\n')


def test_grid_refuses_parts_of_another_grid(tmp_path, capsys):
    from fedjax_abc import cli

    a, b, out = tmp_path / "a.toml", tmp_path / "b.toml", tmp_path / "out"
    a.write_text(PARTS_GRID.format("0.01"))
    b.write_text(PARTS_GRID.format("0.04"))
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 0
    first = fa.load(out / "result.nc")
    # grid b in a's folder, a's record of its settings gone: a's parts are not b's
    os.remove(out / "grid.json")
    capsys.readouterr()
    assert cli.main(["run", str(b), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "0.nc was not written by this grid" in err and err.count("\n") == 1
    # grid a again: its own parts are resumed, the same numbers
    os.remove(out / "grid.json")
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 0
    assert "2 parts, 2 resumed" in capsys.readouterr().out
    assert fa.load(out / "result.nc").equals(first)
    # a part without a fingerprint (an earlier version's) is not taken on trust either
    part = fa.load(out / "parts" / "1.nc")
    part.save(out / "parts" / "1.nc")
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 1
    assert "1.nc was not written by this grid" in capsys.readouterr().err


# ------------------------------------------------------------ bad settings of a grid file


GRID = ('name = "g"\nseed = 0\ntrials = 3\nrounds = 8\nrecord_every = 4\nlocal_steps = 2\n'
        'x0_offset = 2.0\n{extra}[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\n'
        'seed = 0\n{table}[grid]\n{grid}\n')


def _grid(extra="", table="", grid="stepsize = [0.01, 0.02]\nnum_sampled = [2]"):
    return GRID.format(extra=extra, table=table, grid=grid)


@pytest.mark.parametrize("text, match", [
    (_grid().replace("trials = 3", 'trials = "3"'), r"trials must be an integer >= 1, got '3'"),
    (_grid().replace("rounds = 8", "rounds = 8.5"), r"rounds must be an integer >= 1, got 8\.5"),
    (_grid().replace("seed = 0\ntrials", "seed = -1\ntrials"),
     r"seed must be an integer >= 0, got -1"),
    (_grid().replace("n = 6", "n = 6\nwidth = 3"),
     r"\[problem\]: huber_offsets takes no argument 'width' \(its arguments: n, d_max, offsets\)"),
    (_grid(table='[algorithm]\nname = "FedProx"\nmuu = 0.1\n'),
     r"\[algorithm\]: FedProx takes no argument 'muu' \(its arguments: mu\)"),
    (_grid().replace("d_max = 10.0\nseed = 0", 'd_max = 10.0\nseed = "x"'),
     r"\[problem\] seed must be an integer in \[0, 2\^32\), got 'x'"),
    (_grid(grid="num_sampled = [2, 3]"), r"give stepsize = \.\.\. or a stepsize grid axis"),
    (_grid(table='[sampler]\nname = "Bernoulli"\np = 0.5\n'),
     r"\[sampler\] and num_sampled both choose the clients of a round: give one of them"),
    (_grid(extra="x0 = [1.0]\n"), r"give x0 or x0_offset, not both"),
])
def test_grid_file_settings_are_refused_in_one_line(tmp_path, capsys, text, match):
    import re

    (tmp_path / "g.toml").write_text(text)
    out = tmp_path / "out"
    start = time.perf_counter()
    assert cli.main(["run", str(tmp_path / "g.toml"), "--out", str(out), "--quiet"]) == 1
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    assert err.startswith("fedjax-abc: error: ") and err.count("\n") == 1
    assert re.search(match, err), err
    assert not os.path.exists(out / "parts") or os.listdir(out / "parts") == []
