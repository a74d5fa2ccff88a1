"""Laws of durations, the clock and synchronous rounds on it (wait-for-all, deadline,
over-selection): draws against closed forms, rounds against a NumPy reference of the same
words, inclusion probabilities against Monte Carlo, sweeps, and one-line errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

import fedjax_abc as fa
from fedjax_abc._problems._timed import round_time

tm = fa.timing

LAWS = [
    (tm.Exponential(2.0), stats.expon(scale=2.0)),
    (tm.ShiftedExponential(0.5, 1.5), stats.expon(loc=0.5, scale=1.5)),
    (tm.LogNormal(0.3, 0.8), stats.lognorm(s=0.8, scale=math.exp(0.3))),
    (tm.Pareto(1.0, 2.5), stats.pareto(b=2.5, scale=1.0)),
]


@pytest.mark.parametrize("law, ref", LAWS, ids=lambda v: type(v).__name__)
def test_laws_against_scipy(law, ref):
    """Draws pass a Kolmogorov-Smirnov test against scipy's law; cdf, mean and support
    bottom are scipy's; a wrong law is rejected by the same test."""
    words = jax.random.bits(jax.random.key(0), (20000,), jnp.uint32)
    draws = np.asarray(law.sample(words))
    assert stats.kstest(draws, ref.cdf).pvalue > 1e-3
    assert stats.kstest(draws * 1.05, ref.cdf).pvalue < 1e-6
    x = np.array([0.1, 0.7, 1.3, 2.9, 8.0])
    np.testing.assert_allclose(law.cdf(x), ref.cdf(x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(law.expectation(), ref.mean(), rtol=1e-12)
    assert law.least() == ref.support()[0]


def test_constant_law_and_the_clock():
    assert float(tm.Constant(2.0).sample(jnp.arange(3, dtype=jnp.uint32))[1]) == 2.0
    assert tm.Constant(2.0).constant() == 2.0 and tm.Exponential(1.0).constant() is None
    clock = tm.Clock(tm.Constant(0.5), speed=np.array([1.0, 2.0]),
                     communication=tm.Constant(0.25))
    words = jnp.zeros((2, 2), jnp.uint32)
    np.testing.assert_allclose(clock.durations(words, 3, clock.speeds(None, jnp.float64)),
                               [3 * 0.5 + 0.25, 3 * 2 * 0.5 + 0.25])


def test_finish_probability_closed_form():
    """P(Q s_i E + m <= delta) = 1 - exp(-(delta - m) / (Q s_i mean)) for an exponential
    step time (written here from the law), and the communication law's cdf when the step
    time is constant; None when both are random or the speeds are drawn."""
    s = np.array([0.5, 1.0, 4.0])
    clock = tm.Clock(tm.Exponential(2.0), speed=s, communication=tm.Constant(0.3))
    expected = 1 - np.exp(-(5.0 - 0.3) / (3 * s * 2.0))
    np.testing.assert_allclose(clock.finish_probability(5.0, 3, 3), expected, rtol=1e-14)
    shifted = tm.Clock(tm.Constant(1.0), speed=s, communication=tm.ShiftedExponential(0.2, 1.0))
    np.testing.assert_allclose(shifted.finish_probability(5.0, 1, 3),
                               1 - np.exp(-np.maximum(5.0 - s - 0.2, 0)), rtol=1e-14)
    assert tm.Clock(tm.Exponential(1.0), communication=tm.Exponential(1.0)).finish_probability(
        2.0, 1, 3) is None
    assert tm.Clock(tm.Exponential(1.0), speed=tm.Pareto(1.0, 2.0)).finish_probability(
        2.0, 1, 3) is None


def _reference_round(finish, asked, deadline, keep):
    """Who is kept and how long the round lasts, from the rules' words alone."""
    asked_slots = [j for j in range(len(finish)) if asked[j]]
    by_time = sorted(asked_slots, key=lambda j: (finish[j], j))
    target = len(asked_slots) if keep is None else min(keep, len(asked_slots))
    kept = [j for j in by_time[: target if keep is not None else None] if finish[j] <= deadline]
    if target == 0:
        return set(), 0.0
    return set(kept), min(finish[by_time[target - 1]], deadline)


@pytest.mark.parametrize("deadline, keep", [(math.inf, None), (1.5, None), (math.inf, 3),
                                            (1.2, 3)])
def test_round_time_against_a_reference(deadline, keep):
    rng = np.random.default_rng(0)
    for _ in range(30):
        m = 6
        finish = np.round(rng.exponential(1.0, m), 1)  # rounded: ties happen
        asked = rng.random(m) < 0.8
        kept, duration = round_time(jnp.asarray(finish), jnp.asarray(asked), deadline, keep)
        ref_kept, ref_duration = _reference_round(finish, asked, deadline, keep)
        assert set(np.flatnonzero(np.asarray(kept))) == ref_kept
        assert float(duration) == ref_duration


@pytest.fixture(scope="module")
def problem():
    return fa.problems.quadratics(jax.random.key(0), n=10, d=2)


def _run(problem, sampler, mode="gather", rounds=12, trials=4, **kw):
    return fa.simulate(problem, sampler=sampler, local_steps=2, stepsize=0.1, rounds=rounds,
                       trials=trials, key=jax.random.key(1), x0=jnp.ones(2), mode=mode, **kw)


def test_timed_rounds_record_the_clock(problem):
    """The recorded time is the sum of the rounds' durations; wait-for-all with constant
    durations Q s_i c: the slowest asked client's; mask and gather make the same run."""
    s = np.linspace(1.0, 2.0, 10)
    clock = tm.Clock(tm.Constant(1.0), speed=s)
    wait = tm.Timed(fa.FullParticipation(), clock, steps=2)
    res = _run(problem, wait, record_every=1)
    np.testing.assert_allclose(res.metrics["time"][0], 2 * 2.0 * np.arange(13))
    over = tm.Timed(fa.UniformWithoutReplacement(6), tm.Clock(tm.Exponential(1.0)),
                    keep=4, deadline=3.0)
    gather, mask = _run(problem, over), _run(problem, over, mode="mask")
    np.testing.assert_array_equal(gather.metrics["time"], mask.metrics["time"])
    np.testing.assert_allclose(gather.gap, mask.gap, rtol=1e-12)
    assert np.all(np.diff(gather.metrics["time"], axis=1) > 0)
    assert np.all(np.diff(gather.metrics["time"], axis=1) <= 3.0)
    # the same clients, all kept, with a deadline nobody misses: FedAvg's run
    assert gather.config["sampler_config"] == (
        "Timed(sampler=UniformWithoutReplacement(num_sampled=6), clock=Clock(compute="
        "Exponential(mean=1), speed=Constant(value=1), communication=Constant(value=0)), "
        "deadline=3.0, keep=4, steps=1, partial=False)")
    plain = _run(problem, fa.UniformWithoutReplacement(6))
    late = _run(problem, tm.Timed(fa.UniformWithoutReplacement(6), clock, deadline=100.0))
    np.testing.assert_array_equal(plain.gap, late.gap)


def test_deadline_inclusion_against_monte_carlo():
    """pi_i = (S/n) p_i and pi_ij = S(S-1)/(n(n-1)) p_i p_j for the paper's sampler with a
    deadline and exponential step times: the sampler's own rounds agree within 4.5 standard
    errors, client by client and pair by pair; a deadline 10% longer is rejected by the
    same rounds."""
    n, S, draws = 8, 4, 20000
    s = np.linspace(0.5, 2.0, n)
    clock = tm.Clock(tm.Exponential(1.0), speed=s)
    sampler = tm.Timed(fa.UniformWithoutReplacement(S), clock, deadline=2.0)
    p = 1 - np.exp(-2.0 / s)
    inc = fa.theory.inclusion_probabilities(sampler, n)
    np.testing.assert_allclose(inc.first, S / n * p, rtol=1e-13)
    np.testing.assert_allclose(inc.second[0, 1], S * (S - 1) / (n * (n - 1)) * p[0] * p[1],
                               rtol=1e-13)
    mc = fa.theory.monte_carlo_moments(sampler, n, key=jax.random.key(4), draws=draws)
    se = np.sqrt(inc.first * (1 - inc.first) / draws)
    assert np.max(np.abs(mc.pi - inc.first) / se) < 4.5
    off = ~np.eye(n, dtype=bool)
    se2 = np.sqrt(inc.second * (1 - inc.second) / draws)[off]
    assert np.max(np.abs(mc.pi2[off] - inc.second[off]) / se2) < 4.5
    # the sum of the n squared z-scores: within chi2(n)'s 99.9% point, and far beyond it for
    # a deadline 10% longer
    bound = stats.chi2.ppf(0.999, n)
    assert np.sum(((mc.pi - inc.first) / se) ** 2) < bound
    wrong = S / n * (1 - np.exp(-2.2 / s))
    assert np.sum(((mc.pi - wrong) / se) ** 2) > 3 * bound


def test_drawn_speeds_averaged_over_trials_with_one_round_a_chain():
    """Speeds drawn once a trial (LogNormal(0, 1.5)): pi_i = (S/n) E_s[1 - exp(-d/s)],
    integrated here with SciPy. chains=draws (every round a fresh trial's first) agrees
    within 4.5 standard errors; one chain (one trial's speeds) does not."""
    n, S, d, sigma, draws = 8, 4, 1.0, 1.5, 20000
    sampler = tm.Timed(fa.UniformWithoutReplacement(S),
                       tm.Clock(tm.Exponential(1.0), speed=tm.LogNormal(0.0, sigma)), deadline=d)
    p, _ = integrate.quad(lambda z: (1 - np.exp(-d / np.exp(sigma * z))) * stats.norm.pdf(z),
                          -12, 12)
    exact = S / n * p
    se = np.sqrt(exact * (1 - exact) / draws)
    trials = fa.theory.monte_carlo_moments(sampler, n, key=jax.random.key(0), draws=draws,
                                           chains=draws)
    assert np.max(np.abs(trials.pi - exact) / se) < 4.5
    one = fa.theory.monte_carlo_moments(sampler, n, key=jax.random.key(0), draws=draws)
    assert np.max(np.abs(one.pi - exact) / se) > 10
    with pytest.raises(ValueError, match="multiple of chains"):
        fa.theory.monte_carlo_moments(sampler, n, key=jax.random.key(0), draws=10, chains=3)


def test_full_participation_with_a_deadline_has_weight_moments():
    """Over full participation every on-time client is averaged: the weights' moments are
    those of independent availabilities p_i, and Monte Carlo agrees."""
    n = 5
    sampler = tm.Timed(fa.FullParticipation(), tm.Clock(tm.Exponential(1.0),
                                                        speed=np.linspace(0.5, 2, n)),
                       deadline=1.5)
    wm = fa.theory.weight_moments(sampler, n)
    mc = fa.theory.monte_carlo_moments(sampler, n, key=jax.random.key(2), draws=20000)
    np.testing.assert_allclose(mc.m1, wm.mean, atol=0.01)
    assert fa.theory.monte_carlo_moments(
        tm.Timed(fa.UniformWithoutReplacement(3), sampler.clock, keep=2), n,
        key=jax.random.key(0), draws=100).pi.sum() == pytest.approx(2.0)


def test_sweep_over_the_deadline_and_a_law(problem):
    """A deadline and a law's parameter are sweep axes: one program, each point equal to
    its own run."""
    base = tm.Timed(fa.UniformWithoutReplacement(5), tm.Clock(tm.Exponential(1.0)),
                    deadline=2.0)
    kw = dict(sampler=base, local_steps=2, stepsize=0.1, rounds=6, trials=2,
              key=jax.random.key(1), x0=jnp.ones(2))
    sw = fa.sweep(problem, grid={"sampler.deadline": [1.0, 4.0],
                                 "sampler.clock.compute.mean": [0.5, 2.0]}, **kw)
    point = sw.point(**{"sampler.deadline": 4.0, "sampler.clock.compute.mean": 0.5})
    own = fa.simulate(problem, **{**kw, "sampler": tm.Timed(
        fa.UniformWithoutReplacement(5), tm.Clock(tm.Exponential(0.5)), deadline=4.0)})
    np.testing.assert_allclose(point.metrics["time"], own.metrics["time"], rtol=1e-14)
    np.testing.assert_allclose(point.gap, own.gap, rtol=1e-12)
    # a swept value gets the constructor's checks
    with pytest.raises(ValueError, match=r"Exponential's mean \(-1.0\) must be finite"):
        fa.sweep(problem, grid={"sampler.clock.compute.mean": [1.0, -1.0]}, **kw)
    with pytest.raises(ValueError, match=r"deadline \(0.0\) must be > 0"):
        fa.sweep(problem, grid={"sampler.deadline": [0.0]}, **kw)


def test_speeds_from_file(tmp_path, problem):
    f = tmp_path / "speeds.txt"
    f.write_text("# device speeds\n1.0, 2.0\n0.5 3\n")
    np.testing.assert_array_equal(tm.speeds_from_file(f), [1.0, 2.0, 0.5, 3.0])
    clock = tm.Clock(speed=tm.speeds_from_file(f))
    with pytest.raises(ValueError, match=r"4 factors for n=10 clients"):
        _run(problem, tm.Timed(fa.UniformWithoutReplacement(3), clock))
    f.write_text("1.0 fast\n")
    with pytest.raises(ValueError, match="must be numbers"):
        tm.speeds_from_file(f)


@pytest.mark.parametrize("make, match", [
    (lambda: tm.Timed(fa.UniformWithoutReplacement(3), tm.Clock(tm.ShiftedExponential(2.0, 1.0)),
                      deadline=1.5), r"below the least duration any client can take \(2\)"),
    (lambda: tm.Timed(fa.UniformWithoutReplacement(3), tm.Clock(), deadline=float("nan")),
     r"deadline \(nan\) must be > 0"),
    (lambda: tm.Timed(fa.UniformWithoutReplacement(3), tm.Clock(), deadline=-1.0),
     r"deadline \(-1.0\) must be > 0"),
    (lambda: tm.Timed(fa.Poisson([0.5] * 10), tm.Clock()), "unbiased weights"),
    (lambda: tm.Timed(fa.UniformWithoutReplacement(3), tm.Exponential(1.0)), "clock must be"),
    (lambda: tm.Clock(compute=2.0), "compute must be a law"),
])
def test_bad_timed_input_one_line(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_over_selection_keeps_at_most_what_it_asks(problem):
    with pytest.raises(ValueError, match=r"keep \(5\) is more than the clients asked \(S'=3\)"):
        _run(problem, tm.Timed(fa.UniformWithoutReplacement(3), tm.Clock(), keep=5))


def test_partial_work_is_fednova_with_the_steps_done_by_the_deadline(problem):
    """Constant step times s_i and communication m: client i completes
    K_i = min(Q, floor((deadline - m) / s_i)) steps; partial work equals FedNova over the
    clients with K_i >= 1, each with its K_i steps (PerClientSteps), bit for bit, in both
    modes; the round lasts until the deadline (someone is cut short). Without the step
    limits (plain deadline) the run differs."""
    n, Q, deadline = 10, 5, 6.0
    s = np.array([0.5, 1.0, 1.5, 2.0, 3.0, 7.0, 0.8, 1.2, 2.5, 9.0])
    clock = tm.Clock(tm.Constant(1.0), speed=s, communication=tm.Constant(0.5))
    K = np.clip(np.floor((deadline - 0.5) / s), 0, Q).astype(int)
    assert set(K) == {0, 1, 2, 3, 4, 5}  # cut short, some to nothing
    kw = dict(local_steps=Q, stepsize=0.1, rounds=4, trials=2, key=jax.random.key(1),
              x0=jnp.ones(2), algorithm=fa.algorithms.FedNova(), oracle=fa.ExactOracle(),
              record_every=1)
    partial = tm.Timed(fa.FullParticipation(), clock, deadline=deadline, partial=True, steps=Q)
    inc = fa.theory.inclusion_probabilities(partial, n).first
    np.testing.assert_array_equal(inc, (K >= 1).astype(float))
    for mode in ("gather", "mask"):
        ours = fa.simulate(problem, sampler=partial, mode=mode, **kw)
        ref = fa.simulate(problem, sampler=fa.TraceAvailability(np.array([K > 0]), n),
                          mode=mode, **{**kw, "local_steps": fa.PerClientSteps(np.maximum(K, 1))})
        np.testing.assert_array_equal(ours.gap, ref.gap)
        np.testing.assert_array_equal(ours.metrics["time"][0], deadline * np.arange(5))
    whole = fa.simulate(problem, sampler=tm.Timed(fa.FullParticipation(), clock,
                                                  deadline=deadline, steps=Q), **kw)
    assert np.max(np.abs(whole.gap - ours.gap)) > 1e-6
    with pytest.raises(ValueError, match="partial work needs a deadline"):
        tm.Timed(fa.FullParticipation(), clock, partial=True)
    # the run's Q must be Timed's steps: a client was silently cut at steps (1 by default)
    for steps in (1, 10):
        with pytest.raises(ValueError, match=f"caps a client's round at its steps \\({steps}\\)"):
            fa.simulate(problem, sampler=tm.Timed(fa.FullParticipation(), clock,
                                                  deadline=deadline, partial=True, steps=steps),
                        **kw)


def test_a_deadline_at_the_least_duration_keeps_the_clients_on_time(problem):
    """A client whose duration equals the deadline is kept (round_time), so a deadline equal
    to the least duration is a valid setting (it was refused as emptying every round)."""
    timed = tm.Timed(fa.UniformWithoutReplacement(3), tm.Clock(tm.Constant(1.0)),
                     deadline=3.0, steps=3)
    res = fa.simulate(problem, sampler=timed, local_steps=3, stepsize=0.1, rounds=12, trials=4,
                      key=jax.random.key(1), x0=jnp.ones(2), mode="gather")
    assert np.all(res.metrics["time"][:, -1] == 3.0 * 12)
    assert not np.array_equal(res.x_final, np.ones((4, 2)))  # the clients' work was kept


def test_on_time_grid_refuses_what_is_not_one_value_a_record(problem):
    res = _run(problem, tm.Timed(fa.UniformWithoutReplacement(3), tm.Clock()))
    for bad in (dict(times=[0.0, float("nan")]), dict(points=0), dict(points=2.5)):
        with pytest.raises(ValueError, match="times must be|points must be"):
            res.on_time_grid(**bad)
    with pytest.raises(ValueError, match="must be 'gap'"):
        res.on_time_grid("x_final")


def test_the_clock_through_wrappers_and_a_stateful_sampler(problem):
    """Dropout over a deadline over Markov availability: the wrapper passes the clock on
    (its records and state), the inner chain keeps its own state, and every round lasts
    at most the deadline."""
    inner = tm.Timed(fa.MarkovAvailability(0.2, 0.3, 4), tm.Clock(tm.Exponential(1.0)),
                     deadline=2.0)
    res = _run(problem, fa.Dropout(inner, 0.9), rounds=8, record_every=1)
    steps = np.diff(res.metrics["time"], axis=1)
    assert np.all(steps > 0) and np.all(steps <= 2.0 + 1e-12) and np.any(steps < 1.9)
