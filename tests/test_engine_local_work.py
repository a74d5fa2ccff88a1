"""The engine's local loop: per-client and random local work, message transforms, stateful
samplers and the checks of an algorithm's outputs, each against a closed form or an
independent NumPy implementation written from the definitions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc.algorithms import FedAvg, Scaffold
from conftest import count_backend_compilations as count_compilations


def quadratics(a, b, oracle=None):
    """f_i(x) = a_i / 2 (x - b_i)^2 on R (one client per entry), f_i* = 0."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    x_star = np.sum(a * b) / np.sum(a)
    f_star = float(np.mean(a / 2 * (x_star - b) ** 2))
    return fa.make_problem(lambda c, x: 0.5 * c[0] * jnp.sum((x - c[1]) ** 2),
                           jnp.stack([jnp.asarray(a), jnp.asarray(b)], axis=1),
                           oracle or fa.ExactOracle(), local_minima=np.zeros(a.size),
                           f_star=f_star, x_star=np.array([x_star]),
                           grad_fn=lambda c, x: c[0] * (x - c[1]), name="quadratics")


def same_numbers(a, b) -> bool:
    """Every array of two results equal bit for bit (their configs may differ)."""
    names = ("gap", "grad_norm_sq", "x", "x_final")
    return (all(np.array_equal(getattr(a, k), getattr(b, k)) for k in names)
            and a.metrics.keys() == b.metrics.keys()
            and all(np.array_equal(a.metrics[k], b.metrics[k]) for k in a.metrics))


A = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
B = np.array([-2.0, 0.0, 1.0, 3.0, 5.0])


# ----------------------------------------------------------------- per-client Q_i


def test_per_client_steps_match_the_closed_form():
    """Client i's Q_i exact gradient steps from x: y_i = b_i + (1 - alpha a_i)^Q_i (x - b_i);
    with full participation x_{t+1} = mean_i y_i."""
    counts, alpha, T = np.array([1, 4, 2, 7, 3]), 0.1, 6
    p = quadratics(A, B)
    res = fa.simulate(p, local_steps=counts, stepsize=alpha, rounds=T, x0=[4.0], trials=2,
                      key=jax.random.key(0), record_every=1)
    x, path = 4.0, [4.0]
    for _ in range(T):
        x = float(np.mean(B + (1 - alpha * A) ** counts * (x - B)))
        path.append(x)
    np.testing.assert_allclose(res.x[:, :, 0], np.tile(path, (2, 1)), rtol=1e-13, atol=1e-13)
    assert res.config["local_steps"] == "PerClientSteps(counts=[1, 4, 2, 7, 3], max_steps=7)"


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_per_client_steps_all_q_give_the_bits_of_an_int_q():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=3, stepsize=1e-2, rounds=30, x0=p.x_star + 1.0, trials=8,
              key=jax.random.key(1), record_every=5)
    for alg in (FedAvg(), Scaffold()):
        for mode in ("mask", "gather"):
            ref = fa.simulate(p, local_steps=5, algorithm=alg, mode=mode, **kw)
            got = fa.simulate(p, local_steps=fa.PerClientSteps([5] * 10), algorithm=alg,
                              mode=mode, **kw)
            assert same_numbers(ref, got), (type(alg).__name__, mode)


def test_scaffold_reads_each_clients_own_step_count():
    """SCAFFOLD's c_i^+ = c_i - c + (x_t - y_i) / (K_i alpha), after K_i steps: one round
    from c = c_i = 0 with exact gradients of the quadratics, against the formula."""
    counts, alpha = np.array([1, 4, 2, 7, 3]), 0.1
    p = quadratics(A, B)
    res = fa.simulate(p, local_steps=counts, stepsize=alpha, rounds=2, x0=[4.0],
                      key=jax.random.key(0), record_every=1, algorithm=Scaffold())
    x0 = 4.0
    y = B + (1 - alpha * A) ** counts * (x0 - B)  # round 0: no correction (c = c_i = 0)
    x1 = x0 + np.mean(y - x0)
    c_i = (x0 - y) / (counts * alpha)
    c = np.mean(c_i)  # (S / n) mean(Delta c_i) with S = n
    corr = c - c_i  # round 1: y^{l+1} = y^l - alpha (a_i (y^l - b_i) + c - c_i)
    fixed = B - corr / A  # each local map's fixed point
    y1 = fixed + (1 - alpha * A) ** counts * (x1 - fixed)
    x2 = x1 + np.mean(y1 - x1)
    np.testing.assert_allclose(res.x[0, :, 0], [x0, x1, x2], rtol=1e-13)


# ------------------------------------------------------------ random local steps

def _drawn_steps(law, trials=200, rounds=20):
    """K of every round and trial, read off f(x) = x^2 / 2 on one client: with exact
    gradients and alpha = 1/2, a round multiplies x by 2^-K."""
    p = quadratics([1.0], [0.0])
    res = fa.simulate(p, local_steps=law, stepsize=0.5, rounds=rounds, x0=[1.0], trials=trials,
                      key=jax.random.key(3), record_every=1)
    ratio = res.x[:, 1:, 0] / res.x[:, :-1, 0]
    k = -np.log2(ratio)
    np.testing.assert_allclose(k, np.round(k), atol=1e-9)
    return np.round(k).astype(int).ravel()


def _pmf_uniform(q):
    return np.full(q, 1.0 / q)


def _pmf_geometric(p, q):
    k = np.arange(1, q + 1)
    pmf = (1 - p) ** (k - 1) * p
    pmf[-1] = (1 - p) ** (q - 1)  # the tail P(K >= Q_max)
    return pmf


@pytest.mark.parametrize("law, pmf", [
    (fa.UniformSteps(6), _pmf_uniform(6)),
    (fa.GeometricSteps(0.3, 8), _pmf_geometric(0.3, 8)),
    (fa.PmfSteps([0.1, 0.0, 0.6, 0.3]), np.array([0.1, 0.0, 0.6, 0.3])),
])
def test_random_local_steps_follow_their_law(law, pmf):
    """Chi-square of 4000 draws against the law's pmf written from its definition (fixed
    seed; the 0.999 quantile of chi-square with Q - 1 degrees of freedom is below 27)."""
    k = _drawn_steps(law)
    counts = np.bincount(k, minlength=pmf.size + 1)[1:]
    assert counts.sum() == k.size and k.min() >= 1 and k.max() <= pmf.size
    expected = pmf * k.size
    assert np.all(counts[expected == 0] == 0)
    kept = expected > 0
    chi2 = np.sum((counts[kept] - expected[kept]) ** 2 / expected[kept])
    assert chi2 < 27.0, (counts, expected)
    mean, se = (np.arange(1, pmf.size + 1) * pmf).sum(), k.std() / np.sqrt(k.size)
    assert abs(k.mean() - mean) < 4 * se


def test_a_wrong_law_fails_the_check():
    """Negative control: the draws of UniformSteps(6) against a geometric pmf."""
    k = _drawn_steps(fa.UniformSteps(6))
    expected = _pmf_geometric(0.3, 6) * k.size
    counts = np.bincount(k, minlength=7)[1:]
    assert np.sum((counts - expected) ** 2 / expected) > 27.0


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_random_steps_mask_equals_gather_and_are_per_client():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=3, stepsize=1e-2, rounds=20, x0=p.x_star + 1.0, trials=8,
              key=jax.random.key(1), record_every=5, local_steps=fa.GeometricSteps(0.4, 6))
    for alg in (FedAvg(), Scaffold()):
        a = fa.simulate(p, algorithm=alg, mode="mask", **kw)
        b = fa.simulate(p, algorithm=alg, mode="gather", **kw)
        assert same_numbers(a, b)
    fixed = fa.simulate(p, **dict(kw, local_steps=6))
    assert not np.array_equal(fixed.x_final, a.x_final)


def test_new_counts_and_laws_compile_nothing():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=3, stepsize=1e-2, rounds=7, x0=p.x_star + 1.0, trials=3,
              key=jax.random.key(1), record_every=7)
    for first, second in [([2, 4] * 5, [4, 1] * 5),  # the same Q_max
                          (fa.GeometricSteps(0.3, 4), fa.GeometricSteps(0.7, 4))]:
        fa.simulate(p, local_steps=first, **kw)
        with count_compilations() as later:
            fa.simulate(p, local_steps=second, **kw)
        assert later == []


@pytest.mark.parametrize("bad, match", [
    ([1, 2], r"one entry per client \(n=5\)"),
    ([0, 1, 1, 1, 1], r"counts must be >= 1"),
    ([1.5] * 5, r"1-d array of integers"),
    ("many", r"local_steps must be an integer"),
])
def test_bad_local_steps_are_refused(bad, match):
    p = quadratics(A, B)
    with pytest.raises(ValueError, match=match):
        fa.simulate(p, local_steps=bad, stepsize=0.1, rounds=2, x0=[0.0], key=jax.random.key(0))


def test_bad_laws_are_refused():
    with pytest.raises(ValueError, match=r"probability p in \(0, 1\]"):
        fa.GeometricSteps(0.0, 5)
    with pytest.raises(ValueError, match=r"max_steps \(Q_max\) must be an integer"):
        fa.UniformSteps(0)
    with pytest.raises(ValueError, match=r"not all 0"):
        fa.PmfSteps([0.0, 0.0])


# ---------------------------------------------------------------------- transforms


def test_clipping_matches_numpy_and_counts_the_clipped():
    """x_{t+1} = x_t + mean_i clip_c(y_i - x_t) with y_i after Q exact steps (NumPy)."""
    Q, alpha, c, T = 3, 0.2, 0.8, 8
    p = quadratics(A, B)
    res = fa.simulate(p, local_steps=Q, stepsize=alpha, rounds=T, x0=[6.0], trials=2,
                      key=jax.random.key(0), record_every=1, transform=fa.transforms.Clip(c))
    x, path, clipped, total = 6.0, [6.0], [0.0], 0.0
    for _ in range(T):
        delta = (B + (1 - alpha * A) ** Q * (x - B)) - x
        size = np.abs(delta)
        total += np.sum(size > c)
        x = x + np.mean(np.where(size > c, delta * c / size, delta))
        path.append(x)
        clipped.append(total)
    np.testing.assert_allclose(res.x[0, :, 0], path, rtol=1e-12)
    np.testing.assert_array_equal(res.metrics["clipped"][0], clipped)
    assert 0 < total < T * A.size  # some clipped, not all: the count is informative


def test_transform_mask_equals_gather_and_none_changes_nothing():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=3, stepsize=1e-2, rounds=20, x0=p.x_star + 1.0, trials=8,
              key=jax.random.key(1), record_every=5, local_steps=4)
    a = fa.simulate(p, mode="mask", transform=fa.transforms.Clip(0.02), **kw)
    b = fa.simulate(p, mode="gather", transform=fa.transforms.Clip(0.02), **kw)
    assert same_numbers(a, b)
    assert fa.simulate(p, transform=None, **kw).equals(fa.simulate(p, **kw))


class ErrorFeedbackSign(fa.transforms.AbstractTransform):
    """Test-only: sign compression with error feedback, the memory a client state."""

    def init(self, x):
        return jnp.zeros_like(x)

    def apply(self, words, update, memory, info):
        corrected = update + memory
        sent = jnp.mean(jnp.abs(corrected)) * jnp.sign(corrected)
        return sent, corrected - sent, {"bits": jnp.asarray(32.0 + update.size, update.dtype)}


def test_stateful_transform_keeps_state_for_participants_only():
    """Error feedback against NumPy: memory e_i, sent s_i = mean|Delta_i + e_i| sign(...),
    e_i <- Delta_i + e_i - s_i for the sampled clients only; 'bits' counts 33 a message."""
    p = quadratics(A, B)
    kw = dict(local_steps=2, stepsize=0.3, rounds=5, x0=[3.0], trials=1, key=jax.random.key(4),
              record_every=1, num_sampled=2)
    res = fa.simulate(p, transform=ErrorFeedbackSign(), **kw)
    gather = fa.simulate(p, transform=ErrorFeedbackSign(), mode="gather", **kw)
    assert same_numbers(res, gather)
    # the sampled clients of each round, from the same key without the transform (Q = 1,
    # alpha a_i = 1 would reveal them; here read from a run with ExactOracle and Q = 0
    # equivalent: the sampler's draws do not depend on the transform)
    sampler, n = fa.UniformWithoutReplacement(2), A.size
    from fedjax_abc._engine._random import round_keys, stream_words
    from fedjax_abc._engine._threefry import fold_in_data
    trial = fold_in_data(jax.random.key_data(jax.random.key(4)), jnp.arange(1))
    x, e, path = 3.0, np.zeros(n), [3.0]
    for t in range(5):
        k_t = round_keys(trial, jnp.int32(t), "threefry")
        idx, _ = sampler.from_words(stream_words(k_t[:, 0], 0, sampler.num_words(n)), n)
        idx = np.asarray(idx)
        delta = (B + (1 - 0.3 * A) ** 2 * (x - B)) - x
        corrected = delta[idx] + e[idx]
        sent = np.abs(corrected) * np.sign(corrected)  # d = 1: mean|.| is |.|
        e[idx] = corrected - sent
        x = x + np.mean(sent)
        path.append(x)
    np.testing.assert_allclose(res.x[0, :, 0], path, rtol=1e-12)
    np.testing.assert_array_equal(res.metrics["bits"][0], 33.0 * 2 * np.arange(6))


# -------------------------------------------------------------- stateful samplers


class Cyclic(fa.AbstractSampler):
    """Test-only: client t mod n in round t, the counter carried as the sampler's state."""

    distinct_slots = True
    num_sampled = 1

    def num_slots(self, n):
        return 1

    def init_state(self, n):
        return jnp.zeros((), jnp.int32)

    def sample(self, words, n, state):
        return (state % n)[None].astype(jnp.int32), jnp.ones((1,)), state + 1


def test_a_stateful_sampler_carries_its_state_from_round_to_round():
    """alpha a_i = 1 and one exact step put x_{t+1} at b of the round's client: the path
    reads the sampler's sequence b_0, b_1, ..., b_4, b_0, ..."""
    p = quadratics(np.ones(5), B)
    for mode in ("mask", "gather"):
        res = fa.simulate(p, sampler=Cyclic(), local_steps=1, stepsize=1.0, rounds=12, x0=[9.0],
                          trials=3, key=jax.random.key(0), record_every=1, mode=mode)
        np.testing.assert_array_equal(res.x[:, 1:, 0], np.tile(B[np.arange(12) % 5], (3, 1)))


# ------------------------------------------------------------ algorithm checks


class WrongMessage(FedAvg):
    def client_final(self, server, client, y, local, info):
        return y[:1], client


class ScalarMessage(FedAvg):
    def client_final(self, server, client, y, local, info):
        return jnp.sum(y), client


class NotAServerState(FedAvg):
    def init(self, x0):
        return (x0,)


class ChangesItsState(FedAvg):
    reads_scale = False

    def server_update(self, server, mean_message, info):
        return fa.algorithms.ServerState(server.x.astype(jnp.float32))


@pytest.mark.parametrize("alg, match", [
    (WrongMessage(), r"WrongMessage.client_final's message must have shape \(\) or \(d=3, ...\), "
                     r"got \(1,\)"),
    (ScalarMessage(), r"ScalarMessage.client_final's message has no leaf of the model's "
                      r"shape \(d=3,\): its scalars would be broadcast"),
    (NotAServerState(), r"NotAServerState.init must return a fedjax_abc.algorithms."
                        r"AbstractServerState"),
    (ChangesItsState(), r"ChangesItsState.server_update changes a state leaf from \(\d+, 3\) "
                        r"float64 to \(\d+, 3\) float32"),
])
def test_algorithm_outputs_are_checked(alg, match):
    p = fa.problems.quadratics(jax.random.key(0), n=4, d=3)
    with pytest.raises(ValueError, match=match):
        fa.simulate(p, algorithm=alg, local_steps=2, stepsize=0.01, rounds=3,
                    x0=np.zeros(3), trials=8, key=jax.random.key(0))


# --------------------------------------------------------------- the prepared run


def test_a_simulation_runs_again_without_compiling_or_tracing():
    from conftest import count_compilations as count_all  # compiles and jit traces
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    x_a, x_b = np.asarray(p.x_star) + 1.0, np.asarray(p.x_star) - 1.0
    sim = fa.Simulation(p, num_sampled=2, local_steps=fa.UniformSteps(4), rounds=17,
                        record_every=17, algorithm=Scaffold(), transform=fa.transforms.Clip(0.1))
    sim.run(key=jax.random.key(1), x0=x_a, trials=5, stepsize=1e-2)
    with count_all() as events:
        b = sim.run(key=jax.random.key(2), x0=x_b, trials=5, stepsize=np.full(17, 2e-2))
    assert events == []
    ref = fa.simulate(p, num_sampled=2, local_steps=fa.UniformSteps(4), rounds=17,
                      record_every=17, algorithm=Scaffold(), transform=fa.transforms.Clip(0.1),
                      key=jax.random.key(2), x0=x_b, trials=5, stepsize=np.full(17, 2e-2))
    assert ref.equals(b)


def test_a_simulation_checks_its_arguments_when_built_and_run():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    with pytest.raises(ValueError, match=r"num_sampled \(S=11\) must be in \[1, n=10\]"):
        fa.Simulation(p, num_sampled=11, local_steps=2, rounds=5)
    sim = fa.Simulation(p, num_sampled=2, local_steps=2, rounds=5)
    with pytest.raises(ValueError, match=r"x0 must have shape \(1,\) or \(trials=3, 1\)"):
        sim.run(key=jax.random.key(0), x0=np.zeros((2, 1)), trials=3, stepsize=0.1)
    with pytest.raises(ValueError, match=r"stepsize"):
        sim.run(key=jax.random.key(0), x0=0.0, trials=3, stepsize=-0.1)
