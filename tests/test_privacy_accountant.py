"""DP-FedAvg's privacy accountant: fa.theory.dp_event, dp_epsilon, dp_noise_multiplier."""

import math

import dp_accounting as dpa
import numpy as np
import pytest
from scipy import optimize, stats

import fedjax_abc as fa

th = fa.theory
NR = dpa.NeighboringRelation
DELTA = 1e-5


def rdp_accountant(relation=NR.ADD_OR_REMOVE_ONE):
    return dpa.rdp.RdpAccountant(neighboring_relation=relation)


def pld_accountant(relation=NR.ADD_OR_REMOVE_ONE):
    return dpa.pld.PLDAccountant(relation, value_discretization_interval=1e-4)


def gaussian_delta(eps, s):
    """Exact delta(eps) of the Gaussian mechanism, sensitivity 1, std s (Balle & Wang 2018)."""
    return stats.norm.cdf(-eps * s + 1 / (2 * s)) - math.exp(eps) * stats.norm.cdf(
        -eps * s - 1 / (2 * s))


def gaussian_epsilon(s, delta):
    return optimize.brentq(lambda e: gaussian_delta(e, s) - delta, 0.0, 50.0, xtol=1e-14)


# --- the same event as dp_accounting's own ------------------------------------------------


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("sampler", [fa.Poisson(0.02), fa.Bernoulli(0.02),
                                     fa.Poisson([0.02] * 500)], ids=["poisson", "bernoulli",
                                                                     "poisson-vector"])
def test_poisson_matches_dp_accounting(sampler, accountant):
    z, T = 2.0, 200
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(z)), T)
    assert th.dp_event(z, sampler, T, 500) == event
    acc = rdp_accountant() if accountant == "rdp" else pld_accountant()
    want = acc.compose(event).get_epsilon(DELTA)
    got = th.dp_epsilon(z, sampler, T, DELTA, 500, accountant=accountant)
    assert isinstance(got, float)
    assert got == pytest.approx(want, rel=1e-6)


def test_without_replacement_matches_dp_accounting():
    z, T, n, S = 1.5, 100, 200, 10
    event = dpa.SelfComposedDpEvent(
        dpa.SampledWithoutReplacementDpEvent(n, S, dpa.GaussianDpEvent(z / 2)), T)
    sampler = fa.UniformWithoutReplacement(S)
    assert th.dp_event(z, sampler, T, n) == event
    want = rdp_accountant(NR.REPLACE_ONE).compose(event).get_epsilon(DELTA)
    assert th.dp_epsilon(z, sampler, T, DELTA, n, accountant="rdp") == pytest.approx(
        want, rel=1e-6)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_full_participation_matches_dp_accounting(accountant):
    z, T = 8.0, 16
    event = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), T)
    assert th.dp_event(z, fa.FullParticipation(), T, 10) == event
    acc = rdp_accountant() if accountant == "rdp" else pld_accountant()
    want = acc.compose(event).get_epsilon(DELTA)
    got = th.dp_epsilon(z, fa.FullParticipation(), T, DELTA, 10, accountant=accountant)
    assert got == pytest.approx(want, rel=1e-6)


def test_zero_rounds_cost_nothing():
    assert th.dp_event(1.0, fa.Bernoulli(0.1), 0, 10) == dpa.NoOpDpEvent()
    for accountant in ("rdp", "pld"):
        assert th.dp_epsilon(1.0, fa.Bernoulli(0.1), 0, DELTA, 10, accountant) == 0.0


# --- independent closed forms -------------------------------------------------------------


def test_full_participation_against_exact_gaussian():
    """T rounds of noise multiplier z = one Gaussian mechanism of std z / sqrt(T)."""
    z, T = 8.0, 16
    s = z / math.sqrt(T)
    exact = gaussian_epsilon(s, DELTA)
    eps_pld = th.dp_epsilon(z, fa.FullParticipation(), T, DELTA, 10, accountant="pld")
    # PLD is pessimistic (an upper bound) and tight to its 1e-4 discretization:
    assert gaussian_delta(eps_pld, s) <= DELTA * (1 + 1e-9)
    assert gaussian_delta(0.99 * eps_pld, s) > DELTA
    assert eps_pld == pytest.approx(exact, rel=1e-3)
    eps_rdp = th.dp_epsilon(z, fa.FullParticipation(), T, DELTA, 10, accountant="rdp")
    assert eps_rdp >= exact
    acc = rdp_accountant().compose(th.dp_event(z, fa.FullParticipation(), T, 10))
    np.testing.assert_allclose(acc.rdp, T * acc.orders / (2 * z**2), rtol=1e-12)


def test_without_replacement_of_everyone_is_replace_one_gaussian():
    """S = n: replacing one client moves the sum by 2c, RDP T a / (2 (z/2)^2)."""
    z, T, n = 4.0, 20, 30
    event = th.dp_event(z, fa.UniformWithoutReplacement(n), T, n)
    acc = rdp_accountant(NR.REPLACE_ONE).compose(event)
    np.testing.assert_allclose(acc.rdp, T * acc.orders / (2 * (z / 2) ** 2), rtol=1e-12)
    eps = th.dp_epsilon(z, fa.UniformWithoutReplacement(n), T, DELTA, n, "rdp")
    exact = gaussian_epsilon(z / (2 * math.sqrt(T)), DELTA)  # sensitivity 2: std z/2 per unit
    assert eps >= exact
    assert eps > gaussian_epsilon(z / math.sqrt(T), DELTA) * 1.5  # not the add/remove one
    pld_replace = pld_accountant(NR.REPLACE_ONE).compose(
        dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), T)).get_epsilon(DELTA)
    assert pld_replace == pytest.approx(exact, rel=1e-3)


# --- monotonicity, epsilon along a run ----------------------------------------------------


def test_monotone_in_noise_rounds_and_rate():
    q = fa.Bernoulli(0.05)
    by_z = [th.dp_epsilon(z, q, 100, DELTA, 1000, "rdp") for z in (0.8, 1.0, 1.5, 2.0, 4.0)]
    assert np.all(np.diff(by_z) < 0)
    by_z_pld = [th.dp_epsilon(z, q, 100, DELTA, 1000) for z in (2.0, 4.0)]
    assert np.all(np.diff(by_z_pld) < 0)
    by_t = th.dp_epsilon(1.0, q, [1, 10, 100, 1000], DELTA, 1000, "rdp")
    assert np.all(np.diff(by_t) > 0)
    by_q = [th.dp_epsilon(1.0, fa.Bernoulli(p), 100, DELTA, 1000, "rdp")
            for p in (0.001, 0.01, 0.1, 1.0)]
    assert np.all(np.diff(by_q) > 0)
    by_s = [th.dp_epsilon(2.0, fa.UniformWithoutReplacement(S), 50, DELTA, 100, "rdp")
            for S in (1, 50)]
    assert np.all(np.diff(by_s) > 0)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_epsilon_along_a_run_equals_scalar_calls(accountant):
    q, z, rounds = fa.Poisson(0.05), 3.0, [0, 5, 50, 5, 200]
    eps = th.dp_epsilon(z, q, rounds, DELTA, 1000, accountant)
    assert isinstance(eps, np.ndarray) and eps.shape == (5,)
    np.testing.assert_allclose(
        eps, [th.dp_epsilon(z, q, t, DELTA, 1000, accountant) for t in rounds], rtol=1e-12)
    assert eps[0] == 0.0 and eps[1] == eps[3]
    assert th.dp_epsilon(z, q, np.arange(0), DELTA, 1000, accountant).shape == (0,)


def test_epsilon_along_a_run_without_replacement():
    sampler = fa.UniformWithoutReplacement(5)
    eps = th.dp_epsilon(2.0, sampler, np.array([10, 20, 40]), DELTA, 100, "rdp")
    assert np.all(np.diff(eps) > 0)
    np.testing.assert_allclose(
        eps[1:], [th.dp_epsilon(2.0, sampler, t, DELTA, 100, "rdp") for t in (20, 40)],
        rtol=1e-12)


# --- calibration --------------------------------------------------------------------------


@pytest.mark.parametrize("sampler,n,T,accountant", [
    (fa.Poisson(0.05), 1000, 100, "pld"),
    (fa.Poisson(0.05), 1000, 100, "rdp"),
    (fa.UniformWithoutReplacement(10), 200, 50, "rdp"),
], ids=["poisson-pld", "poisson-rdp", "paper-rdp"])
def test_noise_multiplier_inverts_epsilon(sampler, n, T, accountant):
    z = th.dp_noise_multiplier(1.0, sampler, T, DELTA, n, accountant)
    eps = th.dp_epsilon(z, sampler, T, DELTA, n, accountant)
    assert eps == pytest.approx(1.0, rel=1e-4)
    assert eps <= 1.0 + 1e-12
    assert th.dp_epsilon(z * (1 - 1e-3), sampler, T, DELTA, n, accountant) > 1.0


def test_pld_is_tighter_than_rdp():
    args = (2.0, fa.Poisson(0.05), 100, DELTA, 1000)
    assert th.dp_epsilon(*args, "pld") < th.dp_epsilon(*args, "rdp")


# --- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", [
    fa.Cyclic(num_groups=4, num_sampled=2),
    fa.MarkovAvailability(p_leave=0.1, p_return=0.3, num_sampled=2),
    fa.TraceAvailability(np.ones((2, 8), bool), num_sampled=2),
    fa.ImportanceSampler([0.125] * 8, num_sampled=2),
    fa.WithReplacement(2),
    fa.Dropout(fa.UniformWithoutReplacement(2), deliver=0.9),
    fa.SizeWeighted(fa.UniformWithoutReplacement(2), np.arange(1.0, 9.0)),
], ids=lambda s: type(s).__name__)
def test_samplers_without_amplification_result_are_refused(sampler):
    name = type(sampler).__name__
    for call in (lambda: th.dp_event(1.0, sampler, 10, 8),
                 lambda: th.dp_epsilon(1.0, sampler, 10, DELTA, 8, "rdp"),
                 lambda: th.dp_noise_multiplier(1.0, sampler, 10, DELTA, 8, "rdp")):
        with pytest.raises(ValueError, match=f"{name}: no amplification-by-sampling result"):
            call()


def test_unequal_poisson_probabilities_are_refused():
    with pytest.raises(ValueError, match="no amplification result for unequal probabilities"):
        th.dp_epsilon(1.0, fa.Poisson([0.1, 0.2, 0.1]), 10, DELTA, 3, "rdp")


def test_pld_without_replacement_points_to_rdp():
    with pytest.raises(ValueError, match='sampling without replacement.*accountant="rdp"'):
        th.dp_epsilon(1.0, fa.UniformWithoutReplacement(2), 10, DELTA, 8, "pld")
    with pytest.raises(ValueError, match='accountant="rdp"'):
        th.dp_noise_multiplier(1.0, fa.UniformWithoutReplacement(2), 10, DELTA, 8)


def _one_line_error(match, call):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 1.5, True, "1e-5", float("nan")])
def test_bad_delta(delta):
    _one_line_error("delta", lambda: th.dp_epsilon(1.0, fa.Bernoulli(0.1), 10, delta, 10))
    _one_line_error("delta", lambda: th.dp_noise_multiplier(1.0, fa.Bernoulli(0.1), 10,
                                                            delta, 10))


@pytest.mark.parametrize("z", [0.0, -1.0, float("nan"), float("inf"), True, "1", None])
def test_bad_noise_multiplier(z):
    _one_line_error("noise_multiplier", lambda: th.dp_epsilon(z, fa.Bernoulli(0.1), 10,
                                                              DELTA, 10))
    _one_line_error("noise_multiplier", lambda: th.dp_event(z, fa.Bernoulli(0.1), 10, 10))


@pytest.mark.parametrize("rounds", [-1, 1.5, True, [[1, 2]], [1, -1], [1.0, 2.0], "10"])
def test_bad_rounds(rounds):
    _one_line_error("rounds", lambda: th.dp_epsilon(1.0, fa.Bernoulli(0.1), rounds, DELTA, 10))


def test_bad_rounds_for_event_and_calibration():
    _one_line_error("rounds", lambda: th.dp_event(1.0, fa.Bernoulli(0.1), [1, 2], 10))
    _one_line_error("rounds", lambda: th.dp_noise_multiplier(1.0, fa.Bernoulli(0.1), 0,
                                                             DELTA, 10))


@pytest.mark.parametrize("num_clients", [0, -3, 2.5, True, None])
def test_bad_num_clients(num_clients):
    _one_line_error("num_clients", lambda: th.dp_epsilon(1.0, fa.Bernoulli(0.1), 10, DELTA,
                                                         num_clients))


def test_num_clients_below_sample_size_and_probs_length():
    _one_line_error(r"num_clients \(5\) must be >= num_sampled \(S=10\)",
                    lambda: th.dp_epsilon(1.0, fa.UniformWithoutReplacement(10), 10, DELTA,
                                          5, "rdp"))
    _one_line_error("num_clients", lambda: th.dp_epsilon(1.0, fa.Poisson([0.1] * 4), 10,
                                                         DELTA, 5, "rdp"))


def test_bad_accountant_and_epsilon():
    _one_line_error("accountant", lambda: th.dp_epsilon(1.0, fa.Bernoulli(0.1), 10, DELTA, 10,
                                                        "moments"))
    for eps in (0.0, -1.0, float("inf"), "1"):
        _one_line_error("epsilon", lambda: th.dp_noise_multiplier(eps, fa.Bernoulli(0.1), 10,
                                                                  DELTA, 10))


def test_non_sampler_is_refused():
    _one_line_error("sampler", lambda: th.dp_event(1.0, object(), 10, 10))


# --- negative control: the sampler matters ------------------------------------------------


def test_poisson_rate_is_not_the_papers_sampler():
    """q = S/n Poisson sampling is another mechanism from S of n without replacement."""
    z, T, n, S = 1.0, 100, 100, 10
    wor = th.dp_epsilon(z, fa.UniformWithoutReplacement(S), T, DELTA, n, "rdp")
    poisson = th.dp_epsilon(z, fa.Poisson(S / n), T, DELTA, n, "rdp")
    assert abs(wor - poisson) > 0.01 * min(wor, poisson)
    swapped = rdp_accountant(NR.REPLACE_ONE).compose(dpa.SelfComposedDpEvent(
        dpa.SampledWithoutReplacementDpEvent(n, S, dpa.GaussianDpEvent(z)), T))
    assert abs(swapped.get_epsilon(DELTA) - poisson) > 0.01 * poisson
