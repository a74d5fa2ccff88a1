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
    """All n virtual trajectories from x_t: (x^Q_i, sum_l g_i(x~^l_i), sum_l grad f_i(x~^l_i)), each (n, d)."""
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


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_trajectory_is_the_packages_local_run(name):
    """The accumulation above follows the path of fa.local_run (eq. 5) for the same noise."""
    p, oracle, x_t, alpha, Q = setup(name)
    key = jax.random.key(0)
    x_q, sum_g, _ = virtual_round(p, oracle, x_t, alpha, key, Q)
    keys = jax.random.split(key, p.num_clients)
    for i in range(p.num_clients):
        noise = oracle.noise(keys[i], (Q,) + x_t.shape, x_t.dtype)
        np.testing.assert_array_equal(np.asarray(x_q[i]),
                                      np.asarray(fa.local_run(p, oracle, i, x_t, alpha, noise)))
    np.testing.assert_allclose(np.asarray(x_t - alpha * sum_g), np.asarray(x_q), rtol=1e-12, atol=1e-12)


@eqx.filter_jit
def lemma2_samples(p, oracle, x_t, alpha, Q, sampler, keys, fixed_subset=None):
    """One replicate of (G_t - Q grad f-bar_t) per key, shape (m, d)."""

    def one(key):
        k_traj, k_samp = jax.random.split(key)
        _, sum_g, sum_grad = virtual_round(p, oracle, x_t, alpha, k_traj, Q)
        mask = fa.sample_mask(sampler, k_samp, p.num_clients) if fixed_subset is None else fixed_subset
        G = mask @ sum_g / jnp.sum(mask)
        return G - jnp.mean(sum_grad, axis=0)

    return jax.vmap(one)(keys)


def lemma2_deviation(name, S, m, seed, fixed_subset=None):
    p, oracle, x_t, alpha, Q = setup(name)
    sampler = fa.UniformWithoutReplacement(S)
    keys = jax.random.split(jax.random.key(seed), m)
    return np.asarray(lemma2_samples(p, oracle, x_t, alpha, Q, sampler, keys, fixed_subset))


@pytest.mark.parametrize("name,S", [("huber_offsets", 1), ("huber_offsets", 3), ("huber_offsets", 10),
                                    ("quadratics", 3)])
def test_lemma2_sampled_direction_is_unbiased(name, S):
    m = 4000
    dev = lemma2_deviation(name, S, m, seed=S)
    se = dev.std(axis=0, ddof=1) / math.sqrt(m)
    assert np.all(se > 0)
    assert np.all(np.abs(dev.mean(axis=0)) <= Z * se), (dev.mean(axis=0), se)


def test_lemma2_check_has_power():
    """Always taking the first 3 clients (a biased 'sample') is rejected by the same check."""
    m = 4000
    first3 = jnp.asarray([1.0] * 3 + [0.0] * 7)
    dev = lemma2_deviation("huber_offsets", 3, m, seed=0, fixed_subset=first3)
    se = dev.std(axis=0, ddof=1) / math.sqrt(m)
    assert np.any(np.abs(dev.mean(axis=0)) > Z * se)


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


@eqx.filter_jit
def sampling_error(b, sampler, keys):
    """||(1/|slots|) sum_slots b_idx||^2 for one draw of the sampler per key, b of shape (n, d)."""
    n = b.shape[0]

    def one(key):
        idx, w = sampler(key, n)
        return jnp.sum((w @ b[idx] / jnp.sum(w)) ** 2)

    return jax.vmap(one)(keys)


@eqx.filter_jit
def lemma3_b(p, oracle, x_t, alpha, Q, key):
    _, _, sum_grad = virtual_round(p, oracle, x_t, alpha, key, Q)
    return sum_grad - jnp.mean(sum_grad, axis=0)  # b_i = sum_l grad f_i - Q grad f-bar


def draws(sampler, b, m, seed):
    return np.asarray(sampling_error(b, sampler, jax.random.split(jax.random.key(seed), m)))


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
    p, oracle, x_t, alpha, Q = setup(name)
    n, m = p.num_clients, 20000
    I_S = (n - S) / (n - 1)
    for draw in range(2):  # two fixed sets of trajectories
        b = lemma3_b(p, oracle, x_t, alpha, Q, jax.random.key(100 + draw))
        psi = float(jnp.mean(jnp.sum(b**2, axis=1)))
        assert psi > 1e-3  # the clients' accumulated gradients really differ
        err = draws(fa.UniformWithoutReplacement(S), b, m, seed=10 * S + draw)
        se = err.std(ddof=1) / math.sqrt(m)
        assert abs(err.mean() - I_S / S * psi) <= Z * se, (err.mean(), I_S / S * psi, se)
        # with replacement there is no finite-population factor: E = (1/S) psi
        err_r = draws(fa.WithReplacement(S), b, m, seed=10 * S + draw + 5)
        se_r = err_r.std(ddof=1) / math.sqrt(m)
        assert abs(err_r.mean() - psi / S) <= Z * se_r, (err_r.mean(), psi / S, se_r)
        if S > 1:  # and the two are told apart: the I_S factor is really checked
            assert abs(err.mean() - psi / S) > Z * se


def test_lemma3_full_participation_has_no_sampling_error():
    p, oracle, x_t, alpha, Q = setup("quadratics")
    b = lemma3_b(p, oracle, x_t, alpha, Q, jax.random.key(0))
    err = draws(fa.UniformWithoutReplacement(10), b, 10, seed=0)
    np.testing.assert_allclose(err, 0.0, atol=1e-20)


def test_lemma3_unconditional():
    """E over noise and S_t: E||(1/S) sum_{S_t} b_i||^2 - (I_S/S) Psi_t has mean 0 (eq. 14)."""
    p, oracle, x_t, alpha, Q = setup("huber_offsets")
    S, n, m = 3, p.num_clients, 8000
    I_S = (n - S) / (n - 1)
    sampler = fa.UniformWithoutReplacement(S)

    def one(key):
        k_traj, k_samp = jax.random.split(key)
        b = lemma3_b(p, oracle, x_t, alpha, Q, k_traj)
        mask = fa.sample_mask(sampler, k_samp, n)
        lhs = jnp.sum((mask @ b / S) ** 2)
        return lhs - I_S / S * jnp.mean(jnp.sum(b**2, axis=1)), lhs

    diff, lhs = (np.asarray(a) for a in jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(S), m)))
    se = diff.std(ddof=1) / math.sqrt(m)
    assert lhs.mean() > 10 * se  # non-trivial
    assert abs(diff.mean()) <= Z * se, (diff.mean(), se)
