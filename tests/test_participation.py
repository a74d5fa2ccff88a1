"""Participation models: the samplers' draws against the closed forms, and in the engine.

The closed forms (fa.theory.inclusion_probabilities, weight_moments, sampling_error) are
checked against exact enumeration in test_participation_exact.py; here the samplers' own
draws, over 10^5 rounds each, must match them within 4 standard errors (inclusion frequencies
pi_i and pi_ij, the mean aggregate, Lemma 3's sampling error), and the engine must keep
mask = gather, trial independence, bit-exact resume and compile nothing new.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from test_engine_local_work import quadratics, same_numbers
from conftest import count_backend_compilations as count_compilations

N = 6
P = np.array([0.2, 0.5, 0.7, 1.0, 0.35, 0.6])
GROUPS = np.array([0, 0, 0, 1, 1, 2])
TRACE = np.array([[1, 1, 0, 0, 1, 1], [0, 0, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], bool)


def _draw(sampler, n=N, trials=2100, rounds=48, seed=0):
    """Per-trial means over ``rounds`` rounds of I (n,), I I^T (n, n), M (n,) and of
    ||A - vbar||^2 and A for the fixed vectors V: rounds of one trial follow each other
    (stateful samplers carry their state), trials are independent."""
    V = np.random.default_rng(1).normal(size=(n, 2))
    vbar = V.mean(0)
    W = sampler.num_words(n)
    words = jax.random.bits(jax.random.key(seed), (rounds, trials, W), jnp.uint32)
    normalised = sampler.normalised()

    def one_round(state, w):
        idx, wt, state = jax.vmap(sampler.sample, in_axes=(0, None, 0))(w, n, state)
        mass = jax.vmap(lambda i, v: jnp.zeros(n).at[i].add(v))(idx, wt)  # (R, n)
        total = mass.sum(1, keepdims=True)
        M = mass / jnp.where(total > 0, total, 1) if normalised else mass
        inc = (mass > 0).astype(float)
        A = M @ V
        err = jnp.sum((A - vbar) ** 2, axis=1)
        return state, (inc, inc[:, :, None] * inc[:, None, :], M, err, A)

    state0 = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (trials,) + a.shape),
                                    sampler.init_state(n))
    _, out = jax.jit(lambda s, w: jax.lax.scan(one_round, s, w))(state0, words)
    return V, [np.asarray(o).mean(axis=0) for o in out]  # per-trial means


def _within(samples, expected, k=4.0):
    """Every entry's mean over the trials within k standard errors of ``expected``."""
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    exact = se < 1e-12  # a constant (to rounding): compared exactly
    ok = np.where(exact, np.abs(mean - expected) < 1e-12, np.abs(mean - expected) <= k * se)
    return bool(np.all(ok)), np.max(np.abs(mean - expected) / np.where(exact, 1, se))


SAMPLERS = {
    "uniform": fa.UniformWithoutReplacement(3),
    "with_replacement": fa.WithReplacement(3),
    "bernoulli": fa.Bernoulli(0.4),
    "poisson": fa.Poisson(P),
    "poisson_normalised": fa.Poisson(P, unbiased=False),
    "importance": fa.ImportanceSampler(P / P.sum(), 3),
    "importance_normalised": fa.ImportanceSampler(P / P.sum(), 3, unbiased=False),
    "markov": fa.MarkovAvailability(np.linspace(0.1, 0.5, N), np.linspace(0.6, 0.2, N), 2),
    "cyclic": fa.Cyclic(3, 1, groups=GROUPS),
    "trace": fa.TraceAvailability(TRACE, 2),
    "dropout_poisson": fa.Dropout(fa.Poisson(P), np.linspace(0.5, 1.0, N)),
    "dropout_bernoulli": fa.Dropout(fa.Bernoulli(0.5), np.linspace(0.5, 1.0, N)),
    "size_weighted_poisson": fa.SizeWeighted(fa.Poisson(P), np.arange(1.0, N + 1)),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_draws_match_the_closed_forms(name):
    """100800 rounds (2100 trials of 48, whole periods): pi_i, pi_ij, E[M], E[A] and Lemma 3's E||A - vbar||^2 within 4 s.e."""
    s = SAMPLERS[name]
    V, (inc, pair, M, err, A) = _draw(s)
    pi = fa.theory.inclusion_probabilities(s, N)
    wm = fa.theory.weight_moments(s, N)
    se = fa.theory.sampling_error(s, V)
    for what, samples, expected in [("pi_i", inc, pi.first), ("pi_ij", pair, pi.second),
                                    ("E[M]", M, wm.mean), ("E[A]", A, wm.mean @ V),
                                    ("E||A - vbar||^2", err, se.mse)]:
        ok, z = _within(samples, expected)
        assert ok, (name, what, z)


def test_unbiased_weightings_aggregate_to_the_full_mean():
    V = np.random.default_rng(1).normal(size=(N, 2))
    for name in ("poisson", "importance", "dropout_poisson"):
        assert fa.theory.sampling_error(SAMPLERS[name], V).bias_sq < 1e-28
    assert fa.theory.sampling_error(SAMPLERS["poisson_normalised"], V).bias_sq > 1e-3


def test_lemma3_for_the_paper_sampler_and_a_wrong_formula_fails():
    """eq. (14): E||A - vbar||^2 = I_S / S * Psi by Monte Carlo; the same formula applied to
    sampling with replacement (a negative control) lies far outside the error bars."""
    S = 3
    psi_factor = fa.theory.sampling_factor(N, S) / S
    V, out = _draw(fa.UniformWithoutReplacement(S))
    psi = np.mean(np.sum((V - V.mean(0)) ** 2, axis=1))
    assert _within(out[3], psi_factor * psi)[0]
    V, out = _draw(fa.WithReplacement(S))
    ok, z = _within(out[3], psi_factor * psi)
    assert not ok and z > 20


def test_markov_chains_move_with_their_transition_probabilities():
    """P(available at t+1 | available at t) = 1 - p_leave and P(back | away) = p_return,
    from the carried availabilities of 400 trials x 200 rounds."""
    leave, back = 0.15, 0.35
    s = fa.MarkovAvailability(leave, back, num_sampled=N)  # S = n: every available one
    words = jax.random.bits(jax.random.key(3), (200, 400, s.num_words(N)), jnp.uint32)

    def one(state, w):
        idx, wt, state = jax.vmap(s.sample, in_axes=(0, None, 0))(w, N, state)
        return state, state["available"]

    state0 = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (400,) + a.shape),
                                    s.init_state(N))
    _, avail = jax.lax.scan(one, state0, words)
    a = np.asarray(avail)  # (T, R, n)
    stay = a[1:][a[:-1]]
    ret = a[1:][~a[:-1]]
    assert abs(stay.mean() - (1 - leave)) < 4 * np.sqrt(leave * (1 - leave) / stay.size) * 3
    assert abs(ret.mean() - back) < 4 * np.sqrt(back * (1 - back) / ret.size) * 3
    assert abs(a.mean() - fa.theory.stationary_availability(leave, back)) < 0.01
    assert abs(stay.mean() - back) > 0.3  # the chain is not independent across rounds


# ------------------------------------------------------------------ in the engine


def _kw(**kw):
    base = dict(local_steps=2, stepsize=0.1, rounds=9, x0=[4.0], trials=5,
                key=jax.random.key(2), record_every=3)
    base.update(kw)
    return base


@pytest.mark.parametrize("name", ["markov", "cyclic", "trace", "poisson", "dropout_poisson",
                                  "importance"])
def test_mask_equals_gather_and_trials_are_independent(name):
    p = quadratics(np.linspace(0.5, 2.0, N), np.arange(N, dtype=float))
    s = SAMPLERS[name]
    mask = fa.simulate(p, sampler=s, mode="mask", **_kw())
    gather = fa.simulate(p, sampler=s, mode="gather", **_kw())
    assert same_numbers(mask, gather)
    alone = fa.simulate(p, sampler=s, **_kw(trials=1, first_trial=3))
    np.testing.assert_array_equal(alone.x[0], gather.x[3])


def test_a_stateful_sampler_resumes_bit_for_bit(tmp_path):
    p = quadratics(np.linspace(0.5, 2.0, N), np.arange(N, dtype=float))
    kw = _kw(sampler=SAMPLERS["markov"], rounds=40, record_every=2, trials=6, trial_chunk=4)
    reference = fa.simulate(p, **kw)
    calls = []

    def stop(done, total, secs):
        calls.append(done)
        if len(calls) == 7:
            raise KeyboardInterrupt

    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(p, **kw, checkpoint=path, progress=stop)
    assert same_numbers(fa.simulate(p, **kw, checkpoint=path), reference)


def test_unbiased_poisson_makes_the_round_unbiased_in_the_engine():
    """FedAvg, one exact step from x0 on quadratics: with Horvitz-Thompson weights E[x_1] =
    x0 - alpha grad f(x0) within 4 s.e. over 80000 trials; averaging the participants
    instead (unbiased=False) is biased toward the likely clients (outside the bars: its bias,
    -2.20e-3 by enumeration, is 9.8 s.e. at 80000 trials, 4.9 at 20000, too few to reject it
    reliably)."""
    a, b = np.linspace(0.5, 2.0, N), np.arange(N, dtype=float)
    p = quadratics(a, b)
    x0, alpha = 4.0, 0.1
    target = x0 - alpha * np.mean(a * (x0 - b))
    for unbiased, inside in [(True, True), (False, False)]:
        res = fa.simulate(p, sampler=fa.Poisson(P, unbiased=unbiased), local_steps=1,
                          stepsize=alpha, rounds=1, x0=[x0], trials=80000,
                          key=jax.random.key(4), record_every=1)
        x1 = res.x[:, 1, 0]
        z = abs(x1.mean() - target) / (x1.std(ddof=1) / np.sqrt(x1.size))
        assert (z < 4) == inside, (unbiased, z)


def test_new_probabilities_compile_nothing_in_simulate_and_sweep():
    p = fa.problems.huber_offsets(jax.random.key(0), n=N, d_max=10.0)
    kw = dict(local_steps=2, stepsize=1e-2, rounds=6, x0=p.x_star + 1.0, trials=3,
              key=jax.random.key(1), record_every=6)
    pairs = [(fa.Poisson(P), fa.Poisson(P[::-1])),
             (fa.MarkovAvailability(0.1, 0.5, 2), fa.MarkovAvailability(0.3, 0.2, 2)),
             (fa.TraceAvailability(TRACE, 2), fa.TraceAvailability(~TRACE, 2))]
    for first, second in pairs:
        fa.simulate(p, sampler=first, **kw)
        with count_compilations() as later:
            fa.simulate(p, sampler=second, **kw)
        assert later == [], type(first).__name__
    grid = {"sampler.probs": [P, P[::-1], np.full(N, 0.5)]}
    kw = {k: v for k, v in kw.items() if k != "x0"}
    fa.sweep(p, grid=grid, sampler=fa.Poisson(P), x0=p.x_star + 1.0, **kw)
    with count_compilations() as later:
        sw = fa.sweep(p, grid={"sampler.probs": [np.full(N, 0.9), P, P ** 2]},
                      sampler=fa.Poisson(P), x0=p.x_star + 1.0, **kw)
    assert later == []
    alone = fa.simulate(p, sampler=fa.Poisson(np.full(N, 0.9)), x0=p.x_star + 1.0, **kw)
    np.testing.assert_array_equal(sw.gap[0], alone.gap)


@pytest.mark.parametrize("make, match", [
    (lambda: fa.Poisson([0.5, 0.0]), r"Poisson probs must be in \(0, 1\], got 0.0$"),
    (lambda: fa.Poisson([0.5, 1.2]), r"Poisson probs must be in \(0, 1\]"),
    (lambda: fa.ImportanceSampler([0.5, 0.6], 2), r"must sum to 1"),
    (lambda: fa.TraceAvailability(np.ones(4, bool), 1), r"boolean \(P, n\) array"),
    (lambda: fa.MarkovAvailability(1.0, 0.5, 2), r"p_leave must be in \[0, 1\)"),
    (lambda: fa.Cyclic(3, 2, groups=[0, 1, 3]), r"groups must be in \[0, num_groups=3\)"),
    (lambda: fa.Dropout(fa.Poisson(0.5), 0.0), r"deliver must be in \(0, 1\]"),
    (lambda: fa.SizeWeighted(fa.FullParticipation(), [1.0, -1.0]), r"positive numbers"),
])
def test_bad_parameters_are_refused_in_one_line(make, match):
    with pytest.raises(ValueError, match=match) as e:
        make()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("sampler, match", [
    (fa.Cyclic(3, 2, groups=GROUPS), r"num_sampled \(S=2\) is larger than group 2 \(1 "
                                     r"client\)"),
    (fa.TraceAvailability(TRACE[:, :4], 1), r"must have n=6 columns"),
    (fa.Poisson(P[:4]), r"one entry per client \(n=6\)"),
    (fa.ImportanceSampler(np.ones(4) / 4, 2), r"one entry per client \(n=6\)"),
])
def test_samplers_that_do_not_fit_the_problem_are_refused_before_compiling(sampler, match):
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    with count_compilations() as compiled, pytest.raises(ValueError, match=match):
        fa.simulate(p, sampler=sampler, **_kw())
    assert compiled == []


class PlainMean(fa.algorithms.FedAvg):
    """A user's algorithm that does not read RoundInfo.scale."""

    reads_scale = False


def test_an_algorithm_that_ignores_the_scale_is_refused_with_unbiased_weights():
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    with pytest.raises(ValueError, match=r"PlainMean does not apply RoundInfo.scale"):
        fa.simulate(p, sampler=fa.Poisson(P), algorithm=PlainMean(), **_kw())
    fa.simulate(p, sampler=fa.Poisson(P, unbiased=False), algorithm=PlainMean(), **_kw())


# ------------------------------------------------------------- refusals and edges


@pytest.mark.parametrize("alg", [fa.algorithms.Scaffold(), fa.algorithms.FedDyn()])
@pytest.mark.parametrize("sampler, match", [
    (fa.Poisson(P), r"does not apply RoundInfo.scale"),
    (fa.SizeWeighted(fa.UniformWithoutReplacement(2), np.arange(1.0, N + 1)),
     r"keeps a mean of client states that needs every participant's weight 1, not "
     r"SizeWeighted's"),
])
def test_client_state_means_refuse_weights_other_than_one(alg, sampler, match):
    """SCAFFOLD's c and FedDyn's h stay the mean of the client states only with unit
    weights: other weights are refused in one line."""
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    with pytest.raises(ValueError, match=match):
        fa.simulate(p, sampler=sampler, algorithm=alg, **_kw())


class OwnServer(fa.algorithms.FedAvg):
    """A user's FedAvg with its own server step (that ignores RoundInfo.scale): it says so
    again, as a subclass inherits its parent's reads_scale."""

    reads_scale = False

    def server_update(self, server, mean_message, info):
        return fa.algorithms.ServerState(mean_message)


def test_a_subclass_with_its_own_server_update_declares_reads_scale_again():
    assert fa.algorithms.FedAvg.reads_scale and not OwnServer.reads_scale
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    with pytest.raises(ValueError, match=r"OwnServer does not apply RoundInfo.scale"):
        fa.simulate(p, sampler=fa.Poisson(P), algorithm=OwnServer(), **_kw())


def test_an_algorithm_that_does_not_declare_reads_scale_cannot_be_made():
    """reads_scale is abstract: an algorithm class that leaves it out is refused when it is
    instantiated (equinox's error names it), not run with a default."""

    class Undeclared(fa.algorithms.AbstractLocalSGD):
        def init(self, x0):
            return fa.algorithms.ServerState(x0)

        def server_update(self, server, mean_message, info):
            return fa.algorithms.ServerState(mean_message)

    with pytest.raises(TypeError, match=r"Can't instantiate abstract class Undeclared with "
                                        r"abstract attributes \{'reads_scale'\}"):
        Undeclared()
    assert OwnServer().reads_scale is False and PlainMean().reads_scale is False


def test_fedavg_round_gives_a_stateful_samplers_first_round_only():
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    args = (p, fa.ExactOracle(), fa.Cyclic(3, 1, groups=GROUPS), jnp.array([1.0]))
    fa.fedavg_round(*args, 0, 0.1, jax.random.key(0))
    with pytest.raises(ValueError, match=r"t must be 0, got 5"):
        fa.fedavg_round(*args, 5, 0.1, jax.random.key(0))


def test_without_x64_a_probability_one_always_takes_part():
    """The largest words give u < 1 in float32 too (23 bits): p = 1 and deliver = 1 take
    every client; a probability vector normalised in float32 is accepted."""
    top = jnp.full((3,), 0xFFFFFFFF, jnp.uint32)
    jax.config.update("jax_enable_x64", False)
    try:
        _, w = fa.Poisson([1.0, 1.0, 1.0], unbiased=False).from_words(top, 3)
        q = np.float32(np.arange(1, 41)) / np.float32(np.arange(1, 41)).sum()
        fa.ImportanceSampler(q, 4)
    finally:
        jax.config.update("jax_enable_x64", True)
    np.testing.assert_array_equal(np.asarray(w), [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"must sum to 1"):
        fa.ImportanceSampler([0.5, 0.4], 1)


def test_sweep_values_pass_the_constructors_checks():
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    base = fa.SizeWeighted(fa.Poisson(P), np.ones(N))
    with pytest.raises(ValueError, match=r"sampler.sizes.*sizes must be positive"):
        fa.sweep(p, grid={"sampler.sizes": [np.ones(N), -np.ones(N)]}, sampler=base,
                 **{k: v for k, v in _kw().items()})


def test_a_trace_put_in_by_a_sweep_or_tree_at_is_checked():
    import equinox as eqx

    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    half = np.where(TRACE, 0.5, 0.0)  # not 0/1: as a mask it would be read as True
    with pytest.raises(ValueError, match=r"sampler.available': values must be bool"):
        fa.sweep(p, grid={"sampler.available": [TRACE, half]},
                 sampler=fa.TraceAvailability(TRACE, 2), **_kw())
    sim = fa.Simulation(p, sampler=fa.TraceAvailability(TRACE, 2), local_steps=2, rounds=4)
    with pytest.raises(ValueError, match=r"available must hold 0/1 or booleans"):
        eqx.tree_at(lambda s: s.sampler.available, sim, half).run(
            key=jax.random.key(0), x0=0.0, stepsize=0.1)
    flipped = eqx.tree_at(lambda s: s.sampler.available, sim, ~TRACE)
    assert flipped.run(key=jax.random.key(0), x0=0.0, stepsize=0.1).equals(
        fa.simulate(p, sampler=fa.TraceAvailability(~TRACE, 2), local_steps=2, rounds=4,
                    key=jax.random.key(0), x0=0.0, stepsize=0.1))


def test_rounds_without_participants_are_said():
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    with pytest.warns(RuntimeWarning, match=r"no trial's model moved in its 9 rounds: did any "
                                            r"client take part\?"):
        res = fa.simulate(p, sampler=fa.Bernoulli(1e-12), **_kw())
    assert np.all(res.x_final == 4.0)
    with pytest.raises(ValueError, match=r"no client available in any row: every round would "
                                         r"be empty"):
        fa.TraceAvailability(np.zeros((2, N), bool), 1)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a run where clients take part: quiet
        fa.simulate(p, sampler=fa.Bernoulli(0.5), **_kw())


def test_the_result_records_the_samplers_parameters():
    p = quadratics(np.ones(N), np.arange(N, dtype=float))
    res = fa.simulate(p, sampler=fa.Poisson(P, unbiased=False), **_kw())
    assert res.config["sampler_config"] == (
        "Poisson(probs=[0.2, 0.5, 0.7, 1.0, 0.35, 0.6], unbiased=False)")
