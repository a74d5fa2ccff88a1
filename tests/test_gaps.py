"""Table II's cells against the paper: chi^2 over the cells, and the late window (its exact
standard error from the trials, or the upper bound the shipped trajectories allow)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fedjax_abc.repro import gaps, table2
from fedjax_abc.repro.checks import Z95


def test_cell_fit_by_hand():
    f = gaps.cell_fit([1.0, -2.0, None, math.nan])
    assert (f.chi2, f.dof, f.max_abs_z) == (5.0, 2, 2.0)
    assert f.p_value == pytest.approx(math.exp(-2.5))  # chi^2 on 2 dof
    assert gaps.cell_fit([None]) is None


def _paths(rng, trials=400, records=51):
    """Gap paths with a shared random level per path (records strongly correlated)."""
    level = np.exp(0.5 * rng.standard_normal((trials, 1)))
    return level * (1.0 + 0.1 * rng.standard_normal((trials, records)))


def test_late_window_exact_and_bound():
    rng = np.random.default_rng(0)
    gap = _paths(rng)
    rounds = np.arange(0, 5001, 100)
    res = SimpleNamespace(rounds=rounds, gap=gap, diverged=np.zeros(gap.shape[0], bool))
    exact = table2.late_window(res, 0.9 * rounds[-1])
    window = rounds >= 4500
    per_trial = gap[:, window].mean(axis=1)
    assert exact["from_round"] == 4500
    assert exact["mean"] == pytest.approx(per_trial.mean())
    assert exact["stderr"] == pytest.approx(per_trial.std(ddof=1) / math.sqrt(gap.shape[0]))
    # the trajectories of a result file hold the mean and the 95% half-width per record
    se = gap.std(axis=0, ddof=1) / math.sqrt(gap.shape[0])
    traj = {"rounds": rounds.tolist(), "mean_gap": {"20": {"4": gap.mean(0).tolist()}},
            "ci95_gap": {"20": {"4": (Z95 * se).tolist()}}}
    m, bound, is_exact = gaps.late_window_of(traj, None, "20", 4)
    assert not is_exact and m == pytest.approx(exact["mean"])
    # the s.d. of an average is at most the average of the s.d. (Minkowski), exactly
    assert exact["stderr"] <= bound * (1 + 1e-12)
    # with a shared level per path the bound is nearly tight; with independent records loose
    assert bound < 1.1 * exact["stderr"]
    m2, se2, is_exact2 = gaps.late_window_of(traj, {"20": {"4": exact}}, "20", 4)
    assert is_exact2 and (m2, se2) == (exact["mean"], exact["stderr"])


def test_late_window_leaves_out_diverged_trials():
    gap = np.ones((4, 3))
    gap[1] = np.nan
    res = SimpleNamespace(rounds=np.array([0, 5, 10]), gap=gap,
                          diverged=np.array([False, True, False, False]))
    w = table2.late_window(res, 5)
    assert (w["mean"], w["stderr"], w["from_round"]) == (1.0, 0.0, 5)
