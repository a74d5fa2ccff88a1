"""reproduce remark4 (computation only) and its report section; Fig. 3's shape fits."""

import json
import math

import numpy as np
import pytest

from fedjax_abc.repro import checks as chk
from fedjax_abc.repro import common, paper, remark4
from fedjax_abc.repro import report as _report


def test_crossover_q_solves_the_equality():
    import fedjax_abc.theory as th
    n, S, T, sigma, delta, zeta = 40, 4, 100_000, 52.675, 0.4583, 0.9975
    q = remark4.crossover_q(1.0, delta, sigma, th.sampling_factor(n, S), zeta)
    ours = th.theorem2_leading_terms(1.0, 1.0, 0.0, sigma, delta, n, S, 10, T).sampling
    # [10]'s term at the (real) crossover Q equals ours: I zeta^2 sqrt(q / (S T))
    assert th.sampling_factor(n, S) * zeta * math.sqrt(q / (S * T)) == pytest.approx(ours, rel=1e-12)


def test_run_and_report(tmp_path, monkeypatch):
    monkeypatch.setattr(paper, "BGD_POINTS", 2001)
    monkeypatch.setattr(paper, "TABLE2", dict(paper.TABLE2, d_max=[20.0, 200.0]))
    doc = remark4.run(common.Settings(), common.Progress("remark4", enabled=False))
    for r in doc["rows"]:
        assert max(r["ours"]) == pytest.approx(min(r["ours"]), rel=1e-12)  # no Q in (24)
        y = np.asarray(r["yang2021"])
        assert y[-1] / y[0] == pytest.approx(math.sqrt(doc["Q"][-1] / doc["Q"][0]), rel=1e-12)
    res = tmp_path / "results"
    remark4.write(doc, str(res))
    text = _report.render(str(res), str(tmp_path / "r.md"))
    assert "## Remark 4 / Table I: the sampling term of (24) against that of [10]" in text
    assert "Log-log slopes in Q: (24) 0.000, 0.000; [10] 0.500, 0.500" in text
    assert "[10] / (24) at Q = 3, 10, 100, 200" in text


def test_linear_fit_by_hand():
    q = np.array([3.0, 10.0, 30.0, 100.0])
    y = 0.5 + 2.0 / q
    f = chk.linear_fit([np.ones(4), 1 / q], y + np.array([0.01, -0.01, 0.01, -0.01]), [0.01] * 4)
    assert f.dof == 2 and f.coef[0] == pytest.approx(0.5, abs=0.02)
    const = chk.linear_fit([np.ones(4)], y, [0.01] * 4)
    assert const.coef[0] == pytest.approx(np.mean(y)) and const.p_value < 1e-6


def test_fig3_shape_table(tmp_path):
    Q = [3, 5, 10, 30, 100]
    dq = [0.01 + 0.1 / q for q in Q]
    res = {"4": {"mean": [2e-3] * 5, "stderr": [1e-5] * 5, "ci95": [2e-5] * 5},
           "40": {"mean": [1e-4] * 5, "stderr": [1e-6] * 5, "ci95": [2e-6] * 5}}
    cfg = dict(scale="paper", trials=100, rounds=100000, precision="float64", seed=0,
               wall_seconds=1.0, timings=[], versions={"jax": "x"}, device={"devices": ["cpu"]},
               S=[4, 40], gamma=1e-2, x0="x* + 10", D_Q_formula="F")
    doc = {"experiment": "fig3", "Q": Q, "residual": res, "config": cfg,
           "D_Q": {"mean": dq, "stderr": [1e-3] * 5, "ci95": [2e-3] * 5},
           "constants": {"delta_f": 0.46, "sigma_f_star": 52.675, "I_S": 36 / 39, "S": 4, "n": 40}}
    (tmp_path / "fig3.json").write_text(json.dumps(doc))
    text = _report.render(str(tmp_path), str(tmp_path / "r.md"))
    assert "| a + b/Q | 0.01 (+/-" in text and "| 0.0 | 3 | 1 | not rejected |" in text
    assert "Best of the one- and two-term shapes: a + b/Q (p = 1)" in text
    assert "| constant |" in text and "| c sqrt(Q) |" in text
