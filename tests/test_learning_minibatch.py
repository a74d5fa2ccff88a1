"""The mini-batch oracle on a softmax problem, and the paper's constants measured on it.

- Unbiased with the sampling variance of the mini-batch mean: for a client with m samples
  and per-sample gradients g_j (computed here in NumPy from the softmax formulas,
  independently of the package), a uniform mini-batch of b rows gives a mean gradient with
  E = (1/m) sum_j g_j and E||g - mean||^2 = s^2 / b with replacement, s^2 (m - b) / (b (m -
  1)) without (s^2 the population variance). Many draws through the oracle's own
  word-to-row path agree with both within standard errors; the oracle's closed-form
  ``variance`` equals them to rounding; the rows with replacement are exactly
  floor(w m / 2^32).
- mask and gather make the same numbers; SCAFFOLD runs.
- L (closed-form bound >= power iteration = exact top eigenvalue at the points), the ABC
  constants along the run's iterates (exact variance = Monte Carlo within errors), Theorem
  2's stepsize and bound from them; held-out accuracy.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa

DRAWS = 20_000


@pytest.fixture(scope="module")
def setup():
    data = fa.data.synthetic_data(jax.random.key(5), 1.0, 1.0, num_clients=5, num_features=4,
                                  num_classes=3, max_samples=40)
    problem = fa.problems.softmax_regression(data.features, data.labels, l2=1e-2, num_classes=3,
                                             oracle=fa.MinibatchOracle(4))
    kw = dict(num_sampled=2, local_steps=3, stepsize=0.1, rounds=30, x0=np.zeros(problem.dim),
              trials=8, key=jax.random.key(0), record_every=5)
    return data, problem, fa.simulate(problem, mode="mask", **kw), kw


def _per_sample_grads(X, y, x, l2, K=3):
    """(m, d) gradients of CE_j + (l2/2)||x||^2, x = ravel([[W], [b]]), in NumPy."""
    p = X.shape[1]
    W, b = x[: p * K].reshape(p, K), x[p * K:]
    z = X @ W + b
    P = np.exp(z - z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    R = P - np.eye(K)[y]
    Xt = np.concatenate([X, np.ones((len(y), 1))], axis=1)
    return np.einsum("ja,jk->jak", Xt, R).reshape(len(y), -1) + l2 * x


@pytest.mark.parametrize("replace", [False, True])
def test_unbiased_with_the_closed_form_variance(setup, replace):
    data, problem, _, _ = setup
    b = 4
    oracle = fa.MinibatchOracle(b, replace=replace)
    x = np.linspace(-0.5, 0.7, problem.dim)
    words = jax.random.bits(jax.random.key(1), (2, DRAWS, b), jnp.uint32)

    @jax.jit
    def draws(i, w):
        client = problem.client(i)
        return jax.vmap(lambda wj: oracle.gradient(problem, client, jnp.asarray(x), wj))(w)

    variance = jax.jit(lambda i: oracle.variance(problem, i, jnp.asarray(x)))
    for i in range(2):
        X, y = data.features[i], data.labels[i]
        G = _per_sample_grads(X, y, x, 1e-2)
        m = len(y)
        mean, pop = G.mean(0), np.mean(np.sum((G - G.mean(0)) ** 2, axis=1))
        want = pop / b if replace else pop * (m - b) / (b * (m - 1))
        g = np.asarray(draws(i, words[i]))
        se = g.std(0, ddof=1) / np.sqrt(DRAWS)
        z = np.abs(g.mean(0) - mean) / se
        assert z.max() < 4.5, f"client {i}: mean off by {z.max():.1f} standard errors"
        sq = np.sum((g - mean) ** 2, axis=1)
        z_var = abs(sq.mean() - want) / (sq.std(ddof=1) / np.sqrt(DRAWS))
        assert z_var < 4.0, f"client {i}: variance {sq.mean():.5g} vs {want:.5g} ({z_var:.1f} se)"
        exact = float(variance(i))
        assert np.isclose(exact, want, rtol=1e-12), (exact, want)


def test_rows_with_replacement_are_floor_w_m_over_2_32_and_without_are_distinct():
    words = np.asarray(jax.random.bits(jax.random.key(2), (500, 6), jnp.uint32))
    m = 11
    oracle = fa.MinibatchOracle(6, replace=True)
    counts = jnp.array([m])
    problem = type("P", (), {"params": type("D", (), {"count": counts})()})()
    client = fa.Client(None, 0.0, jnp.asarray(0))
    got = np.asarray(jax.vmap(lambda w: oracle.rows(problem, client, w))(words))
    np.testing.assert_array_equal(got, (words.astype(np.uint64) * m) >> 32)
    without = np.asarray(jax.vmap(lambda w: fa.MinibatchOracle(6).rows(problem, client, w))(words))
    assert without.min() >= 0 and without.max() < m
    assert all(len(set(row)) == 6 for row in without.tolist())
    # Floyd's algorithm: every row equally likely to be in the batch (6/11 each)
    share = np.bincount(without.ravel(), minlength=m) / words.shape[0]
    assert np.all(np.abs(share - 6 / m) < 4 * np.sqrt((6 / m) * (1 - 6 / m) / words.shape[0]))


def _floyd(words, m):
    """Floyd's algorithm in plain Python: step k draws t = floor(w_k (j + 1) / 2^32), j = m - b
    + k, and takes t, or j when t was taken before."""
    b, chosen = len(words), []
    for k, w in enumerate(words):
        j = m - b + k
        t = (int(w) * (j + 1)) >> 32
        chosen.append(j if t in chosen else t)
    return chosen


@pytest.mark.parametrize("b, m", [(1, 1), (6, 6), (6, 7), (6, 11), (32, 33), (32, 221)])
def test_rows_without_replacement_are_floyds_algorithm_step_by_step(b, m):
    words = np.array(jax.random.bits(jax.random.key(3), (300, b), jnp.uint32))
    words[:100] >>= 26  # small words: draws near 0, taken rows drawn again
    words[100:200] |= np.uint32(0xFC000000)  # large ones: t = j, then j taken again
    problem = type("P", (), {"params": type("D", (), {"count": jnp.array([m])})()})()
    client = fa.Client(None, 0.0, jnp.asarray(0))
    rows = jax.jit(jax.vmap(lambda w: fa.MinibatchOracle(b).rows(problem, client, w)))
    got = np.asarray(rows(words))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [_floyd(w, m) for w in words])


def test_mask_and_gather_agree_and_scaffold_runs(setup):
    _, problem, mask, kw = setup
    gather = fa.simulate(problem, mode="gather", **kw)
    np.testing.assert_allclose(gather.x_final, mask.x_final, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gather.gap, mask.gap, rtol=1e-10, atol=1e-14)
    assert np.all(np.abs(mask.x_final - kw["x0"]).max(axis=1) > 0)
    scaffold = fa.simulate(problem, algorithm=fa.algorithms.Scaffold(), mode="gather", **kw)
    assert np.all(np.isfinite(scaffold.gap)) and scaffold.gap[:, -1].mean() < scaffold.gap[:, 0].mean()


def test_smoothness_bound_and_power_iteration(setup):
    _, problem, res, _ = setup
    points = fa.theory.trajectory_points(res, 6, skip_first=True)
    assert points.shape == (6, problem.dim)
    bound = fa.theory.smoothness_bound(problem)
    est = fa.theory.smoothness_estimate(problem, points, iterations=300)
    hessians = jax.jit(jax.vmap(jax.vmap(
        lambda i, x: jax.hessian(lambda z: problem.local_value(problem.client(i), z))(x),
        in_axes=(0, None)), in_axes=(None, 0)))
    H = np.asarray(hessians(jnp.arange(problem.num_clients), jnp.asarray(points)))
    exact = np.abs(np.linalg.eigvalsh(H)).max(axis=(0, 2))
    np.testing.assert_allclose(est.per_client, exact, rtol=1e-6)
    assert np.all(bound.per_client >= exact * (1 - 1e-12)) and bound.L >= est.L


def test_abc_constants_along_the_run_and_theorem2(setup):
    _, problem, res, _ = setup
    points = fa.theory.trajectory_points(res, 12)
    v = fa.theory.oracle_variance(problem, domain=points)
    assert v.exact and v.variance.shape == (12, problem.num_clients) and np.all(v.variance > 0)
    mc = fa.theory.oracle_variance(problem, domain=points[:2], method="monte_carlo",
                                   key=jax.random.key(1), num_samples=4000)
    z = np.abs(mc.variance - v.variance[:2]) / mc.stderr
    assert z.max() < 4.5, z
    abc = fa.theory.abc_constants(problem, domain=points)
    assert abc.C >= 0 and abc.D >= 0
    assert fa.theory.abc_slack(problem, abc.C, abc.D, domain=points).holds
    L = fa.theory.smoothness_bound(problem).L
    delta = float(res.gap[0, 0])
    alpha = fa.theory.theorem2_stepsize(L, abc.C, abc.D, fa.theory.sigma_f_star(problem), delta,
                                        problem.num_clients, 2, 3, 30)
    bound = fa.theory.theorem2_bound(alpha, L, abc.C, abc.D, fa.theory.sigma_f_star(problem),
                                     delta, problem.num_clients, 2, 3, 30)
    assert 0 < alpha and np.isfinite(bound)


def test_evaluate(setup):
    data, problem, res, _ = setup
    ev = fa.problems.evaluate(problem, res.x, data.test_features, data.test_labels)
    assert ev.accuracy.shape == res.x.shape[:2]
    W = res.x[3, -1, :12].reshape(4, 3)
    b = res.x[3, -1, 12:]
    acc = np.mean(np.argmax(data.test_features @ W + b, axis=1) == data.test_labels)
    assert np.isclose(ev.accuracy[3, -1], acc)
    assert ev.accuracy[:, -1].mean() > ev.accuracy[:, 0].mean()


def test_default_records_of_a_learning_run_cost_no_more_than_its_training():
    """A record is a pass over all m rows, a round S Q steps of b rows: records at least
    ceil(m / (S Q b)) rounds apart, written out here from the sizes."""
    data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 20, num_features=4,
                                  num_classes=3, max_samples=80)
    m = sum(len(y) for y in data.labels)
    p = fa.problems.softmax_regression(data.features, data.labels, l2=1e-3,
                                       oracle=fa.MinibatchOracle(8))
    kw = dict(num_sampled=4, local_steps=4, rounds=100)
    spacing = -(-m // (4 * 4 * 8))
    assert 2 < spacing < 20  # m = 1,233 rows over 128 a round
    assert fa.Simulation(p, mode="gather", **kw).spec.record.every == spacing
    # mask mode computes all n = 20 clients a round: ceil(m / (20 * 4 * 8))
    assert fa.Simulation(p, mode="mask", **kw).spec.record.every == -(-m // (20 * 4 * 8))
    assert fa.Simulation(p, mode="gather", record_every=1, **kw).spec.record.every == 1
    # the full-batch oracle does not say what its step costs: the usual default
    exact = fa.problems.softmax_regression(data.features, data.labels, l2=1e-3)
    assert fa.Simulation(exact, mode="gather", **kw).spec.record.every == 1
    # a long run: the larger of the two rules (T = 50,000: 50 for 1000 records)
    assert fa.Simulation(p, mode="gather", num_sampled=4, local_steps=4,
                         rounds=50_000).spec.record.every == 50
    res = fa.simulate(p, mode="gather", stepsize=0.05, x0=np.zeros(p.dim), trials=2,
                      key=jax.random.key(1), num_sampled=4, local_steps=4, rounds=20)
    np.testing.assert_array_equal(res.rounds, list(range(0, 20, spacing)) + [20])
    assert not p.minima.solver.done
