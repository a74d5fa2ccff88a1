"""FedNova, FedDyn and FedExP agree in distribution with independent NumPy implementations.

The references below are written from the papers' update rules alone (nothing of the
package's algorithm code is imported or copied):

- FedNova (Wang et al. 2020): client i runs K_i steps of SGD with momentum rho from x,
  m <- rho m + g_i(y), y <- y - alpha m (m = 0 at the start), and sends
  d_i = (x - y_i) / ||a_i||_1, ||a_i||_1 = (K_i - rho (1 - rho^K_i) / (1 - rho)) / (1 - rho)
  (K_i for rho = 0); the server steps x <- x - eta_g tau_eff mean_P d_i with
  tau_eff = mean_P ||a_i||_1.
- FedDyn (Acar et al. 2021, Algorithm 1): client i keeps g_i (0 at the start); a participant
  runs K steps y <- y - alpha (g_i(y; xi) - g_i + a (y - x)) from y = x, then
  g_i <- g_i - a (y_i - x); the server: h <- h - (a / n) sum_P (y_i - x),
  x <- mean_P y_i - h / a. Non-participants keep g_i.
- FedExP (Jhunjhunwala et al. 2023): plain local SGD, Delta_i = x - y_i,
  eta = max(1, mean_P |Delta_i|^2 / (2 (|mean_P Delta_i|^2 + eps))), x <- x - eta mean_P Delta_i.

Problem: the quadratics f_i(x) = a_i / 2 (x - b_i)^2 on R (f_i* = 0), n = 5, with the
Gaussian oracle g_i(y) = a_i (y - b_i) + z sqrt(C f_i(y) + D), z ~ N(0, 1) (d = 1). The
participants are S of n drawn uniformly without replacement each round (by sorting
uniforms), or all n. At every recorded round t = 1..T the mean and the variance of x_t over
the trials agree within 4 standard errors of the difference of two independent samples.
A negative control (a wrong reference) must fail the same comparison.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from test_engine_local_work import quadratics

A = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
B = np.array([-2.0, 0.0, 1.0, 3.0, 5.0])
N = A.size
C, D = 0.5, 0.3
ALPHA = 0.1
X0 = 4.0
TRIALS = 4000
Z = 4.0
STEPS = np.array([1, 2, 3, 5, 4])


# ------------------------------------------------------------------ the comparison


def compare(a, b):
    """Per round (columns of a and b, shape (trials, T)): (z of the mean difference, z of
    the variance difference, mean_a, mean_b, var_a, var_b)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    out = []
    for t in range(a.shape[1]):
        u, v = a[:, t], b[:, t]
        dm = u.mean() - v.mean()
        se_m = np.sqrt(u.var(ddof=1) / u.size + v.var(ddof=1) / v.size)

        def var_se2(s):  # Var(sample variance) ~ (mu4 - sigma^4 (n - 3) / (n - 1)) / n
            n = s.size
            c = s - s.mean()
            m2, m4 = np.mean(c ** 2), np.mean(c ** 4)
            return (m4 - m2 ** 2 * (n - 3) / (n - 1)) / n

        dv = u.var(ddof=1) - v.var(ddof=1)
        se_v = np.sqrt(var_se2(u) + var_se2(v))
        assert se_m > 0 and se_v > 0, f"round {t + 1}: degenerate sample"
        out.append((dm / se_m, dv / se_v, u.mean(), v.mean(), u.var(ddof=1), v.var(ddof=1)))
    return out


def failures(a, b, z=Z):
    """The rounds (1-based) whose mean or variance differ by more than z standard errors."""
    return [(t + 1,) + tuple(float(f"{v:.5g}") for v in row)
            for t, row in enumerate(compare(a, b)) if abs(row[0]) > z or abs(row[1]) > z]


def assert_agree(pkg, ref, what):
    bad = failures(pkg, ref)
    assert not bad, (f"{what}: rounds disagreeing as (round, z_mean, z_var, mean_pkg, "
                     f"mean_ref, var_pkg, var_ref): {bad}")


# ------------------------------------------------------------- the NumPy references


def sample_mask(rng, trials, S):
    """(trials, n) booleans: S of n clients uniformly without replacement (all n: S = None)."""
    if S is None or S == N:
        return np.ones((trials, N), bool)
    order = np.argsort(rng.random((trials, N)), axis=1)
    mask = np.zeros((trials, N), bool)
    np.put_along_axis(mask, order[:, :S], True, axis=1)
    return mask


def oracle(rng, y):
    """g_i(y) for every client (columns) of every trial (rows): gradient + Gaussian noise."""
    f = A / 2 * (y - B) ** 2
    return A * (y - B) + rng.standard_normal(y.shape) * np.sqrt(C * f + D)


def local_sgd(rng, x, steps, direction):
    """K_i steps y <- y - alpha * direction(y, l) from y = x (shape (trials, 1)) for every
    client; ``steps`` an int or n counts (a client stops after its own)."""
    counts = np.broadcast_to(np.asarray(steps), (N,))
    y = np.broadcast_to(x, (x.shape[0], N)).copy()
    for l in range(int(counts.max())):
        new = y - ALPHA * direction(y, l)
        y = np.where(l < counts, new, y)
    return y


def ref_fednova(rng, T, steps, rho, eta_g=1.0, S=None, trials=TRIALS, tau_one=False):
    """FedNova with momentum rho; ``tau_one`` (negative control) replaces tau_eff by 1."""
    counts = np.broadcast_to(np.asarray(steps, float), (N,))
    if rho == 0:
        norm = counts.copy()
    else:
        norm = (counts - rho * (1 - rho ** counts) / (1 - rho)) / (1 - rho)
    x = np.full((trials, 1), X0)
    path = []
    for _ in range(T):
        mask = sample_mask(rng, trials, S)
        m = np.zeros((trials, N))
        y = np.broadcast_to(x, (trials, N)).copy()
        for l in range(int(counts.max())):
            g = oracle(rng, y)
            m_new = rho * m + g
            y_new = y - ALPHA * m_new
            live = l < counts
            m, y = np.where(live, m_new, m), np.where(live, y_new, y)
        d = (x - y) / norm
        k = mask.sum(axis=1, keepdims=True)
        d_mean = np.sum(np.where(mask, d, 0), axis=1, keepdims=True) / k
        tau_eff = np.sum(np.where(mask, norm, 0), axis=1, keepdims=True) / k
        if tau_one:
            tau_eff = np.ones_like(tau_eff)
        x = x - eta_g * tau_eff * d_mean
        path.append(x[:, 0])
    return np.stack(path, axis=1)


def ref_feddyn(rng, T, Q, a, S, trials=TRIALS, drop_h=False, all_update=False):
    """FedDyn (Algorithm 1). Negative controls: ``drop_h`` sets x <- mean_P y_i;
    ``all_update`` lets the non-participants update their g_i too."""
    x = np.full((trials, 1), X0)
    h = np.zeros((trials, 1))
    gi = np.zeros((trials, N))
    path = []
    for _ in range(T):
        mask = sample_mask(rng, trials, S)
        y = local_sgd(rng, x, Q, lambda y, l: oracle(rng, y) - gi + a * (y - x))
        gi = np.where(mask | all_update, gi - a * (y - x), gi)
        h = h - a / N * np.sum(np.where(mask, y - x, 0), axis=1, keepdims=True)
        y_mean = np.sum(np.where(mask, y, 0), axis=1, keepdims=True) / mask.sum(
            axis=1, keepdims=True)
        x = y_mean if drop_h else y_mean - h / a
        path.append(x[:, 0])
    return np.stack(path, axis=1)


def ref_fedexp(rng, T, Q, eps, S=None, trials=TRIALS):
    x = np.full((trials, 1), X0)
    path = []
    for _ in range(T):
        mask = sample_mask(rng, trials, S)
        y = local_sgd(rng, x, Q, lambda y, l: oracle(rng, y))
        delta = x - y
        k = mask.sum(axis=1, keepdims=True)
        mean = np.sum(np.where(mask, delta, 0), axis=1, keepdims=True) / k
        mean_sq = np.sum(np.where(mask, delta ** 2, 0), axis=1, keepdims=True) / k
        eta = np.maximum(1.0, mean_sq / (2 * (mean ** 2 + eps)))
        x = x - eta * mean
        path.append(x[:, 0])
    return np.stack(path, axis=1)


# ----------------------------------------------------------------- the package runs


def run_package(algorithm, T, local_steps, S, seed):
    p = quadratics(A, B)
    res = fa.simulate(p, algorithm=algorithm, oracle=fa.GaussianOracle(C, D), num_sampled=S,
                      local_steps=local_steps, stepsize=ALPHA, rounds=T, x0=[X0],
                      trials=TRIALS, key=jax.random.key(seed), record_every=1)
    x = np.asarray(res.x[:, :, 0])
    assert x.shape == (TRIALS, T + 1)
    np.testing.assert_array_equal(x[:, 0], X0)
    return x[:, 1:]


CASES = {
    # name: (package algorithm, reference, T, local steps, S, seed)
    "fednova_rho0": (lambda: fa.algorithms.FedNova(),
                     lambda rng, **kw: ref_fednova(rng, 4, STEPS, 0.0, **kw), 4, STEPS, None, 11),
    "fednova_rho0.5": (lambda: fa.algorithms.FedNova(momentum=0.5, server_stepsize=0.8),
                       lambda rng, **kw: ref_fednova(rng, 4, STEPS, 0.5, eta_g=0.8, S=3, **kw),
                       4, STEPS, 3, 12),
    "feddyn": (lambda: fa.algorithms.FedDyn(alpha=0.3),
               lambda rng, **kw: ref_feddyn(rng, 5, 3, 0.3, S=2, **kw), 5, 3, 2, 13),
    "fedexp": (lambda: fa.algorithms.FedExP(eps=1e-3),
               lambda rng, **kw: ref_fedexp(rng, 4, 3, 1e-3, **kw), 4, 3, None, 14),
    "fedexp_partial": (lambda: fa.algorithms.FedExP(eps=1e-3),
                       lambda rng, **kw: ref_fedexp(rng, 4, 3, 1e-3, S=3, **kw), 4, 3, 3, 15),
}


@functools.lru_cache(maxsize=None)
def package_run(name):
    make, _, T, steps, S, seed = CASES[name]
    return run_package(make(), T, steps if isinstance(steps, int) else list(steps), S, seed)


def reference_run(name, **kw):
    _, ref, *_, seed = CASES[name]
    return ref(np.random.default_rng(1000 + seed), **kw)


@pytest.mark.parametrize("name", list(CASES))
def test_package_matches_numpy_reference(name):
    assert_agree(package_run(name), reference_run(name), name)


def test_fednova_with_unit_tau_eff_is_rejected():
    """Negative control: FedNova's reference with tau_eff = 1 is rejected."""
    bad = failures(package_run("fednova_rho0"), reference_run("fednova_rho0", tau_one=True))
    assert bad, "the comparison failed to reject FedNova with tau_eff = 1"


def test_feddyn_without_h_is_rejected():
    """Negative control: FedDyn's reference without the -h/a term is rejected."""
    bad = failures(package_run("feddyn"), reference_run("feddyn", drop_h=True))
    assert bad, "the comparison failed to reject FedDyn without the h / a term"


def test_feddyn_client_state_of_non_participants_matters():
    """Negative control: a reference whose non-participants also update g_i is rejected
    (the partial participation makes the client state visible)."""
    bad = failures(package_run("feddyn"), reference_run("feddyn", all_update=True))
    assert bad, "the comparison failed to reject FedDyn updating every client's g_i"


def test_two_reference_samples_agree():
    """Sanity of the comparison: two independent reference samples agree."""
    a = ref_feddyn(np.random.default_rng(1), 5, 3, 0.3, S=2)
    b = ref_feddyn(np.random.default_rng(2), 5, 3, 0.3, S=2)
    assert not failures(a, b)


# --------------------------------------------------------- MimeLite, MIME and Scaffnew
#
# - MimeLite (Karimireddy et al. 2021): server state x and momentum m (0 at the start);
#   a participant runs K steps y <- y - alpha ((1 - beta) g_i(y) + beta m) from y = x with m
#   fixed and reports g_i(x), the first step's gradient (the same noise draw); the server
#   x <- mean_P y_i, m <- (1 - beta) mean_P g_i(x) + beta m.
# - Scaffnew (Mishchenko et al. 2022): client state h_i (0 at the start); one
#   K ~ Geometric(p) on {1, 2, ...} per round, truncated at max_steps (tail mass on
#   max_steps) and shared by all clients; K steps y_i <- y_i - gamma (g_i(y_i) - h_i) from
#   y_i = x; x <- mean_i (y_i - (gamma / p) h_i); h_i <- h_i + (p / gamma) (x - y_i).


def ref_mimelite(rng, T, K, beta, S, trials=TRIALS, last_grad=False):
    """MimeLite. Negative control ``last_grad``: m is updated from the mean of the clients'
    LAST local gradients instead of g_i(x)."""
    x = np.full((trials, 1), X0)
    m = np.zeros((trials, 1))
    path = []
    for _ in range(T):
        mask = sample_mask(rng, trials, S)
        k = mask.sum(axis=1, keepdims=True)
        y = np.broadcast_to(x, (trials, N)).copy()
        g_first = g = None
        for l in range(K):
            g = oracle(rng, y)
            if l == 0:
                g_first = g
            y = y - ALPHA * ((1 - beta) * g + beta * m)
        g_rep = g if last_grad else g_first
        x = np.sum(np.where(mask, y, 0), axis=1, keepdims=True) / k
        m = (1 - beta) * np.sum(np.where(mask, g_rep, 0), axis=1, keepdims=True) / k + beta * m
        path.append(x[:, 0])
    return np.stack(path, axis=1)


def ref_scaffnew(rng, T, p, gamma, max_steps, trials=TRIALS, per_client_k=False):
    """Scaffnew, full participation. Negative control ``per_client_k``: an independent K
    for every client."""
    x = np.full((trials, 1), X0)
    h = np.zeros((trials, N))
    path = []
    for _ in range(T):
        shape = (trials, N) if per_client_k else (trials, 1)
        counts = np.minimum(rng.geometric(p, size=shape), max_steps)
        y = np.broadcast_to(x, (trials, N)).copy()
        for l in range(int(counts.max())):
            new = y - gamma * (oracle(rng, y) - h)
            y = np.where(l < counts, new, y)
        x = np.mean(y - gamma / p * h, axis=1, keepdims=True)
        h = h + p / gamma * (x - y)
        path.append(x[:, 0])
    return np.stack(path, axis=1)


def ref_mime(rng, T, K, beta, S, trials=TRIALS, fresh_noise=False, c_all=False):
    """MIME (Algorithm 1 with SGD momentum): c = mean_P grad f_i(x); a participant runs K
    steps y <- y - alpha ((1 - beta) (g_i(y; z) - g_i(x; z) + c) + beta m) with the same
    noise z at y and x; x <- mean_P y_i, m <- (1 - beta) c + beta m. Negative controls:
    ``fresh_noise`` draws g_i(x)'s noise apart from g_i(y)'s; ``c_all`` averages the full
    gradients over all n clients instead of the participants."""
    def noisy(z, y):
        return A * (y - B) + z * np.sqrt(C * A / 2 * (y - B) ** 2 + D)

    x = np.full((trials, 1), X0)
    m = np.zeros((trials, 1))
    path = []
    for _ in range(T):
        mask = sample_mask(rng, trials, S)
        k = mask.sum(axis=1, keepdims=True)
        full = A * (x - B)
        c = (full.mean(axis=1, keepdims=True) if c_all
             else np.sum(np.where(mask, full, 0), axis=1, keepdims=True) / k)
        y = np.broadcast_to(x, (trials, N)).copy()
        for _ in range(K):
            z = rng.standard_normal((trials, N))
            zx = rng.standard_normal((trials, N)) if fresh_noise else z
            y = y - ALPHA * ((1 - beta) * (noisy(z, y) - noisy(zx, x) + c) + beta * m)
        x = np.sum(np.where(mask, y, 0), axis=1, keepdims=True) / k
        m = (1 - beta) * c + beta * m
        path.append(x[:, 0])
    return np.stack(path, axis=1)


MIME_BETA, MIME_K, MIME_S, MIME_T = 0.6, 3, 3, 4
SCAFF_P, SCAFF_GAMMA, SCAFF_MAX, SCAFF_T = 0.4, 0.1, 30, 4


@functools.lru_cache(maxsize=None)
def package_mimelite():
    return run_package(fa.algorithms.MimeLite(MIME_BETA), MIME_T, MIME_K, MIME_S, 16)


@functools.lru_cache(maxsize=None)
def package_mime():
    return run_package(fa.algorithms.Mime(MIME_BETA), MIME_T, MIME_K, MIME_S, 18)


def reference_mime(**kw):
    return ref_mime(np.random.default_rng(1018), MIME_T, MIME_K, MIME_BETA, MIME_S, **kw)


def test_mime_matches_numpy_reference():
    assert_agree(package_mime(), reference_mime(), "mime")


@pytest.mark.parametrize("control", ["fresh_noise", "c_all"])
def test_mime_with_a_wrong_correction_is_rejected(control):
    """Negative controls: MIME's reference with g_i(x) on its own noise, or with c over all
    n clients."""
    bad = failures(package_mime(), reference_mime(**{control: True}))
    assert bad, f"the comparison failed to reject MIME with {control}"


@functools.lru_cache(maxsize=None)
def package_scaffnew():
    assert SCAFF_GAMMA == ALPHA  # gamma is the run's stepsize
    alg = fa.algorithms.Scaffnew(SCAFF_P)
    return run_package(alg, SCAFF_T, alg.local_steps(SCAFF_MAX), None, 17)


def reference_mimelite(**kw):
    return ref_mimelite(np.random.default_rng(1016), MIME_T, MIME_K, MIME_BETA, MIME_S, **kw)


def reference_scaffnew(**kw):
    return ref_scaffnew(np.random.default_rng(1017), SCAFF_T, SCAFF_P, SCAFF_GAMMA, SCAFF_MAX,
                        **kw)


def test_mimelite_matches_numpy_reference():
    assert_agree(package_mimelite(), reference_mimelite(), "mimelite")


def test_scaffnew_matches_numpy_reference():
    assert_agree(package_scaffnew(), reference_scaffnew(), "scaffnew")


def test_mimelite_with_last_local_gradient_is_rejected():
    """Negative control: MimeLite's reference updating m from the last local gradients."""
    bad = failures(package_mimelite(), reference_mimelite(last_grad=True))
    assert bad, "the comparison failed to reject MimeLite with m from the last gradients"


def test_scaffnew_with_per_client_k_is_rejected():
    """Negative control: Scaffnew's reference with an independent K for every client."""
    bad = failures(package_scaffnew(), reference_scaffnew(per_client_k=True))
    assert bad, "the comparison failed to reject Scaffnew with a K per client"
