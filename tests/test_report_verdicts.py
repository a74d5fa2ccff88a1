"""The report's verdicts that can fail: per-path slopes (Theorem 3), late windows (Theorem 2's
transient), the schedules' classification, the alpha profile and the scorecard's words."""

import math
import os
import shutil

import numpy as np
import pytest

import fedjax_abc.theory as theory
from fedjax_abc._theory._check import late_windows
from fedjax_abc.repro import report, theorems

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _paths(rng, exponent, m=200, noise=0.3):
    """m paths of c t^exponent with lognormal noise per record, t = 0, 10, ..., 10000."""
    t = np.arange(0, 10_001, 10, dtype=float)
    level = np.maximum(t, 1.0) ** exponent
    return t, level * np.exp(noise * rng.standard_normal((m, t.size)))


@pytest.mark.parametrize("exponent", [-0.5, -0.3, 0.0])
def test_path_slopes_recover_a_power_law(exponent):
    t, norms = _paths(np.random.default_rng(0), exponent)
    own = theorems.path_slopes(norms, t, t[-1] / 10)
    # each path's slope from 8 block means of ~110 records: spread ~ 0.3 / sqrt(110) / 0.67
    assert abs(own.mean() - exponent) < 4 * own.std(ddof=1) / math.sqrt(own.size) + 1e-3
    assert own.std(ddof=1) < 0.1


def test_path_statistics_standard_errors_come_from_the_paths():
    """Records correlated along a path (a shared random level per path) widen the spread of
    the paths' slopes and the bootstrap error; a fit over records would not see it."""
    rng = np.random.default_rng(1)
    t, norms = _paths(rng, -0.5, m=100, noise=0.05)
    tilt = np.exp(0.3 * rng.standard_normal((100, 1)) * np.log(np.maximum(t, 1.0) / 1000.0))
    st = theorems.path_statistics(norms * tilt, t, [0.1], t[-1] / 10, seed=0)
    # the tilt gives each path a slope -0.5 + 0.3 N(0, 1): the s.e. of the mean is ~0.03
    assert 0.015 < st["path_slope_stderr"] < 0.06
    assert 0.015 < st["slope_mean_stderr"] < 0.08
    assert abs(st["path_slope_mean"] + 0.5) < 4 * st["path_slope_stderr"]
    # P(slope < -0.1) = P(N(0, 1) < 4/3) = 0.908; binomial s.e. on 100 paths 0.029
    assert abs(st["fraction_paths_falling"] - 0.908) < 4 * 0.029
    flat = theorems.path_statistics(_paths(rng, 0.0, m=100)[1], t, [0.1], t[-1] / 10)
    assert flat["fraction_paths_falling"] < 0.1  # negative control: a stationary run


def _run(slope_mean, se, path_mean, path_se, falling):
    return {"slope_mean": slope_mean, "slope_mean_stderr": se, "path_slope_mean": path_mean,
            "path_slope_stderr": path_se, "fraction_paths_falling": falling}


def test_theorem3_verdict_discriminates():
    assert report._thm3_verdict(_run(-0.5, 0.01, -0.5, 0.01, 1.0)) == "every path"
    assert report._thm3_verdict(_run(-0.5, 0.01, -0.5, 0.05, 0.7)) == "mean only"
    assert report._thm3_verdict(_run(-0.05, 0.01, -0.05, 0.01, 0.2)) == "levels off"
    assert report._thm3_verdict(_run(-0.12, 0.05, -0.12, 0.05, 1.0)) == "levels off"


def test_thm3_schedules_against_theorem3():
    """The experiment's schedules are functions of t; their tails classify them, and the
    constant controls fail."""
    alpha0, T, t0 = 0.00625, 1000, 10
    for name, schedule, theorem in theorems.thm3_schedules(alpha0, [0.6, 1.0], t0):
        c = theory.check_theorem3_schedule(schedule, 1.0, 1.0, 10, T)
        assert c.holds, name
        assert c.tail_exponent_ok == theorem, name
        values = np.asarray([schedule(t) for t in (0, t0, 4 * t0)], float)
        assert values[0] == pytest.approx(alpha0 / 10 if name.endswith("/ 10") else alpha0)
        assert values[1] == pytest.approx(values[0])  # the burn-in
        assert (values[2] < 0.999 * values[0]) == theorem, name


def test_late_windows_tell_a_transient_from_a_stationary_run():
    rng = np.random.default_rng(2)
    t = np.arange(0, 1001, 10.0)
    flat = late_windows(5.0 * np.exp(0.3 * rng.standard_normal((200, t.size))), t)
    assert abs(flat["late_slope"]) < 4 * flat["late_slope_stderr"]
    assert flat["late_mean"] == pytest.approx(5.0 * math.exp(0.045), rel=0.02)
    falling = late_windows((t + 1.0) ** -1.0 * np.exp(0.3 * rng.standard_normal((200, t.size))), t)
    assert abs(falling["late_slope"] + 1.0) < 4 * falling["late_slope_stderr"]
    assert falling["late_slope"] + 1.96 * falling["late_slope_stderr"] < -theorems.PLATEAU


def test_alpha_profile_sentence():
    def row(f, verdict):
        return {"factor": f, "alpha": 1e-3 * f, "chi2": 10.0, "max_abs_z": 2.0, "verdict": verdict}

    text = report._alpha_profile({"alpha_profile": [row(0.8, "rejected"), row(0.9, "reproduces"),
                                                    row(1.1, "reproduces"), row(1.2, "rejected")]})
    assert "pin alpha to between 0.8x and 1.2x the reading" in text[0]
    assert "reproduced from 0.9x to 1.1x), within -20% and +20%" in text[0]
    loose = report._alpha_profile({"alpha_profile": [row(0.8, "reproduces"), row(1.2, "reproduces")]})
    assert "do not pin alpha on either side" in loose[0]
    below = report._alpha_profile({"alpha_profile": [row(0.9, "rejected"), row(1.2, "reproduces")]})
    assert "bound alpha from below only: rejected at 0.9x, still reproduced at 1.2x" in below[0]


def test_scorecard_uses_one_legend(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    for name in report.ORDER:
        shutil.copy(os.path.join(REPO, "docs", "results", f"{name}.json"), res)
    text = report.render(str(res), str(tmp_path / "r.md"))
    card = text[text.index("## Scorecard"):text.index("## Fig. 1")]
    rows = [ln for ln in card.splitlines() if ln.startswith("| ") and not ln.startswith("| section")]
    assert len(rows) >= 20
    for ln in rows:
        word = ln.rsplit("| **", 1)[1].split("**", 1)[0]
        assert word in report.WORDS, ln
        assert ln.count(" | ") == 3, ln  # pipes inside cells are escaped
    with pytest.raises(ValueError, match="not one of"):
        report.say([], "x", "y", "z", "yes")
