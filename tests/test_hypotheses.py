"""Table II's hypothesis test (repro.hypotheses): statistics by hand, report section."""

import json
import math

import pytest
from scipy import stats

from fedjax_abc.repro import hypotheses, paper
from fedjax_abc.repro import report as _report

S = [4, 20, 40]


def _ours(z=None, factor=1.0, se_frac=0.1):
    """Gaps at factor x the paper's, standard error se_frac x the paper's; or at z s.e."""
    out = {}
    for d, row in paper.TABLE2_GAP.items():
        out[f"{d:g}"] = {}
        for s in S:
            se = se_frac * row[s]
            mean = row[s] + z * se if z is not None else factor * row[s]
            out[f"{d:g}"][str(s)] = {"mean": mean, "stderr": se}
    return out


def test_gap_test_by_hand():
    t = hypotheses.gap_test(_ours(z=2.0), paper.TABLE2_GAP, S)
    assert t["chi2"] == pytest.approx(12 * 4.0) and t["dof"] == 12
    assert t["p_value"] == pytest.approx(stats.chi2.sf(48.0, 12))
    assert t["max_abs_z"] == pytest.approx(2.0)
    # The paper's gaps fall with S by far more than 10% standard errors: ordered.
    assert set(t["S_orderings"].values()) == {"yes"} and t["verdict"] == "reproduces"
    assert t["log10_ratio"]["mean"] == pytest.approx(math.log10(1.2))


def test_gap_test_levels_and_orderings():
    t = hypotheses.gap_test(_ours(factor=2.0), paper.TABLE2_GAP, S)  # twice the paper: z = 10
    assert t["max_abs_z"] == pytest.approx(10.0) and t["verdict"] == "S-dependence only"
    rising = {d: {str(s): {"mean": 1e-3 * s / 4, "stderr": 1e-5} for s in S}
              for d in ("20", "50", "100", "200")}
    t = hypotheses.gap_test(rising, paper.TABLE2_GAP, S)
    assert t["verdict"] == "rejected" and t["S_ordering_holds"] is False
    assert t["z"]["20"]["4"] == pytest.approx((1e-3 - 9.31e-4) / 1e-5)
    # within the paper's gaps, but one S-step not significant: still the paper's direction
    noisy = _ours(z=0.0, se_frac=0.1)
    noisy["50"]["20"]["stderr"] = noisy["50"]["40"]["stderr"] = 1e-3
    t = hypotheses.gap_test(noisy, paper.TABLE2_GAP, S)
    assert t["S_orderings"]["50"] == "direction only" and t["verdict"] == "reproduces"
    assert t["S_steps_significant"] == 6 and t["S_steps"] == 8


def test_alternative_settings():
    assert hypotheses.alternative_settings("stated", None) == dict(
        alpha=1e-4, Q=10, T=50_000, x0_offset=10.0, x0_point=None)
    assert hypotheses.alternative_settings("alpha", 1e-3)["alpha"] == 1e-3
    with pytest.raises(ValueError, match="unknown Table II setting"):
        hypotheses.alternative_settings("beta", 1.0)


def _doc(reproducing):
    alts = []
    for j, (setting, value, why) in enumerate(paper.TABLE2_ALTERNATIVES[:3]):
        ours = _ours(z=1.0) if (reproducing and j == 1) else _ours(factor=5.0)
        cfg = hypotheses.alternative_settings(setting, value)
        alts.append({"setting": setting, "value": value, "why": why, **cfg,
                     "gap": ours, **hypotheses.gap_test(ours, paper.TABLE2_GAP, S)})
    config = dict(scale="reduced trials", trials=40, rounds=None, precision="float64", seed=0,
                  wall_seconds=1.0, timings=[], versions={"jax": "x"}, device={"devices": ["cpu"]},
                  stated={"alpha": 1e-4, "Q": 10, "T": 50000, "x0_offset": 10.0}, z_max=3.0)
    return {"experiment": "table2_hypotheses", "config": config, "alternatives": alts}


@pytest.mark.parametrize("reproducing", [False, True])
def test_report_section(tmp_path, reproducing):
    res = tmp_path / "results"
    res.mkdir()
    (res / "table2_hypotheses.json").write_text(json.dumps(_doc(reproducing)))
    text = _report.render(str(res), str(tmp_path / "r.md"))
    assert "## Table II: which single reading of the settings reproduces it?" in text
    assert "| stated | - | Section IV-B as printed | 1.92e+04 | 0 | 40 |" in text
    assert "**Not at the paper's scale:**" not in text
    if reproducing:
        assert "| alpha | 0.001 |" in text and "| **reproduces** |" in text
        assert "**Result.** alpha = 0.001 reproduces all 12 gaps" in text
    else:
        assert "**Result.** No single change reproduces Table II" in text
        assert "S-dependence only" in text
