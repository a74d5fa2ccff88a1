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


def _run(slope_mean, se, slope_max, max_se=None):
    return {"slope_mean": slope_mean, "slope_mean_stderr": se, "slope_max": slope_max,
            "slope_max_stderr": max_se}


def test_theorem3_verdicts_discriminate():
    # in mean: the slope's 95% interval must lie below -PLATEAU = -0.1
    assert report.thm3_mean_falls(_run(-0.5, 0.01, -0.5))
    assert not report.thm3_mean_falls(_run(-0.12, 0.05, -0.5))  # -0.12 + 0.098 > -0.1
    assert not report.thm3_mean_falls(_run(0.0, 0.01, 0.0))
    # almost surely: the maximum over the paths falls, stays level, or is undecided
    assert report.thm3_max_falls(_run(0.0, 0.0, -0.3)) is True
    assert report.thm3_max_falls(_run(0.0, 0.0, 0.01)) is False
    assert report.thm3_max_falls(_run(0.0, 0.0, -0.3, 0.05)) is True
    assert report.thm3_max_falls(_run(0.0, 0.0, -0.15, 0.05)) is None  # straddles -0.1
    assert report.thm3_max_falls(_run(0.0, 0.0, float("nan"))) is None


def test_slope_of_the_maximum_separates_schedules_from_constants():
    """On paths whose level falls as t^-0.5, the maximum over the paths falls too; on
    stationary paths it stays level: the statistic of the almost-sure verdict."""
    rng = np.random.default_rng(3)
    t, falling = _paths(rng, -0.5, m=100)
    st = theorems.path_statistics(falling, t, [0.1], t[-1] / 10, seed=0)
    flat = theorems.path_statistics(_paths(rng, 0.0, m=100)[1], t, [0.1], t[-1] / 10, seed=0)
    assert report.thm3_max_falls(st) is True and report.thm3_max_falls(flat) is False
    assert abs(st["slope_max"] + 0.5) < 4 * st["slope_max_stderr"] + 0.05
    assert abs(flat["slope_max"]) < 4 * flat["slope_max_stderr"] + 0.05


def test_thm3_schedules_against_theorem3():
    """The experiment's schedules are functions of t; their tails classify them, and the
    constant controls fail. Every schedule and control runs at alpha_0 through the burn-in
    t < t0; the control alpha_0 / 10 drops to it at t0."""
    alpha0, T, t0 = 0.00625, 1000, 10
    for name, schedule, theorem in theorems.thm3_schedules(alpha0, [0.6, 1.0], t0):
        c = theory.check_theorem3_schedule(schedule, 1.0, 1.0, 10, T)
        assert c.holds, name
        assert c.tail_exponent_ok == theorem and c.decided, name
        values = np.asarray([schedule(t) for t in (0, t0 - 1, t0, 4 * t0)], float)
        assert values[0] == pytest.approx(alpha0) and values[1] == pytest.approx(alpha0), name
        after = alpha0 / 10 if name.endswith("/ 10") else alpha0
        assert values[2] == pytest.approx(after), name  # the burn-in ends at t0
        assert (values[3] < 0.999 * values[2]) == theorem, name


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
    """The range comes from the chi^2 over all cells (p >= 0.05 kept), not from the
    single-cell verdicts."""
    def row(f, p, verdict="reproduces"):
        return {"factor": f, "alpha": 1e-3 * f, "chi2": 10.0, "p_value": p, "dof": 12,
                "max_abs_z": 2.0, "verdict": verdict}

    doc = {"config": {"trials": 20}, "alpha_profile": [
        row(0.8, 1e-6), row(0.9, 0.2), row(1.1, 0.5), row(1.5, 0.01), row(2.0, 0.3)]}
    text = report._alpha_profile(doc, {"p_value": 0.6})[0]
    assert "not rejected at 0.9x, 1x, 1.1x, 2x" in text and "(though rejected in between, at 1.5x)" in text
    assert "bound alpha from below only" in text  # nothing rejected above 2x
    pinned = report._alpha_profile({"config": {}, "alpha_profile": [
        row(0.9, 0.01, "reproduces"), row(1.1, 0.4), row(1.5, 0.03, "reproduces")]}, {"p_value": 0.3})[0]
    assert "pin alpha to between 0.9x and 1.5x the reading (within -10% and +50%)" in pinned
    loose = report._alpha_profile({"config": {}, "alpha_profile": [row(0.8, 0.3), row(1.2, 0.3)]})[0]
    assert "the gaps do not pin alpha" in loose
    none = report._alpha_profile({"config": {}, "alpha_profile": [row(0.8, 0.01)]}, {"p_value": 0.01})[0]
    assert "every value tested is rejected" in none
    card = []  # a reconciliation row: holds only where alpha is pinned on both sides
    report._alpha_profile({"config": {}, "alpha_profile": [
        row(0.9, 0.01), row(1.1, 0.4), row(1.5, 0.03)]}, {"p_value": 0.3}, card)
    report._alpha_profile({"config": {}, "alpha_profile": [row(0.8, 0.3), row(1.2, 0.3)]},
                          None, card)
    assert [(c.kind, c.verdict) for c in card] == [("reconciliation", "holds"),
                                                   ("reconciliation", "not shown")]
    assert "between 0.9x and 1.5x the reading" in card[0].ours


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
        assert ln.count(" | ") == 4, ln  # pipes inside cells are escaped
        assert ln.split(" | ")[3].strip() not in ("", "-"), ln  # every verdict names its statistic
    with pytest.raises(ValueError, match="not one of"):
        report.say([], "x", "y", "z", "yes")
    with pytest.raises(ValueError, match="kind"):
        report.say([], "x", "y", "z", "holds", kind="claim?")


def test_scorecard_counts_each_claim_once_and_no_non_claim(tmp_path):
    """The headline counts the paper's claims only: the alpha = 1e-3 reading and the
    controls sit in their own tables; a claim tested at both alphas is one row."""
    res = tmp_path / "results"
    res.mkdir()
    for name in report.ORDER:
        shutil.copy(os.path.join(REPO, "docs", "results", f"{name}.json"), res)
    text = report.render(str(res), str(tmp_path / "r.md"))
    head = text[text.index("## Scorecard"):text.index("### Reconciliation")]
    claims = [ln for ln in head.splitlines() if ln.startswith("| ") and not ln.startswith("| section")]
    keys = [tuple(ln.split(" | ")[:2]) for ln in claims]
    assert len(keys) == len(set(keys))  # each claim once
    assert not any("Negative controls" in ln or "hypotheses" in ln for ln in claims)
    counted = head[head.index("Counts over the "):].split("\n", 1)[0]
    total = int(counted.split("Counts over the ")[1].split(" ")[0])
    assert total == len(claims)
    assert sum(int(p.rsplit(" ", 1)[1].rstrip(".")) for p in counted.split(": ", 1)[1].split(", ")) == total
    section = "\n".join(ln for ln in claims if "a larger S lowers the gap (Dmax = 20)" in ln)
    assert section.count("| Table II |") == 1 and "alpha = 0.001" in section and "alpha = 0.0001" in section
    assert "**reproduced under a changed setting**" in section
    assert "D_Q is approximately constant in Q" in head
    for ln in claims:
        if "Remark 4" in ln:
            assert "**by construction**" in ln
    rec = text[text.index("### Reconciliation"):text.index("## Fig. 1")]
    assert "read with alpha = 0.001" in rec and "Negative controls" in rec
    for fault in ("biased sampler", "unweighted mean", "oracle variance", "stepsize applied twice",
                  "missing server step"):
        row = next(ln for ln in rec.splitlines() if f"the checks catch the fault: {fault}" in ln)
        assert "**holds**" in row and "the correct component passes" in row


def test_merged_readings():
    a = report.Claim("T", "c", "x", "not shown", statistic="s")
    b = report.Claim("T", "c", "y", "holds", statistic="s")
    m = report.merge_readings(a, b, "alpha = 1", "alpha = 2")
    assert m.verdict == "reproduced under a changed setting"
    assert m.ours == "alpha = 1: x (not shown); alpha = 2: y (holds)"
    assert report.merge_readings(b, a, "p", "q").verdict == "holds"
    assert report.merge_readings(a, a, "p", "q").verdict == "not shown"
