"""An independent plain-NumPy implementation of Algorithm 1 and of the paper's problems.

Nothing here imports fedjax_abc: the local objectives, their gradients and the stochastic
oracles are written from the paper's formulas, and the sampled set S_t is drawn by sorting
uniforms (every S-subset equally likely), not by the package's sampler. Used as the
reference that the package's Monte Carlo output is compared against.

- :class:`SoftplusHuber`: problem (25) with oracle (26) (Section IV-A).
- :class:`HuberOffsets`: problem (27) with the sign oracle of Section IV-B.
- :class:`Quadratics`: f_i(x) = (1/2) sum_j a_ij (x_j - c_ij)^2 with the Gaussian oracle
  g_i = grad f_i + z sqrt((C f_i + D) / d), z ~ N(0, I_d) (variance C (f_i - f_i*) + D, f_i* = 0).
- :class:`LogisticData`: federated logistic regression with a mini-batch oracle.
- :func:`fedavg`: Algorithm 1, vectorised over trials and sampled clients.
- Standard-error helpers for comparing two Monte Carlo samples.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize

# ------------------------------------------------------------------------- scalar pieces


def huber(z):
    """z^2/2 for |z| < 1, |z| - 1/2 otherwise (eq. 25)."""
    a = np.abs(z)
    return np.where(a < 1, 0.5 * z * z, a - 0.5)


def huber_grad(z):
    """Derivative of the Huber function: z for |z| < 1, sign(z) otherwise."""
    return np.clip(z, -1.0, 1.0)


def softplus(z):
    """ln(1 + e^z)."""
    return np.logaddexp(0.0, z)


def sigmoid(z):
    """1 / (1 + e^{-z}), the derivative of softplus."""
    return np.exp(-np.logaddexp(0.0, -z))


def random_signs(rng, shape):
    """eps = +1 or -1 with probability 1/2 each."""
    return np.where(rng.random(shape) < 0.5, -1.0, 1.0)


# ---------------------------------------------------------------------------- problems


class SoftplusHuber:
    """Problem (25): f_1 = Huber(x), f_i = ln(1 + e^{x - i + 1}) (1-based i = 2..n); oracle (26)."""

    def __init__(self, n=16):
        self.n = n
        self.d = 1
        self.shift = np.arange(n, dtype=np.float64)  # 0-based client k has shift k

    def values(self, idx, x):
        """f_i(x) for client indices idx (any shape) and x of shape idx.shape + (1,)."""
        z = x[..., 0]
        return np.where(idx == 0, huber(z), softplus(z - self.shift[idx]))

    def grads(self, idx, x):
        z = x[..., 0]
        return np.where(idx == 0, huber_grad(z), sigmoid(z - self.shift[idx]))[..., None]

    def stochastic_grads(self, rng, idx, x):
        """Oracle (26): grad f_1 +/- sqrt(|x|); grad f_i +/- sqrt(f_i(x)) for i >= 2."""
        z = x[..., 0]
        mag = np.where(idx == 0, np.sqrt(np.abs(z)), np.sqrt(self.values(idx, x)))
        return self.grads(idx, x) + (random_signs(rng, z.shape) * mag)[..., None]

    def f(self, x):
        """f(x) = (1/n) sum_i f_i(x) for a scalar x."""
        return (huber(x) + np.sum(softplus(x - self.shift[1:]))) / self.n

    def fprime(self, x):
        return (huber_grad(x) + np.sum(sigmoid(x - self.shift[1:]))) / self.n


class HuberOffsets:
    """Problem (27): f_i(x) = Huber(x - d_i); oracle grad f_i + eps sqrt(f_i - f_i*), f_i* = 0."""

    def __init__(self, offsets):
        self.offsets = np.asarray(offsets, dtype=np.float64).reshape(-1)
        self.n = self.offsets.shape[0]
        self.d = 1

    def values(self, idx, x):
        return huber(x[..., 0] - self.offsets[idx])

    def grads(self, idx, x):
        return huber_grad(x[..., 0] - self.offsets[idx])[..., None]

    def stochastic_grads(self, rng, idx, x):
        z = x[..., 0]
        mag = np.sqrt(self.values(idx, x))
        return self.grads(idx, x) + (random_signs(rng, z.shape) * mag)[..., None]

    def f(self, x):
        return float(np.mean(huber(x - self.offsets)))

    def fprime(self, x):
        return float(np.mean(huber_grad(x - self.offsets)))


class Quadratics:
    """f_i(x) = (1/2) sum_j a_ij (x_j - c_ij)^2 with a Gaussian ABC oracle (f_i* = 0)."""

    def __init__(self, a, c, C, D):
        self.a = np.asarray(a, dtype=np.float64)
        self.c = np.asarray(c, dtype=np.float64)
        self.n, self.d = self.a.shape
        self.C, self.D = float(C), float(D)

    def values(self, idx, x):
        return 0.5 * np.sum(self.a[idx] * (x - self.c[idx]) ** 2, axis=-1)

    def grads(self, idx, x):
        return self.a[idx] * (x - self.c[idx])

    def stochastic_grads(self, rng, idx, x):
        var = self.C * self.values(idx, x) + self.D
        z = rng.standard_normal(x.shape)
        return self.grads(idx, x) + z * np.sqrt(var / self.d)[..., None]

    def f(self, x):
        return float(np.mean(0.5 * np.sum(self.a * (x - self.c) ** 2, axis=1)))

    def grad_f(self, x):
        return np.mean(self.a * (x - self.c), axis=0)


class LogisticData:
    """Federated logistic regression with a mini-batch oracle, from the formulas alone.

    Client i holds (X_i, y_i), m_i rows, labels in {0, 1}; with z = X w + c and x = (w, c),
    f_i(x) = w_i (mean_j [log(1 + e^{z_j}) - y_j z_j] + (l2/2) ||x||^2), w_i = 1 or n m_i/m.
    The oracle is the same on b rows drawn uniformly without replacement (the b smallest of
    m_i uniforms) or with replacement (integers in [0, m_i)).
    """

    def __init__(self, features, labels, l2, batch, replace=False, weighting="uniform"):
        self.X = [np.asarray(a, np.float64) for a in features]
        self.y = [np.asarray(a, np.float64) for a in labels]
        self.n, self.d = len(self.X), self.X[0].shape[1] + 1
        self.l2, self.batch, self.replace = float(l2), int(batch), bool(replace)
        sizes = np.array([len(a) for a in self.y], np.float64)
        self.w = np.ones(self.n) if weighting == "uniform" else self.n * sizes / sizes.sum()
        M = int(sizes.max())
        self.m = sizes.astype(int)
        self.Xp = np.zeros((self.n, M, self.d))
        self.yp = np.zeros((self.n, M))
        for i, (X, y) in enumerate(zip(self.X, self.y)):
            self.Xp[i, : len(y)] = np.concatenate([X, np.ones((len(y), 1))], axis=1)
            self.yp[i, : len(y)] = y

    def _rows_grad(self, idx, x, rows):
        """Mean gradient over the given rows (..., r) of clients idx (...), plus the l2 term."""
        Xr = np.take_along_axis(self.Xp[idx], rows[..., None], axis=-2)  # (..., r, d)
        yr = np.take_along_axis(self.yp[idx], rows, axis=-1)
        z = np.einsum("...rd,...d->...r", Xr, x)
        resid = 0.5 * (1.0 + np.tanh(0.5 * z)) - yr
        g = np.einsum("...r,...rd->...d", resid, Xr) / rows.shape[-1]
        return self.w[idx][..., None] * (g + self.l2 * x)

    def stochastic_grads(self, rng, idx, x):
        m = self.m[idx]
        if self.replace:
            rows = np.floor(rng.random(idx.shape + (self.batch,)) * m[..., None]).astype(int)
        else:
            keys = rng.random(idx.shape + (self.Xp.shape[1],))
            keys = np.where(np.arange(self.Xp.shape[1]) < m[..., None], keys, np.inf)
            rows = np.argsort(keys, axis=-1)[..., : self.batch]
        return self._rows_grad(idx, x, rows)

    def client_values(self, x):
        """(f_1(x), ..., f_n(x)) for x (d,)."""
        out = []
        for i in range(self.n):
            z = self.Xp[i, : self.m[i]] @ x
            loss = np.mean(np.logaddexp(0.0, z) - self.yp[i, : self.m[i]] * z)
            out.append(self.w[i] * (loss + 0.5 * self.l2 * x @ x))
        return np.array(out)

    def f(self, x):
        return float(np.mean(self.client_values(x)))

    def grad_f(self, x):
        g = []
        for i in range(self.n):
            rows = np.arange(self.m[i])
            g.append(self._rows_grad(np.array(i), x, rows))
        return np.mean(g, axis=0)


class ExactGradients:
    """Wraps a problem so that its oracle returns the exact gradient (C = D = 0)."""

    def __init__(self, problem):
        self.problem = problem
        self.n, self.d = problem.n, problem.d

    def stochastic_grads(self, rng, idx, x):
        return self.problem.grads(idx, x)


# ------------------------------------------------------------------------- Algorithm 1


def sample_subsets(rng, trials, n, S):
    """One S-subset of {0..n-1} per trial, uniformly: the S smallest of n iid uniforms."""
    if S == n:
        return np.broadcast_to(np.arange(n), (trials, n))
    return np.argsort(rng.random((trials, n)), axis=1)[:, :S]


def _local_runs(problem, x, idx, alpha, Q, rng):
    """Q local steps from x (trials, d) of the clients idx (trials, m); returns (trials, m, d)."""
    y = np.repeat(x[:, None, :], idx.shape[1], axis=1)
    for _ in range(Q):
        y = y - alpha * problem.stochastic_grads(rng, idx, y)
    return y


def fedavg(problem, x0, *, S, Q, stepsizes, trials, rng):
    """Algorithm 1 for ``trials`` independent runs; returns x_T, shape (trials, d).

    Every round: draw S_t (uniform without replacement), start each sampled client from x_t,
    take Q steps x <- x - alpha_t g_i(x; xi), and average the sampled clients' final models.
    """
    n, d = problem.n, problem.d
    x = np.array(np.broadcast_to(np.asarray(x0, dtype=np.float64).reshape(-1, d), (trials, d)))
    for alpha in np.asarray(stepsizes, dtype=np.float64):
        idx = sample_subsets(rng, trials, n, S)
        x = _local_runs(problem, x, idx, alpha, Q, rng).mean(axis=1)
    return x


def fedavg_weighted(problem, x0, *, weights, Q, stepsizes, trials, rng):
    """FedAvg with a random weight per client and round: x_{t+1} = sum_i w_i x_i^Q / sum_i w_i.

    ``weights(rng, trials, n)`` returns the (trials, n) weights of one round: e.g. how many
    times each client was drawn (sampling with replacement; a client drawn twice runs once and
    counts twice) or independent participation indicators. A round with total weight 0 leaves
    x_t unchanged. All n local runs are computed (virtual trajectories), then weighted.
    """
    n, d = problem.n, problem.d
    x = np.array(np.broadcast_to(np.asarray(x0, dtype=np.float64).reshape(-1, d), (trials, d)))
    everyone = np.broadcast_to(np.arange(n), (trials, n))
    for alpha in np.asarray(stepsizes, dtype=np.float64):
        w = weights(rng, trials, n)
        y = _local_runs(problem, x, everyone, alpha, Q, rng)
        total = w.sum(axis=1)
        avg = np.einsum("rn,rnd->rd", w, y) / np.where(total > 0, total, 1.0)[:, None]
        x = np.where((total > 0)[:, None], avg, x)
    return x


def with_replacement_counts(S):
    """weights for :func:`fedavg_weighted`: counts of S iid uniform draws from n clients."""

    def weights(rng, trials, n):
        draws = rng.integers(0, n, size=(trials, S))
        return np.stack([np.bincount(row, minlength=n) for row in draws]).astype(np.float64)

    return weights


def bernoulli_indicators(p):
    """weights for :func:`fedavg_weighted`: each client independently with probability p."""

    def weights(rng, trials, n):
        return (rng.random((trials, n)) < p).astype(np.float64)

    return weights


# ------------------------------------------------------------------- minimisation checks


def minimize_1d(f, lo, hi, grid=200001):
    """Global minimum of a scalar function on [lo, hi]: a fine grid, then bounded Brent."""
    xs = np.linspace(lo, hi, grid)
    vals = np.array([f(x) for x in xs])
    j = int(np.argmin(vals))
    h = xs[1] - xs[0]
    res = optimize.minimize_scalar(f, bounds=(max(lo, xs[j] - 2 * h), min(hi, xs[j] + 2 * h)),
                                   method="bounded", options={"xatol": 1e-14})
    return (float(res.x), float(res.fun)) if res.fun <= vals[j] else (float(xs[j]), float(vals[j]))


# ---------------------------------------------------------------------- standard errors


def se_mean_difference(a, b):
    """Standard error of mean(a) - mean(b) for independent samples a and b."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))


def se_sample_variance(a):
    """Standard error of the unbiased sample variance s^2 of iid a.

    Var(s^2) = (mu4 - sigma^4 (m - 3) / (m - 1)) / m, with the central moments mu4, sigma^2
    estimated from the sample.
    """
    a = np.asarray(a, float)
    m = a.size
    dev = a - a.mean()
    s2 = np.sum(dev**2) / (m - 1)
    mu4 = np.mean(dev**4)
    return float(np.sqrt(max(mu4 - s2 * s2 * (m - 3) / (m - 1), 0.0) / m))


def se_variance_difference(a, b):
    """Standard error of var(a) - var(b) for independent samples a and b."""
    return float(np.hypot(se_sample_variance(a), se_sample_variance(b)))


def assert_same_distribution(a, b, z=4.0, what=""):
    """mean and variance of two independent samples agree within z standard errors."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    dm = a.mean() - b.mean()
    se_m = se_mean_difference(a, b)
    dv = a.var(ddof=1) - b.var(ddof=1)
    se_v = se_variance_difference(a, b)
    assert se_m > 0 and se_v > 0, f"{what}: degenerate sample (se_mean={se_m}, se_var={se_v})"
    assert abs(dm) <= z * se_m, f"{what}: means differ by {dm:.3e} = {dm / se_m:.2f} se (se {se_m:.3e})"
    assert abs(dv) <= z * se_v, f"{what}: variances differ by {dv:.3e} = {dv / se_v:.2f} se (se {se_v:.3e})"
