"""Lemmas 2 and 3 of the paper by Monte Carlo, with the package's problems, oracles and samplers.

For a fixed x_t, all n virtual trajectories x~^l_{i,t} of one round (Section II-A) are run with
the package's oracle; along them we accumulate the stochastic directions sum_l g_i and the true
gradients sum_l grad f_i(x~^l_i). Then, with G_t = (1/S) sum_{i in S_t} sum_l g_i,

- Lemma 2 (eq. 13): E_t[G_t] = (1/n) sum_i sum_l E_t[grad f_i(x~^l_i)] = Q E_t[grad f-bar_t];
- Lemma 3 (eq. 14): with b_i = sum_l grad f_i(x~^l_i) - Q grad f-bar_t, conditionally on the
  trajectories E||(1/S) sum_{i in S_t} b_i||^2 = (I_S / S) (1/n) sum_i ||b_i||^2,
  I_S = (n - S)/(n - 1) (eq. 10).

Tolerances: 4 standard errors of the Monte Carlo mean.
"""

import functools
import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa

Z = 4.0


def virtual_round(problem, oracle, x, alpha, key, Q):
    """All n virtual trajectories from x_t for one round.

    Returns (x^Q_i, sum_l g_i(x~^l_i), sum_l grad f_i(x~^l_i)), each of shape (n, d).
    """
    n = problem.num_clients

    def one(i, k):
        client = problem.client(i)
        noise = oracle.noise(k, (Q,) + x.shape, x.dtype)

        def step(carry, z):
            x_l, sum_g, sum_grad = carry
            g = oracle.gradient(problem, client, x_l, z)
            return (x_l - alpha * g, sum_g + g, sum_grad + problem.local_grad(client, x_l)), None

        zero = jnp.zeros_like(x)
        (x_q, sum_g, sum_grad), _ = jax.lax.scan(step, (x, zero, zero), noise)
        return x_q, sum_g, sum_grad

    return jax.vmap(one)(jnp.arange(n), jax.random.split(key, n))


PROBLEMS = {
    "huber_offsets": lambda: fa.problems.huber_offsets(jax.random.key(3), n=10, d_max=6.0),
    "quadratics": lambda: fa.problems.quadratics(jax.random.key(4), n=10, d=3, spread=2.0),
}


def setup(name):
    p = PROBLEMS[name]()
    x_t = p.x_star + 1.5
    return p, p.oracle, x_t, 0.2, 5


@eqx.filter_jit
def _both_paths(p, oracle, x_t, alpha, Q, key):
    x_q, sum_g, _ = virtual_round(p, oracle, x_t, alpha, key, Q)
    noise = jax.vmap(lambda k: oracle.noise(k, (Q,) + x_t.shape, x_t.dtype))(
        jax.random.split(key, p.num_clients))
    pkg = jax.vmap(lambda i, z: fa.local_run(p, oracle, i, x_t, alpha, z))(jnp.arange(p.num_clients), noise)
    return x_q, sum_g, pkg


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_trajectory_is_the_packages_local_run(name):
    """The accumulation above follows the path of fa.local_run (eq. 5) for the same noise."""
    p, oracle, x_t, alpha, Q = setup(name)
    x_q, sum_g, pkg = (np.asarray(a) for a in _both_paths(p, oracle, x_t, alpha, Q, jax.random.key(0)))
    np.testing.assert_allclose(x_q, pkg, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(np.asarray(x_t) - alpha * sum_g, x_q, rtol=1e-12, atol=1e-12)
    assert np.unique(np.round(x_q, 8), axis=0).shape[0] == p.num_clients  # the clients moved differently


M = 8000  # Monte Carlo replicates (trajectory sets and sampled subsets)


@eqx.filter_jit
def _trajectories(p, oracle, x_t, alpha, Q, keys):
    return jax.vmap(lambda k: virtual_round(p, oracle, x_t, alpha, k, Q))(keys)


@functools.lru_cache(maxsize=None)
def trajectories(name, seed):
    """M independent sets of the n virtual trajectories from x_t: (sum_l g_i, sum_l grad f_i), (M, n, d)."""
    p, oracle, x_t, alpha, Q = setup(name)
    keys = jax.random.split(jax.random.key(seed), M)
    _, sum_g, sum_grad = _trajectories(p, oracle, x_t, alpha, Q, keys)
    return np.asarray(sum_g), np.asarray(sum_grad)


@eqx.filter_jit
def _masks(sampler, n, keys):
    return jax.vmap(lambda k: fa.sample_mask(sampler, k, n))(keys)


def masks(sampler, n, seed):
    """M independent draws of the sampler's mask over n clients, shape (M, n)."""
    return np.asarray(_masks(sampler, n, jax.random.split(jax.random.key(seed), M)))


def lemma2_deviation(name, mask):
    """G_t - Q grad f-bar_t per replicate, shape (M, d); mask (M, n) picks the participants."""
    sum_g, sum_grad = trajectories(name, seed=0)
    G = np.einsum("mn,mnd->md", mask, sum_g) / mask.sum(axis=1, keepdims=True)
    return G - sum_grad.mean(axis=1)


@pytest.mark.parametrize("name,S", [("huber_offsets", 1), ("huber_offsets", 3), ("huber_offsets", 10),
                                    ("quadratics", 3)])
def test_lemma2_sampled_direction_is_unbiased(name, S):
    dev = lemma2_deviation(name, masks(fa.UniformWithoutReplacement(S), 10, seed=S))
    se = dev.std(axis=0, ddof=1) / math.sqrt(M)
    assert np.all(se > 0)
    assert np.all(np.abs(dev.mean(axis=0)) <= Z * se), (dev.mean(axis=0), se)


def test_lemma2_check_has_power():
    """Always taking the first 3 clients (a biased 'sample') is rejected by the same check."""
    first3 = np.broadcast_to(np.array([1.0] * 3 + [0.0] * 7), (M, 10))
    dev = lemma2_deviation("huber_offsets", first3)
    se = dev.std(axis=0, ddof=1) / math.sqrt(M)
    assert np.any(np.abs(dev.mean(axis=0)) > Z * se)


def test_lemma2_is_not_q_times_the_gradient_at_x_t():
    """E_t[G_t] differs from Q grad f(x_t) (the local-drift bias noted after Lemma 2)."""
    p, _, x_t, _, Q = setup("huber_offsets")
    sum_g, _ = trajectories("huber_offsets", seed=0)
    G = sum_g.mean(axis=1)  # full participation
    se = G.std(axis=0, ddof=1) / math.sqrt(M)
    assert np.all(np.abs(G.mean(axis=0) - Q * np.asarray(p.grad(x_t))) > Z * se)


def test_lemma2_through_simulate():
    """One round of simulate: E[x_1] is the same for S = 3 and S = n (x_1 = x_0 - alpha G_0)."""
    p = fa.problems.huber_offsets(jax.random.key(3), n=10, d_max=6.0)
    kw = dict(local_steps=5, stepsize=0.2, rounds=1, x0=p.x_star + 1.5, trials=4000)
    a = fa.simulate(p, num_sampled=3, key=jax.random.key(1), **kw).x_final[:, 0]
    b = fa.simulate(p, num_sampled=10, key=jax.random.key(2), **kw).x_final[:, 0]
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    assert abs(a.mean() - b.mean()) <= Z * se
    # sampling adds variance (Lemma 3): Var x_1 is larger for S = 3
    assert a.var() > 1.5 * b.var()


# ---------------------------------------------------------------------------- Lemma 3


def lemma3_b(sum_grad):
    """b_i = sum_l grad f_i(x~^l_i) - Q grad f-bar_t, over the last two axes (n, d)."""
    return sum_grad - sum_grad.mean(axis=-2, keepdims=True)


def sampling_error(b, mask):
    """||(1/|slots|) sum_slots b_i||^2 per mask row; a client drawn twice counts twice."""
    return np.sum((mask @ b / mask.sum(axis=1, keepdims=True)) ** 2, axis=1)


def test_lemma3_identity_by_enumeration():
    """The reference value itself: averaging over all C(n, S) subsets gives (I_S/S)(1/n) sum ||b_i||^2."""
    rng = np.random.default_rng(0)
    n, d = 6, 2
    b = rng.normal(size=(n, d))
    b -= b.mean(axis=0)
    for S in range(1, n + 1):
        lhs = np.mean([np.sum(b[list(c)].mean(axis=0) ** 2) for c in itertools.combinations(range(n), S)])
        I_S = (n - S) / (n - 1)
        np.testing.assert_allclose(lhs, I_S / S * np.mean(np.sum(b**2, axis=1)), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name,S", [("huber_offsets", 1), ("huber_offsets", 3), ("huber_offsets", 7),
                                    ("quadratics", 3)])
def test_lemma3_conditional_on_trajectories(name, S):
    """Fixed trajectories, many subsets S_t: E||(1/S) sum_{S_t} b_i||^2 = (I_S/S)(1/n) sum ||b_i||^2."""
    n = 10
    I_S = (n - S) / (n - 1)
    _, sum_grad = trajectories(name, seed=0)
    uniform = masks(fa.UniformWithoutReplacement(S), n, seed=10 * S)
    repl = masks(fa.WithReplacement(S), n, seed=10 * S + 5)
    for draw in range(2):  # two fixed sets of trajectories
        b = lemma3_b(sum_grad[draw])
        psi = float(np.mean(np.sum(b**2, axis=1)))
        assert psi > 1e-3  # the clients' accumulated gradients really differ
        err = sampling_error(b, uniform)
        se = err.std(ddof=1) / math.sqrt(M)
        assert abs(err.mean() - I_S / S * psi) <= Z * se, (err.mean(), I_S / S * psi, se)
        # with replacement there is no finite-population factor: E = (1/S) psi
        err_r = sampling_error(b, repl)
        se_r = err_r.std(ddof=1) / math.sqrt(M)
        assert abs(err_r.mean() - psi / S) <= Z * se_r, (err_r.mean(), psi / S, se_r)
        if S > 1:  # and the two are told apart: the I_S factor is really checked
            assert abs(err.mean() - psi / S) > Z * se


def test_lemma3_full_participation_has_no_sampling_error():
    _, sum_grad = trajectories("quadratics", seed=0)
    err = sampling_error(lemma3_b(sum_grad[0]), masks(fa.UniformWithoutReplacement(10), 10, seed=0)[:10])
    np.testing.assert_allclose(err, 0.0, atol=1e-20)


def test_lemma3_unconditional():
    """Over noise and S_t jointly: E||(1/S) sum_{S_t} b_i||^2 - (I_S/S) Psi_t has mean 0 (eq. 14)."""
    S, n = 3, 10
    I_S = (n - S) / (n - 1)
    _, sum_grad = trajectories("huber_offsets", seed=0)
    b = lemma3_b(sum_grad)  # (M, n, d)
    mask = masks(fa.UniformWithoutReplacement(S), n, seed=99)
    lhs = np.sum((np.einsum("mn,mnd->md", mask, b) / S) ** 2, axis=1)
    diff = lhs - I_S / S * np.mean(np.sum(b**2, axis=2), axis=1)
    se = diff.std(ddof=1) / math.sqrt(M)
    assert lhs.mean() > 10 * se  # non-trivial
    assert abs(diff.mean()) <= Z * se, (diff.mean(), se)
