"""The problems and their oracles against independent computations.

f*, x* of (25) and (27) are recomputed from NumPy versions of the objectives (tests/
reference_numpy.py) with SciPy; Theorem 1's local minima are derived below by hand; the
quadratic family is checked against closed forms, finite differences and an independent
simulation; ``make_problem`` is exercised with a custom loss and a custom oracle.

The oracles' noise is finite for every uint32 word, in float32 and float64; ``make_problem``
never returns a wrong f* (it raises a one-line ValueError instead); the problems'
constructors and fields refuse bad arguments.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

import fedjax_abc as fa
import reference_numpy as ref
from fedjax_abc._problems._oracles import like_model, nonnegative, normals_from_words
from small_run import SETTINGS as KW, small_problem, small_run_args


def client_values_and_grads(p, xs):
    """f_i(x) and grad f_i(x) from the package, shapes (len(xs), n) and (len(xs), n, d)."""
    x = jnp.asarray(xs, jnp.float64).reshape(len(xs), -1)
    vals, grads = jax.jit(jax.vmap(lambda xi: (p.local_values(xi), p.local_grads(xi))))(x)
    return np.asarray(vals), np.asarray(grads)


def oracle_with_sign(p, i, x, sign):
    """g_i(x; xi) of the problem's oracle for a fixed +1/-1 noise of one step (d = 1)."""
    z = jnp.full((1,), float(sign))
    return float(p.oracle.gradient(p, p.client(i), jnp.asarray([x]), z)[0])


# ------------------------------------------------------------------------ problem (25)


def test_softplus_huber_values_and_gradients():
    p = fa.problems.softplus_huber()
    prob = ref.SoftplusHuber(16)
    xs = [-7.3, -1.0001, -0.4, 0.0, 0.3, 0.9999, 2.5, 11.0]
    vals, grads = client_values_and_grads(p, xs)
    idx = np.arange(16)
    for j, x in enumerate(xs):
        xx = np.full((16, 1), x)
        np.testing.assert_allclose(vals[j], prob.values(idx, xx), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(grads[j], prob.grads(idx, xx), rtol=1e-13, atol=1e-15)


def test_softplus_huber_optimum():
    p = fa.problems.softplus_huber()
    prob = ref.SoftplusHuber(16)
    x_star = optimize.brentq(prob.fprime, -30.0, 30.0, xtol=1e-15, rtol=1e-15)
    _, f_star = ref.minimize_1d(prob.f, -30.0, 30.0)
    assert abs(float(p.x_star[0]) - x_star) < 1e-10
    assert abs(float(p.f_star) - f_star) < 1e-13
    assert abs(float(p.f_star) - prob.f(x_star)) < 1e-14
    np.testing.assert_array_equal(np.asarray(p.local_minima), 0.0)  # Huber min 0; softplus inf 0
    assert abs(float(p.sigma_f_star) - f_star) < 1e-13
    assert -1.0 < x_star < 0.0  # f_1 pulls to 0, the softplus clients pull left


def test_oracle_26():
    """g_1 = grad f_1 +/- sqrt(|x|); g_i = grad f_i +/- sqrt(f_i(x)), i >= 2 (eq. 26)."""
    p = fa.problems.softplus_huber()
    prob = ref.SoftplusHuber(16)
    for x in (-2.0, -0.3, 0.7, 4.0):
        for i in (0, 1, 5, 15):
            g = prob.grads(np.array([i]), np.array([[x]]))[0, 0]
            m = math.sqrt(abs(x)) if i == 0 else math.sqrt(prob.values(np.array([i]), np.array([[x]]))[0])
            assert abs(oracle_with_sign(p, i, x, +1) - (g + m)) < 1e-14
            assert abs(oracle_with_sign(p, i, x, -1) - (g - m)) < 1e-14


# ------------------------------------------------------------------------ problem (27)


@pytest.mark.parametrize("seed,n,d_max", [(0, 40, 20.0), (1, 40, 200.0), (2, 7, 5.0), (3, 2, 50.0)])
def test_huber_offsets_optimum(seed, n, d_max):
    p = fa.problems.huber_offsets(jax.random.key(seed), n=n, d_max=d_max)
    offsets = np.asarray(p.params).reshape(-1)
    prob = ref.HuberOffsets(offsets)
    _, f_star = ref.minimize_1d(prob.f, -2.0, d_max + 2.0, grid=100001)
    x_pkg = float(p.x_star[0])
    assert abs(float(p.f_star) - f_star) <= 1e-12 * max(1.0, f_star)
    assert abs(prob.f(x_pkg) - f_star) <= 1e-12 * max(1.0, f_star)  # x* is a minimiser
    # 0 is a subgradient at x* (the minimiser may be an interval: check the one-sided slopes)
    eps = 1e-9
    assert prob.fprime(x_pkg - eps) <= 1e-12 and prob.fprime(x_pkg + eps) >= -1e-12
    np.testing.assert_array_equal(np.asarray(p.local_minima), 0.0)
    assert abs(float(p.sigma_f_star) - f_star) <= 1e-12 * max(1.0, f_star)  # f_i* = 0: sigma = f*


def test_huber_offsets_values_gradients_and_oracle():
    p = fa.problems.huber_offsets(jax.random.key(4), n=9, d_max=8.0)
    offsets = np.asarray(p.params).reshape(-1)
    prob = ref.HuberOffsets(offsets)
    idx = np.arange(9)
    xs = [-3.0, 0.2, 4.4, 9.5]
    vals, grads = client_values_and_grads(p, xs)
    for j, x in enumerate(xs):
        xx = np.full((9, 1), x)
        np.testing.assert_allclose(vals[j], prob.values(idx, xx), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(grads[j], prob.grads(idx, xx), rtol=1e-14, atol=1e-15)
        for i in (0, 4, 8):
            g, f = prob.grads(idx, xx)[i, 0], prob.values(idx, xx)[i]
            assert abs(oracle_with_sign(p, i, x, +1) - (g + math.sqrt(f))) < 1e-13
            assert abs(oracle_with_sign(p, i, x, -1) - (g - math.sqrt(f))) < 1e-13


def test_huber_offsets_given_offsets():
    p = fa.problems.huber_offsets(offsets=[0.0, 0.0, 10.0])
    # f = (2 H(x) + H(x - 10)) / 3; on (1, 9) f' = (2 - 1)/3 > 0, on (-1, 1) f' = (2x - 1)/3: x* = 1/2
    assert abs(float(p.x_star[0]) - 0.5) < 1e-12
    assert abs(float(p.f_star) - (2 * 0.125 + 9.0) / 3) < 1e-13


# --------------------------------------------------------------------------- Theorem 1


def thm1_f(sign, x):
    r = np.sqrt(1.0 + x * x)
    return r + sign * 0.5 * r * np.sin(np.sqrt(r))


def test_bgd_counterexample_local_minima():
    """f_1* = 1 + sin(1)/2 and f_2* = 1 - sin(1)/2, both at x = 0.

    With R = r(x) >= 1, f_i = h_i(R) := R (1 +/- sin(sqrt R)/2) >= R/2.
    f_1: h_1(1) = 1 + sin(1)/2 ~ 1.42; R/2 > 1.42 for R > 2.85, and on [1, 2.85] sqrt R is in
    [1, 1.69], so h_1' = 1 + sin(sqrt R)/2 + sqrt(R) cos(sqrt R)/4 >= 1 + 0.42 - 1.69 * 0.12 / 4 > 0.
    f_2: h_2(1) = 1 - sin(1)/2 ~ 0.579; R/2 > 0.58 for R > 1.16, and on [1, 1.16]
    h_2' = 1 - sin(sqrt R)/2 - sqrt(R) cos(sqrt R)/4 >= 1 - 0.45 - 0.15 > 0.
    Both h_i increase from R = 1, so the minima are at R = 1, i.e. x = 0.
    """
    p = fa.problems.bgd_counterexample()
    f1_star, f2_star = 1 + math.sin(1) / 2, 1 - math.sin(1) / 2
    np.testing.assert_allclose(np.asarray(p.local_minima), [f1_star, f2_star], rtol=0, atol=1e-12)
    # the hand argument, checked on a grid of [-200, 200]
    xs = np.linspace(-200.0, 200.0, 400001)
    for sign, fs in ((1.0, f1_star), (-1.0, f2_star)):
        vals = thm1_f(sign, xs)
        assert vals.min() >= fs - 1e-15 and abs(xs[np.argmin(vals)]) < 1e-3
        assert abs(thm1_f(sign, 0.0) - fs) < 1e-15
    assert float(p.f_star) == 1.0 and float(p.x_star[0]) == 0.0  # f = r, minimised at 0
    assert abs(float(p.sigma_f_star) - (1.0 - (f1_star + f2_star) / 2)) < 1e-12


def test_bgd_counterexample_loss():
    p = fa.problems.bgd_counterexample()
    xs = [-40.0, -1.3, 0.0, 0.5, 7.0, math.sqrt((2 * math.pi) ** 4 - 1)]
    vals, grads = client_values_and_grads(p, xs)
    for j, x in enumerate(xs):
        np.testing.assert_allclose(vals[j], [thm1_f(1.0, x), thm1_f(-1.0, x)], rtol=1e-14)
        h = 1e-6
        fd = [(thm1_f(s, x + h) - thm1_f(s, x - h)) / (2 * h) for s in (1.0, -1.0)]
        np.testing.assert_allclose(grads[j, :, 0], fd, rtol=1e-7, atol=1e-8)
    # the mean is r(x) = sqrt(1 + x^2)
    np.testing.assert_allclose(vals.mean(axis=1), np.sqrt(1 + np.square(xs)), rtol=1e-13)


# ------------------------------------------------------------------- quadratics in R^d


def quadratic_problem(d=5, n=6, seed=3):
    p = fa.problems.quadratics(jax.random.key(seed), n=n, d=d, C=1.0, D=0.1)
    a, c = (np.asarray(v) for v in p.params)
    return p, ref.Quadratics(a, c, C=1.0, D=0.1)


def test_quadratics_optimum():
    p, prob = quadratic_problem()
    res = optimize.minimize(prob.f, np.zeros(prob.d), jac=prob.grad_f, method="BFGS",
                            options={"gtol": 1e-13})
    np.testing.assert_allclose(np.asarray(p.x_star), res.x, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(prob.grad_f(np.asarray(p.x_star)), 0.0, atol=1e-14)
    assert abs(float(p.f_star) - res.fun) < 1e-12
    assert abs(float(p.f_star) - prob.f(np.asarray(p.x_star))) < 1e-14
    np.testing.assert_array_equal(np.asarray(p.local_minima), 0.0)


def test_quadratics_gradients_against_finite_differences():
    p, prob = quadratic_problem()
    rng = np.random.default_rng(0)
    h = 1e-6
    for _ in range(3):
        x = rng.normal(size=prob.d)
        grads = np.asarray(p.local_grads(jnp.asarray(x)))
        per_client_grad = jax.vmap(jax.grad(p.loss, argnums=1), in_axes=(0, None))
        autodiff = np.asarray(per_client_grad(p.params, jnp.asarray(x)))
        np.testing.assert_allclose(grads, autodiff, rtol=1e-14, atol=1e-15)
        fd = np.zeros_like(grads)
        for j in range(prob.d):
            e = np.zeros(prob.d)
            e[j] = h
            up, down = (np.asarray(p.local_values(jnp.asarray(x + s * e))) for s in (1.0, -1.0))
            fd[:, j] = (up - down) / (2 * h)
        np.testing.assert_allclose(grads, fd, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(np.asarray(p.grad(jnp.asarray(x))), prob.grad_f(x), rtol=1e-13, atol=1e-15)
        assert abs(float(p.value(jnp.asarray(x))) - prob.f(x)) < 1e-13


def test_gaussian_oracle_moments():
    """E g = grad f_i, E||g - grad f_i||^2 = C (f_i - f_i*) + D (eq. 8 with equality), d = 5."""
    p, prob = quadratic_problem()
    x = jnp.asarray(np.linspace(-1.0, 1.0, prob.d))
    m, Q = 20000, 1
    i = 2
    keys = jax.random.split(jax.random.key(7), m)
    client = p.client(i)

    def one(k):
        z = p.oracle.noise(k, (Q, prob.d), jnp.float64)[0]
        return p.oracle.gradient(p, client, x, z)

    g = np.asarray(jax.jit(jax.vmap(one))(keys))
    grad = prob.grads(np.array(i), np.asarray(x))
    var = 1.0 * prob.values(np.array(i), np.asarray(x)) + 0.1
    se_mean = g.std(axis=0, ddof=1) / math.sqrt(m)
    assert np.all(np.abs(g.mean(axis=0) - grad) <= 4 * se_mean)
    sq = np.sum((g - grad) ** 2, axis=1)
    assert abs(sq.mean() - var) <= 4 * sq.std(ddof=1) / math.sqrt(m), (sq.mean(), var)


def test_quadratics_simulation_matches_numpy():
    """d = 5, S = 2 of 6, Gaussian oracle: mean and variance of each coordinate of x_T within 4 se."""
    p, prob = quadratic_problem()
    trials, T, Q, alpha = 1000, 20, 3, 0.1
    x0 = np.asarray(p.x_star) + 2.0
    res = fa.simulate(p, num_sampled=2, local_steps=Q, stepsize=alpha, rounds=T, x0=x0, trials=trials,
                      key=jax.random.key(8), record_every=T)
    x_ref = ref.fedavg(prob, x0, S=2, Q=Q, stepsizes=np.full(T, alpha), trials=trials,
                       rng=np.random.default_rng(8))
    for j in range(prob.d):
        ref.assert_same_distribution(res.x_final[:, j], x_ref[:, j], what=f"coordinate {j}")


# ------------------------------------------------------------------------ make_problem


class UniformNoise(fa.AbstractOracle):
    """g_i = grad f_i + scale * u * s: u ~ U[0, 1], s = +/-1 (a pytree of noise), so u * s ~ U[-1, 1]."""

    scale: float

    def noise(self, key, shape, dtype):
        ku, ks = jax.random.split(key)
        return {"u": jax.random.uniform(ku, shape, dtype), "s": jax.random.rademacher(ks, shape, dtype)}

    def gradient(self, problem, client, x, noise):
        return problem.local_grad(client, x) + self.scale * noise["u"] * noise["s"]


class DoubledGradient(fa.AbstractOracle):
    """A deterministic custom oracle: g_i = 2 grad f_i."""

    def noise(self, key, shape, dtype):
        return jnp.zeros(shape[:1], dtype)

    def gradient(self, problem, client, x, noise):
        return 2.0 * problem.local_grad(client, x)


def weighted_square(params, x):
    return 0.5 * params["a"][0] * jnp.sum((x - params["c"]) ** 2)


A = np.array([[1.0], [2.0], [0.5], [1.5]])
CENTRES = np.array([[-1.0], [0.0], [3.0], [2.0]])


@pytest.fixture(scope="module")
def custom_problem():
    return fa.make_problem(weighted_square, {"a": A, "c": CENTRES}, UniformNoise(scale=0.8),
                           dim=1, search_box=(-10.0, 10.0), name="weighted squares")


def test_make_problem_computes_the_optimum(custom_problem):
    p = custom_problem
    a, c = A[:, 0], CENTRES[:, 0]
    x_star = np.sum(a * c) / np.sum(a)
    f_star = np.mean(0.5 * a * (x_star - c) ** 2)
    assert p.num_clients == 4 and p.dim == 1 and p.name == "weighted squares"
    assert abs(float(p.x_star[0]) - x_star) < 1e-7
    assert abs(float(p.f_star) - f_star) < 1e-12
    np.testing.assert_allclose(np.asarray(p.local_minima), 0.0, atol=1e-12)


def test_make_problem_with_custom_oracle_one_round(custom_problem):
    """Q = 1, S = n: x_1 = x_0 - alpha (1/n) sum_i (a_i (x_0 - c_i) + 0.8 v_i), v_i ~ U[-1, 1].

    So E x_1 = x_0 - alpha mean(a (x_0 - c)) and Var x_1 = alpha^2 0.64 (1/3) / n.
    """
    p = custom_problem
    a, c = A[:, 0], CENTRES[:, 0]
    x0, alpha, trials = 1.0, 0.5, 4000
    res = fa.simulate(p, local_steps=1, stepsize=alpha, rounds=1, x0=x0, trials=trials, key=jax.random.key(3))
    x1 = res.x_final[:, 0]
    mean = x0 - alpha * np.mean(a * (x0 - c))
    var = alpha**2 * 0.64 / 3 / 4
    assert abs(x1.mean() - mean) <= 4 * x1.std(ddof=1) / math.sqrt(trials)
    assert abs(x1.var(ddof=1) - var) <= 4 * ref.se_sample_variance(x1), (x1.var(ddof=1), var)
    assert np.all(np.abs(x1 - mean) <= alpha * 0.8 + 1e-12)  # bounded noise stays bounded


def test_make_problem_with_deterministic_custom_oracle(custom_problem):
    """The custom oracle's gradient is the one used: 2 grad with alpha equals grad with 2 alpha."""
    p = custom_problem
    kw = dict(local_steps=3, rounds=4, x0=1.0, trials=1, key=jax.random.key(0))
    a = fa.simulate(p, stepsize=0.1, oracle=DoubledGradient(), **kw)
    b = fa.simulate(p, stepsize=0.2, oracle=fa.ExactOracle(), **kw)
    np.testing.assert_allclose(a.x_final, b.x_final, rtol=1e-14)
    x, a_, c_ = 1.0, A[:, 0], CENTRES[:, 0]
    for _ in range(4):
        x = np.mean(c_ + (1 - 0.2 * a_) ** 3 * (x - c_))
    np.testing.assert_allclose(a.x_final[0, 0], x, rtol=1e-13)


def test_make_problem_known_optimum_is_kept():
    a, c = A[:, 0], CENTRES[:, 0]
    x_star = np.sum(a * c) / np.sum(a)
    f_star = np.mean(0.5 * a * (x_star - c) ** 2)
    p = fa.make_problem(weighted_square, {"a": A, "c": CENTRES}, fa.ExactOracle(),
                        local_minima=np.zeros(4), f_star=f_star, x_star=[x_star])
    assert float(p.f_star) == f_star and float(p.x_star[0]) == x_star


def test_custom_oracle_is_an_equinox_module():
    assert isinstance(UniformNoise(0.1), eqx.Module)


def test_a_client_index_outside_the_clients_is_refused():
    """Problem.client reads rows with a clipping gather (taken as in range when traced): an
    int outside 0..n-1, which NumPy indexing would wrap or clamp, is refused in one line."""
    p = fa.problems.huber_offsets(jax.random.key(0), n=5, d_max=10.0)
    for i in (-1, 5, np.int64(7)):
        with pytest.raises(ValueError, match=r"client index .* outside 0\.\.4"):
            p.client(i)
    for i in (0, np.int32(4)):
        c = p.client(i)
        np.testing.assert_array_equal(np.asarray(c.params), np.asarray(p.params)[int(i)])
        assert float(c.local_min) == float(p.local_minima[int(i)])
    traced = jax.jit(lambda i: p.client(i).params)(jnp.int32(3))
    np.testing.assert_array_equal(np.asarray(traced), np.asarray(p.params)[3])


# --------------------------------- oracle noise from words: finite in float32 and float64


# float32 rounds u = (w + 1/2) / 2^31 - 1 to +-1 for the 128 outermost words, where erfinv is
# infinite; the float32 map clamps |u| to 1 - 2^-24. Elsewhere both maps are unchanged: the
# float64 one bit for bit, the float32 one equal to rounding the exact u to float32.
EXTREME = np.array([0, 1, 2, 63, 64, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 65, 2 ** 32 - 64,
                    2 ** 32 - 2, 2 ** 32 - 1], dtype=np.uint32)
# every 4097th word, plus the 256 outermost words at each end
DENSE = np.unique(np.concatenate([
    np.arange(0, 2 ** 32, 4097, dtype=np.uint64),
    np.arange(256, dtype=np.uint64), 2 ** 32 - 1 - np.arange(256, dtype=np.uint64),
])).astype(np.uint32)
DTYPES = [jnp.float32, jnp.float64]


def _old_map(words, dtype):
    """The map before the clamp: exact u in float64, rounded to dtype, then erfinv."""
    u = (jnp.asarray(words).astype(jnp.float64) + 0.5) / 2147483648.0 - 1.0
    return (jnp.sqrt(2.0) * jax.lax.erf_inv(u.astype(dtype))).astype(dtype)


def _all_steps(oracle, words, shape, dtype):
    noise = oracle.noise_from_words(jnp.asarray(words), shape, dtype)
    steps = jnp.arange(shape[0])
    return np.asarray(jax.vmap(lambda l: oracle.step_noise(noise, l, shape, dtype))(steps))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("words", [EXTREME, DENSE], ids=["extreme", "dense"])
def test_gaussian_noise_is_finite(words, dtype):
    shape = (words.shape[0], 1)
    z = _all_steps(fa.GaussianOracle(1.0, 1.0), words, shape, dtype)
    assert z.dtype == dtype and z.shape == shape
    assert np.all(np.isfinite(z)), words.reshape(shape)[~np.isfinite(z)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("words", [EXTREME, DENSE], ids=["extreme", "dense"])
def test_rademacher_noise_is_finite_signs(words, dtype):
    oracle = fa.RademacherOracle()
    shape = (words.shape[0], 32)  # 32 signs a word: one word per step
    assert oracle.num_words(shape) == words.shape[0]
    z = _all_steps(oracle, words, shape, dtype)
    assert z.dtype == dtype and z.shape == shape
    assert set(np.unique(z)) <= {-1.0, 1.0}


def test_float64_map_is_unchanged():
    got = np.asarray(normals_from_words(jnp.asarray(DENSE), DENSE.shape[0], jnp.float64))
    np.testing.assert_array_equal(got, np.asarray(_old_map(DENSE, jnp.float64)))
    assert np.all(np.isfinite(got))


def test_float32_map_changes_only_the_outermost_words():
    got = np.asarray(normals_from_words(jnp.asarray(DENSE), DENSE.shape[0], jnp.float32))
    old = np.asarray(_old_map(DENSE, jnp.float32))
    changed = got != old
    outer = (DENSE < 64) | (DENSE >= 2 ** 32 - 64)  # u rounds to -1 / +1 in float32
    np.testing.assert_array_equal(changed, outer)
    assert np.all(np.isinf(old[outer]))
    np.testing.assert_allclose(np.abs(got[outer]), 5.41998, rtol=1e-5)  # sqrt(2) erfinv(1 - 2^-24)
    assert np.all(np.abs(got) <= np.max(np.abs(got[outer])))


def test_float32_normal_moments_on_a_grid():
    """Words evenly spread over [0, 2^32): a quadrature of the normal's moments."""
    words = (np.arange(2 ** 20, dtype=np.uint64) * 4096 + 2048).astype(np.uint32)
    z = np.asarray(normals_from_words(jnp.asarray(words), words.shape[0], jnp.float32),
                   dtype=np.float64)
    assert abs(z.mean()) < 1e-5
    assert abs(z.var() - 1.0) < 1e-4
    assert abs(np.mean(z ** 4) - 3.0) < 2e-3


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_float32_simulation_has_no_nan():
    p = fa.problems.quadratics(jax.random.key(0), n=10, d=100)
    res = fa.simulate(p, num_sampled=10, local_steps=10, stepsize=0.01, rounds=1000,
                      x0=p.x_star + 1, trials=64, key=jax.random.key(1), dtype="float32",
                      record_every=100)
    assert np.all(np.isfinite(res.gap)) and np.all(np.isfinite(res.x_final))


def test_nonnegative_is_maximum_with_zero_and_keeps_nan():
    a = np.array([-2.0, -1e-300, -0.0, 0.0, 1e-300, 3.0, np.inf, -np.inf, np.nan])
    for dtype in DTYPES:
        got = np.asarray(nonnegative(jnp.asarray(a, dtype)))
        want = np.maximum(a.astype(dtype), 0)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)  # NaN where NaN, -0.0 == 0.0


def test_oracle_magnitude_of_nan_value_is_nan():
    p = fa.problems.huber_offsets(offsets=[0.0, 4.0])
    m = fa.RademacherOracle().magnitude(p, p.client(0), jnp.array([0.0]), jnp.array(np.nan))
    assert np.isnan(m)


def test_like_model_puts_a_one_entry_models_value_in_its_shape_only():
    v = jnp.asarray(2.5)
    assert like_model(v, jnp.zeros(1)).shape == (1,)
    assert like_model(v, jnp.zeros(3)).shape == ()  # d > 1: the scalar, not d copies
    assert float(like_model(v, jnp.zeros(1))[0]) == 2.5


@pytest.mark.parametrize("dim", [1, 3])
def test_rademacher_gradient_is_the_formula_whatever_the_shape_of_the_value(dim):
    """g + eps sqrt(f_i - f_i*) / sqrt(d), written here from Section IV-B, for d = 1 (where
    the default magnitude gets f_i in x's shape) and d = 3."""
    p = fa.problems.quadratics(jax.random.key(1), n=3, d=dim)
    oracle = fa.RademacherOracle()
    x = jnp.linspace(-1.0, 2.0, dim)
    eps = jnp.where(jnp.arange(dim) % 2 == 0, 1.0, -1.0)
    for i in range(3):
        c = p.client(i)
        f, g = p.local_value_and_grad(c, x)
        want = g + eps * np.sqrt(float(f) - float(c.local_min)) / np.sqrt(dim)
        got = oracle.gradient(p, c, x, eps)
        assert got.shape == (dim,)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-14)


# -------------------------------------------------- make_problem never returns a wrong f*


# It raises a one-line ValueError instead: for a numerical minimiser on the edge of
# ``search_box`` (unbounded below, or the minimum outside the box); for given f_i*, f*, x*
# that contradict the loss (f(x*) != f*, or a point with f below a given f* or f_i below a
# given f_i*), are not finite, or have the wrong shape; for a loss that does not trace to a
# floating scalar.
ORACLE = fa.ExactOracle()
TWO = jnp.array([[0.0], [2.0]])  # f_i = (x - c_i)^2 / 2, c = 0, 2: f_i* = 0, x* = 1, f* = 1/2


def half_square(c, x):
    return 0.5 * jnp.sum((x - c) ** 2)


def _rejects(match, **kw):
    args = dict(loss=half_square, params=TWO, oracle=ORACLE)
    args.update(kw)
    with pytest.raises(ValueError, match=match) as info:
        fa.make_problem(args.pop("loss"), args.pop("params"), args.pop("oracle"), **args)
    assert "\n" not in str(info.value)
    return str(info.value)


# ----------------------------------------------------------------- the search box's edge


def test_unbounded_below_is_an_edge_error():
    msg = _rejects(r"edge of search_box \(-100.0, 100.0\)", loss=lambda c, x: -jnp.sum(x))
    assert "larger search_box" in msg and "local_minima" in msg


@pytest.mark.parametrize("dim", [1, 2])
def test_minimum_outside_the_box_is_an_edge_error(dim):
    centre = jnp.full((1, dim), 500.0)
    _rejects(r"f_0 found numerically is at the edge of search_box", params=centre, dim=dim)


def test_global_minimum_outside_the_box_names_f_star_and_x_star():
    msg = _rejects(r"minimiser of f found numerically is at the edge",
                   params=jnp.array([[500.0]]), local_minima=[0.0])
    assert "f_star and x_star" in msg


def test_a_larger_box_fixes_it():
    p = fa.make_problem(half_square, jnp.array([[500.0]]), ORACLE, search_box=(0.0, 1000.0))
    assert abs(float(p.x_star[0]) - 500.0) < 1e-6 and abs(float(p.f_star)) < 1e-12


# ------------------------------------------------------- given values against the loss


def test_x_star_and_f_star_disagree():
    _rejects(r"f\(x_star\) = 0.625 \(x_star given\) differs from f_star = 0.5",
             local_minima=[0, 0], f_star=0.5, x_star=[1.5])


def test_consistent_pair_that_is_not_a_minimum():
    """f(1.5) = 0.625 = the given f*, but a descent from x* finds f = 0.5 < f*."""
    _rejects(r"f_star = 0.625 \(given\) is above f\(x\) = 0.5", local_minima=[0, 0],
             f_star=0.625, x_star=[1.5])


def test_f_star_above_what_the_search_finds():
    _rejects(r"f_star = 0.7\d* \(given\) is above f\(x\) = 0.5", local_minima=[0, 0], f_star=0.7)


def test_f_star_below_what_the_search_finds():
    _rejects(r"f\(x_star\) = 0.5 \(x_star found numerically\) differs from f_star = 0.3",
             local_minima=[0, 0], f_star=0.3)


def test_x_star_given_is_not_a_minimiser():
    _rejects(r"f\(x_star\) = 0.625 \(x_star given\) differs from f_star = 0.5\d* \(found",
             local_minima=[0, 0], x_star=[1.5])


@pytest.mark.parametrize("extra", [{}, {"f_star": 0.5, "x_star": [1.0]}])
def test_local_minimum_above_the_attained_value(extra):
    _rejects(r"local_minima\[1\] = 0.1\d* \(given\) is above f_1\(x\) = 0",
             local_minima=[0.0, 0.1], **extra)


@pytest.mark.parametrize("kw, match", [
    (dict(f_star=np.nan), r"f_star must be finite"),
    (dict(f_star=np.inf, x_star=[1.0]), r"f_star must be finite"),
    (dict(local_minima=[0.0, np.inf]), r"local_minima must be finite"),
    (dict(x_star=[np.nan]), r"x_star must be finite"),
    (dict(local_minima=[0.0, 0.0, 0.0]), r"local_minima must have shape \(2,\), got \(3,\)"),
    (dict(x_star=[1.0, 1.0]), r"x_star must have shape \(1,\), got \(2,\)"),
    (dict(f_star=[0.5, 0.5]), r"f_star must have shape \(\), got \(2,\)"),
    (dict(f_star="half"), r"f_star must be a number"),
])
def test_bad_given_values(kw, match):
    _rejects(match, **kw)


# ---------------------------------------------------------------------------- the loss


def vector_loss(c, x):
    return (x - c) ** 2  # forgot the sum


def python_float_loss(c, x):
    return (float(x[0]) - c[0]) ** 2


def integer_loss(c, x):
    return jnp.sum(x > c)


def raising_loss(c, x):
    raise RuntimeError("no data for this client")


@pytest.mark.parametrize("loss, match", [
    (vector_loss, r"loss vector_loss must return a floating scalar .* returned shape \(1,\)"),
    (python_float_loss, r"loss python_float_loss raised ConcretizationTypeError"),
    (integer_loss, r"loss integer_loss must return a floating scalar .* dtype int"),
    (raising_loss, r"loss raising_loss raised RuntimeError: no data for this client"),
])
def test_bad_loss(loss, match):
    _rejects(match, loss=loss)


# ---------------------------------------------------------------------- valid input kept


def test_valid_values_are_kept_exactly():
    p = fa.make_problem(half_square, TWO, ORACLE, local_minima=[0.0, 0.0], f_star=0.5,
                        x_star=1.0)
    assert float(p.f_star) == 0.5 and p.x_star.tolist() == [1.0]
    assert p.local_minima.tolist() == [0.0, 0.0]


def test_found_values_unchanged():
    p = fa.make_problem(half_square, TWO, ORACLE)
    assert abs(float(p.f_star) - 0.5) < 1e-12 and abs(float(p.x_star[0]) - 1.0) < 1e-7


# --------------------------------- bad arguments of the problems' constructors and fields


@pytest.fixture(scope="module")
def problem():
    return small_problem()


@pytest.mark.parametrize("fn, match", [
    (lambda: fa.problems.huber_offsets(jax.random.key(0), n=4, d_max="20"),
     r"d_max \(Dmax\) must be a number, got '20'"),
    (lambda: fa.problems.huber_offsets(0, n=4), r"key must be a single JAX PRNG key, e\.g\. "
                                                r"jax\.random\.key\(0\), got 0"),
    (lambda: fa.problems.huber_offsets(offsets=[[0.0, 1.0]]),
     r"offsets must be a list of n >= 2 numbers \(one per client\), got float64 values of "
     r"shape \(1, 2\)"),
    (lambda: fa.problems.huber_offsets(offsets=["a", "b"]), r"offsets must be a list of n"),
    (lambda: fa.problems.quadratics(None, n=4, d=3), r"key must be a single JAX PRNG key"),
    (lambda: fa.problems.quadratics(jax.random.key(0), n=4, d=3, curvature=1.0),
     r"curvature must be a pair \(a_min, a_max\), got 1\.0"),
    (lambda: fa.problems.quadratics(jax.random.key(0), n=4, d=3, spread="1"),
     r"spread must be a number"),
    (lambda: fa.problems.bgd_counterexample(oracle="x"),
     r"oracle must be a fedjax_abc\.AbstractOracle or None, got 'x'"),
    (lambda: fa.problems.bgd_counterexample(search_radius=-1.0),
     r"search_radius \(-1\) must be finite and > 0"),
    (lambda: fa.make_problem(lambda p, x: jnp.sum((x - p) ** 2), jnp.zeros(4), fa.ExactOracle(),
                             dim="1"), r"dim \(d='1'\) must be an integer >= 1"),
    (lambda: fa.make_problem(lambda p, x: jnp.sum((x - p) ** 2), jnp.zeros(4), None),
     r"oracle must be a fedjax_abc\.AbstractOracle \(e\.g\. "),
    (lambda: fa.make_problem(lambda p, x: jnp.sum((x - p) ** 2), jnp.zeros(4), fa.ExactOracle(),
                             x_star="0"), r"x_star must be a number or an array of numbers, got '0'"),
])
def test_problem_constructors_refuse_bad_arguments(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


def test_problem_fields_are_checked_when_made(problem):
    import dataclasses

    fields = {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)}
    with pytest.raises(ValueError, match=r"Problem\.loss must be a function .*got 3"):
        fa.Problem(**dict(fields, loss=3))
    with pytest.raises(ValueError, match=r"Problem\.oracle must be a fedjax_abc\.AbstractOracle, "
                                         r"got 'o'"):
        fa.Problem(**dict(fields, oracle="o"))
    # too few f_i*: refused before sigma_f_star or a round could read them (item 4)
    with pytest.raises(ValueError, match=r"Problem\.local_minima must have shape \(n=6,\) "
                                         r"\(one f_i\* per client\), got \(5,\)"):
        dataclasses.replace(problem, local_minima=problem.local_minima[:-1])
    with pytest.raises(ValueError, match=r"Problem\.x_star must have shape \(d,\), got \(\)"):
        dataclasses.replace(problem, x_star=jnp.asarray(1.0))
    nan_star = dataclasses.replace(problem, f_star=jnp.asarray(np.nan))  # made, not run
    with pytest.raises(ValueError, match=r"Problem\.f_star must be finite numbers, got nan"):
        fa.simulate(nan_star, **small_run_args(problem))
