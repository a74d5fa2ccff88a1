"""The report's checks on deliberately faulty simulators: each fault is flagged by the checks
named for it, at a gross size, and the correct component passes them (fixed keys, a small
scale of problem (27)); the detection thresholds and the NumPy reference by hand."""

import jax
import numpy as np
import pytest

from fedjax_abc.repro import faults

SMALL = dict(faults.SETTING, T=100, trials=1000, round_trials=50_000, draws=5000, abc_samples=500,
             noise_trials=20_000, stationary=dict(faults.STATIONARY, trials=2000))
# the cheapest of the checks named for each fault (the default run), and all of them (slow)
CHEAPEST = {"biased sampler": "eq9", "unweighted mean": "lemma2", "oracle variance": "abc",
            "stepsize applied twice": "noise_free", "missing server step": "noise_free",
            "oracle variance too small": "noise", "noise reused across local steps": "noise",
            "sampling with replacement": "eq9_pairs", "Bernoulli participation": "eq9_pairs"}
GROSS = {"biased sampler": 10.0, "unweighted mean": 10.0, "oracle variance": 2.0,
         "stepsize applied twice": 2.0, "missing server step": 0.5,
         "oracle variance too small": 1 / SMALL["S"], "noise reused across local steps": 10.0,
         "sampling with replacement": 1.0, "Bernoulli participation": 1.0}


@pytest.fixture(scope="module")
def case():
    return faults.case(SMALL)


def _fault(name):
    return next(f for f in faults.faults(SMALL["S"]) if f.name == name)


def _key(i):
    return jax.random.key(i)


def _flags(case, fault, factor, checks):
    out = faults.run_fault(fault, factor, case, SMALL, _key(0), checks=tuple(checks))
    return {name: out[name]["flag"] for name in checks}


def _caught_and_correct_passes(case, name, checks):
    fault = _fault(name)
    assert _flags(case, fault, GROSS[name], checks) == {k: True for k in checks}
    # the correct component (the neutral size) passes the same checks; for the unweighted
    # case the NumPy reference applies the weights, which the neutral size makes all equal
    assert _flags(case, fault, fault.neutral, checks) == {k: False for k in checks}


@pytest.mark.parametrize("name", list(CHEAPEST))
def test_a_named_check_flags_each_fault(case, name):
    assert CHEAPEST[name] in _fault(name).expected
    _caught_and_correct_passes(case, name, [CHEAPEST[name]])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHEAPEST))
def test_every_named_check_flags_each_fault(case, name):
    _caught_and_correct_passes(case, name, list(_fault(name).expected))


@pytest.mark.slow
def test_checks_that_cannot_see_a_fault_pass_it(case):
    """What each check cannot see: full participation hides the sampler, exact gradients
    hide the oracle, one round hides a skipped later round."""
    assert _flags(case, _fault("biased sampler"), 10.0, ["noise_free"]) == {"noise_free": False}
    assert _flags(case, _fault("oracle variance"), 2.0, ["noise_free", "lemma2"]) == \
        {"noise_free": False, "lemma2": False}
    assert _flags(case, _fault("missing server step"), 0.5, ["lemma2"]) == {"lemma2": False}


@pytest.mark.parametrize("name, size, check", [
    ("oracle variance too small", 0.0, "noise"),  # a noiseless oracle
    ("oracle variance", 1.25, "noise"),  # two-sided: too large as well as too small
    ("noise reused across local steps", 2.0, "noise"),
    ("sampling with replacement", 0.25, "eq9_pairs"),
    ("Bernoulli participation", 0.25, "eq9_pairs"),
])
def test_the_new_checks_at_their_named_sizes(case, name, size, check):
    """The engine-level noise check catches a noiseless oracle, a variance too large, and
    noise reused by two steps; the pair probability of eq. (9) catches a quarter of the
    rounds drawn with replacement or by Bernoulli participation, which the inclusion
    frequencies of eq. (9) cannot see."""
    fault = _fault(name)
    assert check in fault.expected
    assert _flags(case, fault, size, [check]) == {check: True}
    if check == "eq9_pairs":
        assert _flags(case, fault, size, ["eq9"]) == {"eq9": False}


def test_the_component_level_abc_check_is_one_sided(case):
    """Assumption 2 bounds the variance from above: a variance too small by 1/S passes the
    abc check, and the engine-level noise check is what catches it."""
    fault = _fault("oracle variance too small")
    assert _flags(case, fault, 1 / SMALL["S"], ["abc", "noise"]) == {"abc": False, "noise": True}


def test_near_stationarity_the_reference_check_sees_the_noise(case):
    """From x* at alpha = 1e-3 for T = 2000 rounds the spread of x_T is the noise's and the
    sampling's: the reference check there catches a noiseless oracle, noise reused across all
    Q steps and Bernoulli participation, and passes the correct components; in the
    transient (from x* + 2 at the stepsize (22)) a variance 4x too large goes unseen."""
    check = "reference_stationary"
    for name, size in (("oracle variance too small", 0.0), ("noise reused across local steps", 10.0),
                       ("Bernoulli participation", 1.0)):
        fault = _fault(name)
        assert check in fault.expected
        assert _flags(case, fault, size, [check]) == {check: True}, name
        assert _flags(case, fault, fault.neutral, [check]) == {check: False}, name
    loud = _fault("oracle variance")
    assert _flags(case, loud, 4.0, ["reference", check]) == {"reference": False, check: True}


def test_spread_over_seeds():
    fault = {"neutral": 1.0, "scan": [{"factor": v} for v in (1.0, 1.5, 2.0, 3.0)]}
    assert faults.spread_text([2.0] * 5, fault) == "2"
    assert faults.spread_text([2.0, 1.5, None, 2.0, 1.5], fault) == "<= 1.5 x2, 2 x2, - x1"
    assert faults.spread_text(["n/a"], fault) == "n/a"


def test_detection_threshold():
    f = (1.0, 1.5, 2.0, 3.0)
    assert faults.detection_threshold(f, [False, False, True, True], 1.0) == 2.0
    assert faults.detection_threshold(f, [False, True, False, True], 1.0) == 3.0  # not monotone
    assert faults.detection_threshold(f, [False, True, True, False], 1.0) is None
    assert faults.detection_threshold((0.0, 0.01, 0.5), [False, True, True], 0.0) == 0.01
    fault = {"neutral": 1.0, "scan": [{"factor": v} for v in f]}
    assert faults.threshold_text(1.5, fault) == "<= 1.5"
    assert faults.threshold_text(2.0, fault) == "2"
    assert faults.threshold_text(None, fault) == "-" and faults.threshold_text("n/a", fault) == "n/a"


def test_reference_run_by_hand():
    d = np.array([0.0, 0.0, 3.0, 10.0])
    x = faults.reference_run(d, 2.0, 4, 1, 0.1, 1, 1, 0, exact=True, full=True)
    assert x[0] == pytest.approx(2.0 - 0.1 * np.mean(np.clip(2.0 - d, -1, 1)), abs=1e-15)
    # identical clients: every sample of S gives y = x0 - alpha clip(x0 - 3) = 2.1 exactly;
    # importance weights 1 / (S n p_j) sum to 1 in expectation only
    same = np.full(4, 3.0)
    uniform = faults.reference_run(same, 2.0, 2, 1, 0.1, 1, 50, 0, exact=True)
    assert np.allclose(uniform, 2.1, atol=1e-15)
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    hh = faults.reference_run(same, 2.0, 2, 1, 0.1, 1, 20_000, 0, exact=True, probs=probs)
    w = 1.0 / (4 * probs)  # one draw's weight times S
    se = 0.1 * np.sqrt((probs * w ** 2).sum() - 1.0) / np.sqrt(2 * 20_000)
    assert abs(hh.mean() - 2.1) < 4 * se and hh.std() > 0
