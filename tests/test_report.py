"""The report generator on a small hand-made result set, its checks, and the offsets draw.

The report file is replaced atomically (a failing write keeps the previous one), and
``fedjax-abc report`` rejects bad result files in one line.
"""

import json
import os
import shutil

import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import checks as chk
from fedjax_abc.repro import offsets as offs
from fedjax_abc.repro import paper
from fedjax_abc.repro import report as _report
from old_files import BAD_TEXT, OLD, old_file, unchanged
def _config(**kw):
    base = dict(scale="paper", trials=100, rounds=50000, precision="float64", seed=0,
                wall_seconds=1.0, timings=[], versions={"jax": "x"}, device={"devices": ["cpu:0"]})
    base.update(kw)
    return base


def _fig1():
    S = [1, 4, 8, 16]
    means = {1: 1e-3, 4: 5e-4, 8: 2e-4, 16: 1e-4}
    return {"experiment": "fig1", "S": S, "rounds": [0, 1],
            "config": _config(n=16, Q=5, alpha=1e-3, x0=10.0, f_star=0.0273),
            "mean_gap": {str(s): [1.0, means[s]] for s in S},
            "ci95_gap": {str(s): [0.0, 1e-6] for s in S},
            "final_gap": {str(s): {"mean": means[s], "stderr": 1e-6} for s in S}}


def _table2(z=2.0):
    rows = []
    for d in (20.0, 50.0, 100.0, 200.0):
        gap = {str(S): {"mean": paper.TABLE2_GAP[d][S] * (1 + 0.1 * z),
                        "stderr": paper.TABLE2_GAP[d][S] * 0.1} for S in (4, 20, 40)}
        nf = {"gap_at_T": 0.3, "x_minus_x_star_at_T": 7.5, "horizon": 500000,
              "first_round_at_paper_gap": {"4": 200000, "20": 220000, "40": 250000},
              "start_offset_for_paper_gap": {"4": 0.5, "20": 0.6, "40": 0.8}}
        rows.append({"d_max": d, "sigma_f_star": paper.TABLE2_SIGMA[d], "bgd_sum": paper.TABLE2_BGD[d],
                     "gap": gap, "noise_free": nf})
    return {"experiment": "table2", "rows": rows,
            "config": _config(n=40, Q=10, alpha=1e-4, x0="x* + 10", S=[4, 20, 40],
                              offsets_draw={"code": "CODE", "search": "SEARCH"})}


def _fig3(slope=0.0):
    Q = [3, 10, 30, 100]
    dq = [0.5 * q ** slope for q in Q]
    res = {"4": {"mean": [2e-3] * 4, "stderr": [1e-5] * 4, "ci95": [2e-5] * 4},
           "40": {"mean": [1e-4] * 4, "stderr": [1e-6] * 4, "ci95": [2e-6] * 4}}
    return {"experiment": "fig3", "Q": Q, "residual": res,
            "D_Q": {"mean": dq, "stderr": [0.01] * 4, "ci95": [0.0196] * 4},
            "config": _config(S=[4, 40], gamma=1e-2, x0="x* + 10", D_Q_formula="F"),
            "constants": {"delta_f": 0.46, "sigma_f_star": 52.675, "I_S": 36 / 39, "S": 4, "n": 40}}


def _write(tmp_path, docs):
    res = tmp_path / "results"
    res.mkdir()
    for doc in docs:
        (res / f"{doc['experiment']}.json").write_text(json.dumps(doc))
    return res


def test_report_numbers_and_verdicts(tmp_path):
    res = _write(tmp_path, [_fig1(), _table2(z=2.0), _fig3(slope=0.0)])
    out = tmp_path / "docs" / "reproduction.md"
    _report.write_report(str(res), str(out))
    text = out.read_text()
    # Table II: every gap 2 standard errors above the paper's.
    assert text.count("| 9.31e-04 | 2 |") == 1 and "0 of 12 gaps differ" in text
    assert "| 200 | 0.9980 | 0.998 | 52.6750 | 52.675 | yes |" in text
    # Fig. 1: strictly decreasing in S, each step hundreds of standard errors.
    assert "*Smaller S leads to larger gaps.*" in text and "**holds**" in text
    # Fig. 3: constant D_Q: sqrt(Q) rejected, constant not.
    assert "a pure c sqrt(Q) is rejected at 5% and a constant is not" in text
    assert "Not run: table2_hypotheses, remark4, lemmas, thm1, thm2, thm3, faults." in text
    assert "](../results/fig1.png)" in text or "fig1.png missing" in text


def test_report_flags_disagreement_and_scale(tmp_path):
    t2 = _table2(z=50.0)
    t2["config"]["scale"] = "quick"
    res = _write(tmp_path, [t2, _fig3(slope=0.5)])
    text = _report.render(str(res), str(tmp_path / "r.md"))
    assert "**Not at the paper's scale:** table2" in text
    assert "12 of 12 gaps differ from the paper's by more than 3" in text
    assert "beyond the trial noise" in text
    assert "alpha Q T needed (stated 50)" in text and "250 (5.00x)" in text
    assert "**not shown**: the sqrt(Q) trend is not rejected" in text


def test_render_needs_results(tmp_path):
    with pytest.raises(ValueError, match="no result files"):
        _report.render(str(tmp_path), str(tmp_path / "r.md"))


def test_ordering_and_fits():
    assert chk.ordering([3.0, 2.0, 1.0], [0.1, 0.1, 0.1], increasing=False).verdict == "yes"
    assert chk.ordering([3.0, 2.9, 1.0], [0.1, 0.1, 0.1], increasing=False).verdict == "direction only"
    assert chk.ordering([1.0, 2.0], [0.1, 0.1], increasing=False).verdict == "contradicted"
    assert chk.ordering([1.0, 1.1], [0.1, 0.1], increasing=False).verdict == "no"
    assert chk.z_diff(2.0, 0.3, 1.0, 0.4) == pytest.approx(2.0)
    q = np.array([3.0, 10, 30, 100])
    s = chk.log_slope(q, 2 * q ** -0.7, 0.01 * q ** -0.7)
    assert s.slope == pytest.approx(-0.7) and s.points == 4
    f = chk.trend_fit(q, 3 * np.sqrt(q), np.ones(4), 0.5)
    assert f.amplitude == pytest.approx(3.0) and f.chi2 == pytest.approx(0.0, abs=1e-20)
    assert chk.within_printed(0.9975, 0.998) and not chk.within_printed(0.9960, 0.998)


def test_paper_offsets_reproduce_sigma_to_three_decimals():
    for d_max, printed in paper.TABLE2_SIGMA.items():
        d = offs.paper_offsets(d_max)
        assert d.shape == (40,) and d[0] == d[1] == 0.0 and d[2:].min() >= 0 and d.max() <= d_max
        p = fa.problems.huber_offsets(offsets=d)
        assert f"{float(p.sigma_f_star):.3f}" == f"{printed:.3f}"
        assert float(offs.huber_f_star(d)[0]) == pytest.approx(float(p.f_star), abs=1e-9)
    # np.random.seed(42); np.random.uniform(0, Dmax, 38), written out for one Dmax.
    np.random.seed(42)
    np.testing.assert_array_equal(offs.paper_offsets(20.0)[2:], np.random.uniform(0, 20.0, 38))


def test_offsets_search_finds_only_the_paper_draw_nearby():
    found = offs.search_draw(seeds=range(35, 50))
    assert [(f.convention, f.seed) for f in found] == [("numpy-legacy", 42)]


@pytest.mark.slow
def test_offsets_search_full():
    found = offs.search_draw(seeds=range(10001))
    assert [(f.convention, f.seed) for f in found] == [(offs.PAPER_DRAW.convention, offs.PAPER_DRAW.seed)]


# ------------------------------------------------------------- against the shipped results


def test_shipped_comparison_counts_same_rounding_and_different(tmp_path):
    from fedjax_abc.repro import shipped

    (tmp_path / "ref").mkdir()
    (tmp_path / "ours").mkdir()
    ref = _write(tmp_path / "ref", [_fig1(), _table2(z=2.0)])
    same_fig1, t2 = _fig1(), _table2(z=2.0)
    t2["config"]["trials"] = 50  # a setting that makes the numbers incomparable is named
    res = _write(tmp_path / "ours", [same_fig1, t2])
    ours, theirs = _report.load(str(res)), _report.load(str(ref))
    c = shipped.compare_documents(ours["fig1"], theirs["fig1"])
    assert c["settings"] == [] and c["compared"] > 10 and c["same"] == c["compared"]
    assert c["where"] is None

    doc = json.loads(json.dumps(ours["fig1"]))
    doc["mean_gap"]["4"][1] *= 1 + 1e-12  # rounding
    doc["final_gap"]["8"]["mean"] *= 1.01  # a change
    c = shipped.compare_documents(doc, theirs["fig1"])
    assert (c["rounding"], c["different"]) == (1, 1)
    assert c["where"] == "final_gap.8.mean" and c["largest"] == pytest.approx(0.01 / 1.01)
    assert shipped.compare_documents(ours["table2"], theirs["table2"])["settings"] == ["trials"]

    text = _report.render(str(res), str(tmp_path / "r.md"), reference=str(ref))
    assert "## Against the shipped results" in text
    assert "| fig1 | none |" in text and "| table2 | trials |" in text
    assert "Against the shipped" not in _report.render(str(ref), str(tmp_path / "r.md"),
                                                       reference=str(ref))


def test_the_shipped_results_are_found_beside_the_package():
    from fedjax_abc.repro import shipped

    folder = shipped.reference_folder()
    assert folder is not None and folder.endswith("docs/results")


# ------------------------------------------------- the report file is replaced atomically


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))




def test_write_report_failing_keeps_the_old_report(tmp_path, monkeypatch):
    out = old_file(tmp_path, "reproduction.md")
    monkeypatch.setattr(_report, "render", lambda results, out, reference=None: BAD_TEXT)
    with pytest.raises(UnicodeEncodeError):
        _report.write_report(str(tmp_path / "results"), str(out))
    unchanged(out)


# -------------------------------------- fedjax-abc report rejects bad results in one line


@pytest.fixture
def results(tmp_path):
    """A copy of the committed results (JSON only)."""
    res = tmp_path / "results"
    res.mkdir()
    for name in _report.ORDER:
        shutil.copy(os.path.join(REPO, "docs", "results", f"{name}.json"), res)
    return res


def _report_fails(capsys, results, out, *fragments):
    out.write_text(OLD)
    assert cli.main(["report", "--results", str(results), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("fedjax-abc: error:")
    for fragment in fragments:
        assert fragment in err, err
    assert out.read_text() == OLD  # the previous report stays
    return err


def test_report_of_the_committed_results_works(results, tmp_path):
    out = tmp_path / "reproduction.md"
    assert cli.main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert "Table II" in out.read_text()


def test_report_truncated_json(results, tmp_path, capsys):
    path = results / "table2.json"
    path.write_text(path.read_text()[: len(path.read_text()) // 2])
    _report_fails(capsys, results, tmp_path / "r.md", str(path), "not valid JSON")


def test_report_empty_json(results, tmp_path, capsys):
    (results / "thm2.json").write_text("")
    _report_fails(capsys, results, tmp_path / "r.md", "thm2.json", "not valid JSON")


def test_report_wrong_experiment(results, tmp_path, capsys):
    shutil.copy(results / "fig3.json", results / "fig1.json")
    _report_fails(capsys, results, tmp_path / "r.md", "fig1.json",
                  "experiment is 'fig3', expected 'fig1'")


@pytest.mark.parametrize("name, drop, key", [
    ("fig1", lambda d: d.pop("final_gap"), "'final_gap'"),
    ("table2", lambda d: d["config"].pop("n"), "'n'"),
    ("fig3", lambda d: d["D_Q"].pop("stderr"), "'stderr'"),
    ("thm1", lambda d: d.pop("bgd_lhs"), "'bgd_lhs'"),
    ("thm3", lambda d: d["checks"][0].pop("label"), "'label'"),
])
def test_report_missing_key(results, tmp_path, capsys, name, drop, key):
    path = results / f"{name}.json"
    doc = json.loads(path.read_text())
    drop(doc)
    path.write_text(json.dumps(doc))
    _report_fails(capsys, results, tmp_path / "r.md", str(path), f"missing entry {key}")


@pytest.mark.parametrize("change, fragment", [
    (lambda doc: [], "not a result document"),
    (lambda doc: dict(doc, checks=3), "malformed entry (TypeError"),
    (lambda doc: dict(doc, checks=[dict(c, bound="big") for c in doc["checks"]]),
     "malformed entry (ValueError"),
])
def test_report_malformed_document(results, tmp_path, capsys, change, fragment):
    path = results / "thm2.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    _report_fails(capsys, results, tmp_path / "r.md", "thm2.json", fragment)


def test_report_without_results(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    _report_fails(capsys, empty, tmp_path / "r.md", "no result files")


def test_durations_are_not_compared():
    from fedjax_abc.repro import shipped

    a = {"config": {}, "checks": [{"seconds": 1.0, "slope": 2.0}]}
    b = {"config": {}, "checks": [{"seconds": 9.0, "slope": 2.0}]}
    c = shipped.compare_documents(a, b)
    assert (c["compared"], c["same"], c["different"]) == (1, 1, 0)
