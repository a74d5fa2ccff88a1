"""Asynchronous training (FedBuff, FedAsync) against an event-driven NumPy reference and
closed forms: arrival order, staleness, models, the geometric staleness law, FedBuff's
synchronous limit, and one-line errors on bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import fedjax_abc as fa
from async_reference import run_trial

N, D, Q, T = 12, 2, 2, 25


@pytest.fixture(scope="module")
def problem():
    return fa.problems.quadratics(jax.random.key(3), n=N, d=D)


def _coordinates():
    return {f"x{j}": (lambda x, j=j: x[j]) for j in range(D)}


def _engine(problem, rule, clock, C, trials=3, **kw):
    return fa.timing.simulate_async(
        problem, rule, clock, concurrency=C, local_steps=Q, stepsize=0.2, steps=T,
        trials=trials, key=jax.random.key(7), x0=jnp.ones(D), oracle=fa.ExactOracle(),
        record_every=1, metrics=_coordinates(), **kw)


@pytest.mark.parametrize("which", ["fedbuff", "fedasync"])
def test_matches_the_event_driven_reference(problem, which):
    """Same arrival order and staleness, the same models to rounding, trial by trial."""
    a, c = (np.asarray(p) for p in problem.params)
    speeds = np.linspace(0.5, 3.0, N)
    clock = fa.timing.Clock(fa.timing.Exponential(1.5), speed=speeds,
                            communication=fa.timing.Constant(0.25))
    if which == "fedbuff":
        rule, C = fa.timing.FedBuff(buffer=3, server_stepsize=0.8), 5
        ref_kw = dict(rule="fedbuff", buffer=3, server_stepsize=0.8,
                      staleness=lambda tau: (1 + tau) ** -0.5)
    else:
        rule, C = fa.timing.FedAsync(0.6, fa.timing.HingeStaleness(2.0, 1.0)), 4
        ref_kw = dict(rule="fedasync", buffer=1, mixing=0.6,
                      staleness=lambda tau: 1.0 if tau <= 1 else 1 / (2.0 * (tau - 1) + 1))
    res = out = _engine(problem, rule, clock, C)
    for r in range(3):
        ref = run_trial(a, c, concurrency=C, local_steps=Q, stepsize=0.2, steps=T,
                        key=jax.random.key(7), trial=r, x0=np.ones(D), step_mean=1.5,
                        communication=0.25, speeds=speeds, **ref_kw)
        np.testing.assert_allclose(res.metrics["time"][r, 1:], ref.times, rtol=1e-14)
        xs = np.stack([res.metrics[f"x{j}"][r] for j in range(D)], axis=1)
        np.testing.assert_allclose(xs, ref.xs, rtol=1e-12, atol=1e-14)
        bins = fa.timing.staleness(out).shape[1]
        counts = np.bincount(np.minimum(ref.staleness.ravel(), bins - 1), minlength=bins)
        np.testing.assert_array_equal(fa.timing.staleness(out)[r], counts)


def test_the_reference_comparison_fails_on_a_wrong_tie_break_or_staleness(problem):
    """The comparison above can fail: a reference with another staleness function gives
    other models, and the engine's staleness counts differ from another trial's."""
    a, c = (np.asarray(p) for p in problem.params)
    clock = fa.timing.Clock(fa.timing.Exponential(1.5))
    out = _engine(problem, fa.timing.FedBuff(buffer=2), clock, 4, trials=2)
    ref = run_trial(a, c, rule="fedbuff", buffer=2, concurrency=4, local_steps=Q,
                    stepsize=0.2, steps=T, key=jax.random.key(7), trial=0, x0=np.ones(D),
                    step_mean=1.5, staleness=lambda tau: 1.0)  # the engine's is 1/sqrt(1+tau)
    xs = np.stack([out.metrics[f"x{j}"][0] for j in range(D)], axis=1)
    assert np.max(np.abs(xs - ref.xs)) > 1e-6
    np.testing.assert_allclose(out.metrics["time"][0, 1:], ref.times, rtol=1e-14)
    assert not np.array_equal(fa.timing.staleness(out)[0], fa.timing.staleness(out)[1])
    # every setting of the rule and the clock in the result's config: the schedule's
    assert "rule=FedBuff(buffer=2, server_stepsize=1, staleness=PolynomialStaleness(a=0.5))" \
        in out.config["schedule"]
    assert "Exponential(mean=1.5)" in out.config["schedule"]
    assert "concurrency=4" in out.config["schedule"]


def _geometric_counts(p: float, bins: int) -> np.ndarray:
    probs = p * (1 - p) ** np.arange(bins - 1)
    return np.append(probs, 1 - probs.sum())


def test_the_staleness_closed_form():
    np.testing.assert_allclose(fa.theory.exponential_staleness(6, 2, bins=12),
                               _geometric_counts(2 / 6, 12), rtol=1e-13)
    assert fa.theory.exponential_staleness(5, 5, bins=4).tolist() == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"buffer \(K=3\) must be at most"):
        fa.theory.exponential_staleness(2, 3)


@pytest.mark.parametrize("C, rule", [(4, fa.timing.FedAsync(0.5)), (6, fa.timing.FedBuff(2))],
                         ids=["FedAsync C=4", "FedBuff C=6 K=2"])
def test_staleness_is_geometric_with_exponential_durations(problem, C, rule):
    """iid exponential durations: each in-flight client is among a step's K arrivals with
    probability K/C whatever happened before (memoryless), so P(tau = k) =
    (K/C)(1 - K/C)^k; K = 1 is (1/C)(1 - 1/C)^k. Chi-square over 64 trials x 300 steps;
    the same counts reject the law of C + 1 clients in flight."""
    K, bins = rule.buffer, 12
    out = fa.timing.simulate_async(
        problem, rule, fa.timing.Clock(fa.timing.Exponential(1.0)),
        concurrency=C, local_steps=1, stepsize=0.1, steps=300, trials=64,
        key=jax.random.key(11), x0=jnp.ones(D), oracle=fa.ExactOracle(),
        staleness_bins=bins)
    counts = fa.timing.staleness(out).sum(axis=0)
    assert counts.sum() == 64 * 300 * K
    p = stats.chisquare(counts, counts.sum() * _geometric_counts(K / C, bins)).pvalue
    assert p > 1e-3, (counts, p)
    wrong = stats.chisquare(counts, counts.sum() * _geometric_counts(K / (C + 1), bins)).pvalue
    assert wrong < 1e-6


def test_fedbuff_with_equal_durations_is_synchronous_fedavg(problem):
    """Equal constant durations, K = C = S, eta_g = 1, no staleness weighting: every server
    step takes all C updates of staleness 0, which is a round of FedAvg over the same
    clients (the dispatched sets, replayed through a trace) with the same noise."""
    S = 4
    clock = fa.timing.Clock(fa.timing.Constant(1.0))
    rule = fa.timing.FedBuff(buffer=S, server_stepsize=1.0,
                             staleness=fa.timing.ConstantStaleness())
    out = fa.timing.simulate_async(problem, rule, clock, concurrency=S, local_steps=Q,
                                   stepsize=0.2, steps=T, trials=1, key=jax.random.key(5),
                                   x0=jnp.ones(D), record_every=1)
    a, c = (np.asarray(p) for p in problem.params)
    ref = run_trial(a, c, rule="fedbuff", buffer=S, concurrency=S, local_steps=Q,
                    stepsize=0.2, steps=T, key=jax.random.key(5), trial=0, x0=np.ones(D),
                    step_mean=1.0)
    trace = np.zeros((T, N), bool)
    for t in range(T):
        trace[t, ref.dispatched[t]] = True
    sync = fa.simulate(problem, sampler=fa.TraceAvailability(trace, S), local_steps=Q,
                       stepsize=0.2, rounds=T, trials=1, key=jax.random.key(5),
                       x0=jnp.ones(D), record_every=1)
    np.testing.assert_allclose(out.gap, sync.gap, rtol=1e-11, atol=1e-15)
    np.testing.assert_allclose(out.x_final, sync.x_final, rtol=1e-11)
    np.testing.assert_array_equal(out.metrics["time"][0], Q * np.arange(T + 1.0))
    assert fa.timing.staleness(out)[0, 0] == S * T
    # the replay is what makes them equal: another trace's run differs
    other = fa.simulate(problem, sampler=fa.TraceAvailability(np.roll(trace, 1, axis=0), S),
                        local_steps=Q, stepsize=0.2, rounds=T, trials=1,
                        key=jax.random.key(5), x0=jnp.ones(D), record_every=1)
    assert np.max(np.abs(other.gap - out.gap)) > 1e-8


def test_trials_do_not_depend_on_their_neighbours(problem):
    clock = fa.timing.Clock(fa.timing.LogNormal(0.0, 1.0))
    kw = dict(concurrency=4, local_steps=Q, stepsize=0.2, steps=10, key=jax.random.key(2),
              x0=jnp.ones(D))
    two = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock, trials=2, **kw)
    five = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock, trials=5, **kw)
    np.testing.assert_array_equal(two.gap, five.gap[:2])
    np.testing.assert_array_equal(fa.timing.staleness(two), fa.timing.staleness(five)[:2])
    # without the padding, exactly the trials asked for: the same arrivals, the models to
    # rounding
    one = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock, trials=1,
                                   pad_trials=False, **kw)
    assert one.config["pad_trials"] is False
    np.testing.assert_array_equal(fa.timing.staleness(one), fa.timing.staleness(two)[:1])
    np.testing.assert_array_equal(one.metrics["time"], two.metrics["time"][:1])
    np.testing.assert_allclose(one.gap, two.gap[:1], rtol=1e-12, atol=1e-15)


def test_on_a_time_grid(problem):
    out = _engine(problem, fa.timing.FedBuff(2), fa.timing.Clock(fa.timing.Exponential(1.0)), 4)
    grid = out.on_time_grid("gap", points=50)
    clock = out.metrics["time"]
    assert grid.times[-1] == clock[:, -1].min() and grid.values.shape == (3, 50)
    r, j = 1, 30  # the value at a grid time is the last record at or before it
    last = np.searchsorted(clock[r], grid.times[j], side="right") - 1
    assert grid.values[r, j] == out.gap[r, last]
    with pytest.raises(ValueError, match="span every trial"):
        out.on_time_grid("gap", times=[0.0, clock[:, -1].max() + 1])


@pytest.mark.parametrize("build, match", [
    (lambda p, c: dict(rule=fa.timing.FedBuff(5), concurrency=4), r"buffer \(K=5\) is larger"),
    (lambda p, c: dict(rule=fa.timing.FedBuff(2), concurrency=N + 1), r"at most the number"),
    (lambda p, c: dict(rule=fa.timing.FedBuff(2), concurrency=4,
                       clock=fa.timing.Clock(speed=np.ones(N + 1))), r"13 factors for n=12"),
    (lambda p, c: dict(rule=fa.timing.FedBuff(2), concurrency=4,
                       algorithm=fa.algorithms.Scaffold()), "keeps client states"),
    (lambda p, c: dict(rule="fedbuff", concurrency=4), "rule must be"),
    # algorithms whose server step or message the rule cannot take (ignored or a raw error)
    (lambda p, c: dict(rule=fa.timing.FedBuff(2), concurrency=4,
                       algorithm=fa.algorithms.FedAvg(server_stepsize=5.0)), "server step of its own"),
    (lambda p, c: dict(rule=fa.timing.FedBuff(2), concurrency=4,
                       algorithm=fa.algorithms.FedAvgM()), "server step of its own"),
    (lambda p, c: dict(rule=fa.timing.FedBuff(2), concurrency=4,
                       algorithm=fa.algorithms.FedNova()), "not a local model"),
    # an rbg key ran before, on words of another length
    (lambda p, c: dict(rule=fa.timing.FedBuff(2), concurrency=4,
                       key=jax.random.key(0, impl="rbg")), "must be a threefry2x32 key"),
])
def test_bad_input_one_line(problem, build, match):
    kw = dict(clock=fa.timing.Clock(fa.timing.Exponential(1.0)), local_steps=Q, stepsize=0.1,
              steps=5, trials=2, key=jax.random.key(0), x0=jnp.ones(D))
    kw.update(build(problem, None))
    with pytest.raises(ValueError, match=match) as err:
        fa.timing.simulate_async(problem, kw.pop("rule"), kw.pop("clock"), **kw)
    assert "\n" not in str(err.value)


class _OneMinusTau(fa.timing.AbstractStaleness):  # negative from tau = 2
    def __call__(self, tau):
        return 1.0 - jnp.asarray(tau, float)


class _NaNLate(fa.timing.AbstractStaleness):
    def __call__(self, tau):
        return jnp.where(tau > 3, jnp.nan, 1.0)


class _Rising(fa.timing.AbstractStaleness):
    def __call__(self, tau):
        return jnp.where(tau == 1, 0.5, 1.0)


@pytest.mark.parametrize("staleness, match", [
    (_OneMinusTau(), r"weights in \[0, 1\]: s\(2\) = -1"), (_NaNLate(), r"s\(4\) = nan"),
    (_Rising(), r"nonincreasing: s\(1\) = 0.5 < s\(2\) = 1"),
])
def test_a_staleness_function_must_give_weights(staleness, match):
    """A user's s(tau) with negative, NaN or growing weights ran to meaningless models
    without a word (diverged trials not counted, a NaN model per trial)."""
    for rule in (lambda: fa.timing.FedBuff(2, staleness=staleness),
                 lambda: fa.timing.FedAsync(0.9, staleness=staleness)):
        with pytest.raises(ValueError, match=match) as err:
            rule()
        assert "\n" not in str(err.value)


def test_diverged_trials_are_announced(problem):
    with pytest.warns(fa.DivergenceWarning, match="diverged"):
        out = fa.timing.simulate_async(
            problem, fa.timing.FedBuff(2), fa.timing.Clock(fa.timing.Exponential(1.0)),
            concurrency=4, local_steps=5, stepsize=3.0, steps=300, trials=2,
            key=jax.random.key(0), x0=jnp.ones(D))
    assert out.num_diverged > 0


def test_the_earliest_arrivals_are_distinct_clients_also_past_overflow():
    """Finish times that overflowed to inf (a law's extreme draw) tie with the mark of a taken
    entry: the server step took one client's update twice ([2, 0, 0] below)."""
    from fedjax_abc._engine._async import smallest

    finish = jnp.array([jnp.inf, jnp.inf, 1.0])
    assert smallest(finish, 3, jnp.inf).tolist() == [2, 0, 1]
    assert smallest(jnp.array([3.0, jnp.inf, 1.0, jnp.inf, 2.0]), 5, jnp.inf).tolist() == \
        [2, 4, 0, 1, 3]


def test_splitmix_without_x64_is_refused(problem):
    """SplitMix64 hashes 64-bit words: without JAX's 64-bit mode they were cut to 32 bits and
    every trial drew the same numbers (the same gap in each), silently."""
    kw = dict(concurrency=4, local_steps=Q, stepsize=0.1, steps=5, trials=2,
              key=jax.random.key(0), x0=jnp.ones(D), dtype="float32", generator="splitmix")
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="'splitmix' hashes 64-bit words"):
            fa.timing.simulate_async(problem, fa.timing.FedBuff(2),
                                     fa.timing.Clock(fa.timing.Exponential(1.0)), **kw)
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("make, match", [
    (lambda: fa.timing.Exponential(-1.0), r"mean \(-1.0\) must be finite and > 0"),
    (lambda: fa.timing.LogNormal(0.0, float("nan")), r"sigma \(nan\) must be finite"),
    (lambda: fa.timing.Pareto(1.0, 0.0), "shape"),
    (lambda: fa.timing.Clock(speed=[1.0, -2.0]), r"finite and > 0, got -2.0 for client 1"),
    (lambda: fa.timing.FedAsync(1.5), r"must be in \(0, 1\]"),
    (lambda: fa.timing.FedBuff(0), "buffer"),
])
def test_bad_laws_and_rules_one_line(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_a_sweep_over_the_buffer_and_a_law(problem):
    """C, K and a law's mean as grid axes: each point is its own run."""
    clock = fa.timing.Clock(fa.timing.Exponential(1.0))
    kw = dict(local_steps=Q, stepsize=0.2, steps=8, trials=2, key=jax.random.key(3),
              x0=jnp.ones(D))
    out = fa.timing.sweep_async(problem, fa.timing.FedBuff(2), clock,
                                grid={"rule.buffer": [1, 3], "clock.compute.mean": [0.5, 2.0],
                                      "concurrency": [3]}, **kw)
    assert out.shape == (2, 2, 1)
    point = out.point(**{"rule.buffer": 3, "clock.compute.mean": 2.0, "concurrency": 3})
    own = fa.timing.simulate_async(problem, fa.timing.FedBuff(3),
                                   fa.timing.Clock(fa.timing.Exponential(2.0)), concurrency=3,
                                   **kw)
    np.testing.assert_array_equal(point.gap, own.gap)
    np.testing.assert_array_equal(fa.timing.staleness(point), fa.timing.staleness(own))
    np.testing.assert_array_equal(point.metrics["time"], own.metrics["time"])
    with pytest.raises(ValueError, match="'rule.buffer': FedAsync has no field 'buffer' its "
                                         "constructor takes"):
        fa.timing.sweep_async(problem, fa.timing.FedAsync(0.5), clock,
                              grid={"rule.buffer": [2]}, concurrency=3, **kw)
    with pytest.raises(ValueError, match="not a setting"):
        fa.timing.sweep_async(problem, fa.timing.FedAsync(0.5), clock,
                              grid={"trials": [2]}, concurrency=3, **kw)


def test_a_sweep_labels_rules_and_clocks_as_fa_sweep_does(problem):
    """A rule or clock on an axis is named by its description (the label fa.sweep gives a
    component), so that point() finds it by the value itself or by its class's name."""
    clock = fa.timing.Clock(fa.timing.Exponential(1.0))
    buff, asyn = fa.timing.FedBuff(2), fa.timing.FedAsync(0.5)
    out = fa.timing.sweep_async(problem, buff, clock, grid={"rule": [buff, asyn]},
                                concurrency=3, local_steps=Q, stepsize=0.2, steps=4, trials=1,
                                key=jax.random.key(3), x0=jnp.ones(D))
    assert out.axes["rule"] == (
        "FedBuff(buffer=2, server_stepsize=1, staleness=PolynomialStaleness(a=0.5))",
        "FedAsync(mixing=0.5, staleness=ConstantStaleness(), buffer=1)")
    assert out.point(rule=asyn) is out.results[1]
    assert out.point(rule="FedBuff") is out.results[0]


def test_fedprox_clients_reuse_the_algorithm_s_client_rule(problem):
    """FedProx's proximal local steps run asynchronously: mu = 0 is FedAvg's run bit for
    bit, mu > 0 pulls the local models toward their start and changes the run."""
    clock = fa.timing.Clock(fa.timing.Exponential(1.0))
    kw = dict(concurrency=4, local_steps=Q, stepsize=0.2, steps=10, trials=2,
              key=jax.random.key(4), x0=jnp.ones(D))
    plain = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock, **kw)
    zero = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock,
                                    algorithm=fa.algorithms.FedProx(0.0), **kw)
    prox = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock,
                                    algorithm=fa.algorithms.FedProx(5.0), **kw)
    np.testing.assert_array_equal(plain.gap, zero.gap)
    assert np.max(np.abs(prox.gap - plain.gap)) > 1e-6
    np.testing.assert_array_equal(prox.metrics["time"], plain.metrics["time"])


def test_a_run_that_cannot_fit_is_refused_before_any_work(problem, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 6))
    with pytest.raises(ValueError, match=r"run fewer trials at a time") as err:
        fa.timing.simulate_async(problem, fa.timing.FedBuff(2),
                                 fa.timing.Clock(fa.timing.Exponential(1.0)), concurrency=10,
                                 local_steps=Q, stepsize=0.1, steps=5, trials=10_000,
                                 key=jax.random.key(0), x0=jnp.ones(D))
    assert "\n" not in str(err.value)


def test_progress_cuts_the_run_into_calls_with_the_same_numbers(problem):
    """T = 24 steps recorded every 2, with progress: the driver's segments report their
    steps up to 24; the records and staleness are those of one call."""
    seen = []
    kw = dict(concurrency=4, local_steps=Q, stepsize=0.2, steps=24, trials=2,
              key=jax.random.key(6), x0=jnp.ones(D), record_every=2)
    clock = fa.timing.Clock(fa.timing.Exponential(1.0))
    cut = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock,
                                   progress=lambda done, total, secs: seen.append((done, total)),
                                   **kw)
    whole = fa.timing.simulate_async(problem, fa.timing.FedBuff(2), clock, **kw)
    assert seen[-1] == (24, 24) and len(seen) > 2
    np.testing.assert_array_equal(cut.gap, whole.gap)
    np.testing.assert_array_equal(cut.metrics["time"], whole.metrics["time"])
    np.testing.assert_array_equal(fa.timing.staleness(cut), fa.timing.staleness(whole))
