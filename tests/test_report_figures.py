"""The report's figures drawn from result documents: Fig. 2's panels and curves are the
document's trajectories, and every figure of the theorems names both axes."""

import json
import os

import numpy as np
import pytest

from fedjax_abc.repro import common, table2, theorems

SHIPPED = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "results")


def _doc(name):
    with open(os.path.join(SHIPPED, f"{name}.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _table2_doc(reading: bool) -> dict:
    rounds = [0, 50, 100]
    rng = np.random.default_rng(0)
    dms, S_list = [20, 200], [4, 40]

    def curves():
        return ({str(d): {str(S): list(np.exp(-rng.random(3).cumsum())) for S in S_list} for d in dms},
                {str(d): {str(S): [1e-3] * 3 for S in S_list} for d in dms})

    mean, ci = curves()
    doc = {"config": {"S": S_list, "alpha": 1e-4, "n": 40, "Q": 10, "trials": 5, "x0": "x* + 10"},
           "rows": [{"d_max": float(d)} for d in dms],
           "trajectories": {"rounds": rounds, "mean_gap": mean, "ci95_gap": ci}}
    if reading:
        m2, c2 = curves()
        doc["reading"] = {"alpha": 1e-3, "mean_gap": m2, "ci95_gap": c2}
    return doc


@pytest.mark.parametrize("reading", [False, True])
def test_fig2_one_panel_per_S_one_curve_per_dmax(reading):
    """Fig. 2: a panel per S (and a second row at the reading alpha where the results carry
    it), in each a curve per Dmax whose values are the document's mean gaps."""
    doc = _table2_doc(reading)
    fig = table2.figure(doc)
    try:
        axes = np.asarray(fig.axes).reshape(1 + reading, len(doc["config"]["S"]))
        rows = [doc["trajectories"]["mean_gap"]] + ([doc["reading"]["mean_gap"]] if reading else [])
        for row_axes, mean in zip(axes, rows):
            assert row_axes[0].get_ylabel()
            for ax, S in zip(row_axes, doc["config"]["S"]):
                lines = ax.get_lines()
                assert len(lines) == len(doc["rows"])
                for line, r in zip(lines, doc["rows"]):
                    np.testing.assert_allclose(line.get_ydata(), mean[str(int(r["d_max"]))][str(S)])
                    np.testing.assert_allclose(line.get_xdata(), doc["trajectories"]["rounds"])
        assert all(ax.get_xlabel() for ax in axes[-1])
    finally:
        common.pyplot().close(fig)


@pytest.mark.parametrize("name, draw", [("thm1", theorems.thm1_figure),
                                        ("thm2", theorems.thm2_figure)])
def test_theorem_figures_name_both_axes(name, draw):
    """thm1.png and thm2.png, drawn from the shipped results, label both axes."""
    fig = draw(_doc(name))
    try:
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel(), name
    finally:
        common.pyplot().close(fig)
