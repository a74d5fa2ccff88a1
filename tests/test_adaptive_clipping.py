"""Adaptive clipping (Andrew et al. 2021): the clip norm as the transform's server state,
against a NumPy loop written from the paper's Algorithm 1, its quantile tracking in closed
form, and the split of the noise multiplier."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa

T = fa.transforms


def _grads(problem, x):
    return np.asarray(jax.vmap(lambda i: problem.local_grad(problem.client(i), jnp.asarray(x)))(
        jnp.arange(problem.num_clients)))


def _reference(problem, x0, rounds, alpha, Q, c0, gamma, eta):
    """FedAvg with full participation, exact gradients, no noise, and adaptive clipping:
    Delta_i = y_i^Q - x_t clipped to c_t, x_{t+1} = x_t + mean_i Delta_i, b_bar the share of
    updates with norm <= c_t, c_{t+1} = c_t exp(-eta (b_bar - gamma))."""
    x, c, clipped = np.array(x0, float), c0, 0
    norms = []
    for _ in range(rounds):
        y = np.repeat(x[None], problem.num_clients, 0)
        for _ in range(Q):
            y = y - alpha * np.stack([_grads(problem, y[i])[i] for i in range(len(y))])
        delta = y - x
        size = np.linalg.norm(delta, axis=1)
        below = size <= c
        clipped += int(np.sum(~below))
        delta = delta * np.where(below, 1.0, c / np.where(below, 1.0, size))[:, None]
        x = x + delta.mean(0)
        c = c * np.exp(-eta * (below.mean() - gamma))
        norms.append(c)
    return x, clipped, np.array(norms)


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_the_run_follows_a_numpy_loop_of_the_algorithm():
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=4, spread=2.0)
    x0 = np.full(4, 3.0)
    kw = dict(c0=0.2, gamma=0.5, eta=0.3)
    t = T.AdaptiveClipping(kw["c0"], target_quantile=kw["gamma"], learning_rate=kw["eta"])
    res = fa.simulate(p, sampler=fa.FullParticipation(), oracle=fa.ExactOracle(), local_steps=3,
                      stepsize=0.1, rounds=25, x0=x0, trials=2, key=jax.random.key(1),
                      transform=t, record_every=25)
    x, clipped, norms = _reference(p, x0, 25, 0.1, 3, **kw)
    np.testing.assert_allclose(res.x_final, np.broadcast_to(x, res.x_final.shape), rtol=1e-12)
    assert res.metrics["clipped"][0, -1] == clipped
    assert norms.max() > 3 * kw["c0"]  # the clip norm moved: a fixed one would be wrong
    fixed = fa.simulate(p, sampler=fa.FullParticipation(), oracle=fa.ExactOracle(),
                        local_steps=3, stepsize=0.1, rounds=25, x0=x0, trials=2,
                        key=jax.random.key(1), transform=T.Clip(kw["c0"]), record_every=25)
    assert np.abs(fixed.x_final - x).max() > 1e-2
    for mode in ("mask", "gather"):  # the server state is the same in both modes
        other = fa.simulate(p, num_sampled=3, oracle=fa.ExactOracle(), local_steps=2,
                            stepsize=0.1, rounds=10, x0=x0, trials=3, key=jax.random.key(2),
                            transform=t, mode=mode, record_every=1)
        if mode == "mask":
            first = other
    np.testing.assert_array_equal(first.x, other.x)


def test_the_clip_norm_settles_at_the_target_quantile():
    """Ten updates of norms 1..10 and gamma = 0.3: c_t rises until exactly three updates are
    unclipped (c in [3, 4)), where b_bar = gamma and the update is the identity."""
    t = T.AdaptiveClipping(0.5, target_quantile=0.3, learning_rate=0.1)
    updates = jnp.arange(1.0, 11.0)[:, None] * jnp.array([[0.6, 0.8]])
    words = jnp.zeros((10, 3), jnp.uint32)
    c = t.server_init(jnp.zeros(2))
    for _ in range(300):
        info = T.TransformInfo(jnp.asarray(10.0), 10, c)
        _, _, stats = jax.vmap(lambda w, u: t.apply(w, u, (), info))(words, updates)
        c = t.server_update(c, {k: v.sum() for k, v in stats.items()}, info)
    assert 3.0 <= float(c) < 4.0
    assert float(stats["unclipped"].sum()) == 3


def test_the_noise_multiplier_split():
    """z^-2 = z_Delta^-2 + (2 sigma_b)^-2 (Andrew et al., Theorem 1)."""
    from fedjax_abc._algorithms._privacy import update_noise_multiplier

    z, b = 1.0, 1.0
    assert float(update_noise_multiplier(z, b)) == pytest.approx(1 / np.sqrt(1 - 0.25), rel=1e-14)
    assert float(update_noise_multiplier(0.0, 0.0)) == 0.0
    assert float(update_noise_multiplier(2.0, 10.0)) > 2.0  # the updates get less than z


def test_the_count_and_update_noise_have_their_variances():
    """All updates zero (clients at their minima): each round's x_1 - x_0 is the update
    noise, N(0, z_Delta^2 c_0^2 / S^2), and the cumulative 'unclipped' stat is S plus the
    count noise N(0, sigma_b^2)."""
    from fedjax_abc._algorithms._privacy import update_noise_multiplier

    n, S, R = 10, 4, 6000
    p = fa.problems.quadratics(jax.random.key(0), n=n, d=3, spread=0.0)
    z, b, c0 = 1.2, 1.5, 0.5
    res = fa.simulate(p, num_sampled=S, oracle=fa.ExactOracle(), local_steps=1, stepsize=0.1,
                      rounds=1, x0=jnp.zeros(3), trials=R, key=jax.random.key(5),
                      transform=T.AdaptiveClipping(c0, noise_multiplier=z, count_stddev=b))
    expected = float(update_noise_multiplier(z, b)) ** 2 * c0 ** 2 / S ** 2
    x = res.x_final.reshape(-1)
    assert abs(x.var() - expected) / (expected * np.sqrt(2 / x.size)) < 4
    count = res.metrics["unclipped"][:, -1]
    assert abs(count.mean() - S) / (b / np.sqrt(R)) < 4
    assert abs(count.var() - b ** 2) / (b ** 2 * np.sqrt(2 / R)) < 4
    assert abs(x.var() - z ** 2 * c0 ** 2 / S ** 2) / (expected * np.sqrt(2 / x.size)) > 10


def test_bad_arguments_get_one_line_errors():
    for kwargs, word in [(dict(initial_norm=0.0), "initial_norm"),
                         (dict(initial_norm=1.0, target_quantile=1.5), "target_quantile"),
                         (dict(initial_norm=1.0, learning_rate=-1.0), "learning_rate"),
                         (dict(initial_norm=1.0, noise_multiplier=1.0), "count_stddev")]:
        with pytest.raises(ValueError, match=word) as e:
            T.AdaptiveClipping(**kwargs)
        assert "\n" not in str(e.value)


@pytest.mark.slow  # three compilations
def test_a_sweep_over_the_target_quantile_matches_separate_runs():
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=3, spread=2.0)
    kw = dict(num_sampled=3, oracle=fa.ExactOracle(), local_steps=2, stepsize=0.1, rounds=8,
              x0=jnp.full(3, 2.0), trials=2, key=jax.random.key(3), record_every=4)
    t = T.AdaptiveClipping(0.3)
    out = fa.sweep(p, grid={"transform.target_quantile": [0.2, 0.8]}, transform=t, **kw)
    for res, g in zip(out.results, (0.2, 0.8)):
        one = fa.simulate(p, transform=T.AdaptiveClipping(0.3, target_quantile=g), **kw)
        np.testing.assert_array_equal(res.x_final, one.x_final)
    assert not np.array_equal(out.results[0].x_final, out.results[1].x_final)
