"""Independent plain-NumPy references of personalised federated algorithms.

Nothing here imports fedjax_abc, jax or optax: each algorithm is written from its paper's
equations, a loop over rounds, the sampled clients and the local steps, vectorised over
``trials`` independent runs only. Used as the reference that the package's Monte Carlo
output is compared against in distribution (``test_personal_fixed_points.py``).

- :class:`Quadratics`: f_i(x) = (1/2) sum_j a_ij (x_j - b_ij)^2 with the Gaussian oracle
  g_i(x; z) = grad f_i(x) + z sqrt((C f_i(x) + D) / d), z ~ N(0, I_d). One z is drawn per
  client and local step, and every gradient the step evaluates uses it (a step's
  mini-batch).
- :func:`ditto` (Li et al., ICML 2021, Algorithm 1), :func:`pfedme` (Dinh et al.,
  NeurIPS 2020, Algorithm 1), :func:`perfedavg` (Fallah et al., NeurIPS 2020, Algorithm 1,
  HF and FO), :func:`apfl` (Deng et al., 2020, Algorithm 1, fixed or learned mixing) and
  :func:`fedavg_fine_tuned` (FedAvg, its clients evaluated after K exact gradient steps).

Each returns ``{"x": (trials, d), "personal": (trials, n, d)}``: the server's model after the
last round and every client's personal model then. Rounds: S_t drawn uniformly without
replacement (``reference_numpy.sample_subsets``), every sampled client starts from x_t and
takes Q local steps with the constant stepsize eta; the server averages the messages.
"""

from __future__ import annotations

import numpy as np

from reference_numpy import sample_subsets

__all__ = ["Quadratics", "apfl", "ditto", "fedavg_fine_tuned", "perfedavg", "pfedme"]


class Quadratics:
    """Diagonal quadratics with a Gaussian ABC oracle (f_i* = 0)."""

    def __init__(self, a, b, C=0.0, D=0.0):
        self.b = np.asarray(b, dtype=np.float64)
        self.n, self.d = self.b.shape
        self.a = np.broadcast_to(np.asarray(a, dtype=np.float64).reshape(self.n, -1), self.b.shape)
        self.C, self.D = float(C), float(D)

    def value(self, idx, x):
        """f_idx(x) for idx (trials, m) and x (trials, m, d): (trials, m)."""
        return 0.5 * np.sum(self.a[idx] * (x - self.b[idx]) ** 2, axis=-1)

    def grad(self, idx, x):
        return self.a[idx] * (x - self.b[idx])

    def noise(self, rng, shape):
        """One step's z for every (trial, client): shape (trials, m, d); zeros without noise."""
        if self.C == 0 and self.D == 0:
            return np.zeros(shape)
        return rng.standard_normal(shape)

    def oracle(self, idx, x, z):
        """g_idx(x; z), the same z at every point a step evaluates."""
        scale = np.sqrt((self.C * self.value(idx, x) + self.D) / self.d)
        return self.grad(idx, x) + z * scale[..., None]


def _start(problem, x0, trials):
    x = np.array(np.broadcast_to(np.asarray(x0, np.float64), (trials, problem.d)))
    return x, np.arange(trials)[:, None]


def _put(states, rows, idx, values):
    """states[r, idx[r, j]] = values[r, j] for every trial r and slot j."""
    states[rows, idx] = values


# ------------------------------------------------------------------------------- Ditto


def ditto(problem, x0, *, lam, S, Q, stepsize, rounds, trials, rng):
    """Ditto: the sampled clients run FedAvg's local SGD on w and, with the same stepsize and
    sample, Q steps v <- v - eta (g(v) + lam (v - w_t)) on their personal v (v = x0 at the
    start); the server averages the w's; the personal model is v."""
    x, rows = _start(problem, x0, trials)
    v = np.repeat(x[:, None, :], problem.n, axis=1)
    for _ in range(rounds):
        idx = sample_subsets(rng, trials, problem.n, S)
        w = np.repeat(x[:, None, :], S, axis=1)
        vi = v[rows, idx]
        for _ in range(Q):
            z = problem.noise(rng, w.shape)
            w, vi = (w - stepsize * problem.oracle(idx, w, z),
                     vi - stepsize * (problem.oracle(idx, vi, z) + lam * (vi - x[:, None, :])))
        _put(v, rows, idx, vi)
        x = w.mean(axis=1)
    return {"x": x, "personal": v}


# ------------------------------------------------------------------------------ pFedMe


def _prox(problem, idx, w, z, lam, K, inner_stepsize):
    """K gradient steps on f_i(theta) + (lam/2) ||theta - w||^2 from theta = w (eqs. (7)-(8))."""
    theta = w
    for _ in range(K):
        theta = theta - inner_stepsize * (problem.oracle(idx, theta, z) + lam * (theta - w))
    return theta


def pfedme(problem, x0, *, lam, K, inner_stepsize, beta, S, Q, stepsize, rounds, trials, rng):
    """pFedMe: at each local step theta = K inner steps from w (the step's sample), then
    w <- w - eta lam (w - theta) (eq. (9)); server x <- (1 - beta) x + beta mean(w);
    personal model theta_i(x_T) with exact gradients."""
    x, _ = _start(problem, x0, trials)
    for _ in range(rounds):
        idx = sample_subsets(rng, trials, problem.n, S)
        w = np.repeat(x[:, None, :], S, axis=1)
        for _ in range(Q):
            z = problem.noise(rng, w.shape)
            w = w - stepsize * lam * (w - _prox(problem, idx, w, z, lam, K, inner_stepsize))
        x = (1 - beta) * x + beta * w.mean(axis=1)
    every = np.broadcast_to(np.arange(problem.n), (trials, problem.n))
    exact = Quadratics(problem.a, problem.b)
    personal = _prox(exact, every, np.repeat(x[:, None, :], problem.n, axis=1),
                     np.zeros((trials, problem.n, problem.d)), lam, K, inner_stepsize)
    return {"x": x, "personal": personal}


# -------------------------------------------------------------------------- Per-FedAvg


def perfedavg(problem, x0, *, alpha, variant, delta, S, Q, stepsize, rounds, trials, rng):
    """Per-FedAvg: w~ = w - alpha g(w), u = g(w~); HF: w <- w - eta (u - alpha d) with
    d = (g(w + delta u) - g(w - delta u)) / (2 delta); FO: w <- w - eta u (every g with the
    step's sample); server mean; personal model x_T - alpha grad f_i(x_T)."""
    x, _ = _start(problem, x0, trials)
    for _ in range(rounds):
        idx = sample_subsets(rng, trials, problem.n, S)
        w = np.repeat(x[:, None, :], S, axis=1)
        for _ in range(Q):
            z = problem.noise(rng, w.shape)
            u = problem.oracle(idx, w - alpha * problem.oracle(idx, w, z), z)
            if variant == "hf":
                d = (problem.oracle(idx, w + delta * u, z)
                     - problem.oracle(idx, w - delta * u, z)) / (2 * delta)
                u = u - alpha * d
            w = w - stepsize * u
        x = w.mean(axis=1)
    personal = x[:, None, :] - alpha * problem.a * (x[:, None, :] - problem.b)
    return {"x": x, "personal": personal}


# -------------------------------------------------------------------------------- APFL


def apfl(problem, x0, *, alpha, learn_alpha, S, Q, stepsize, rounds, trials, rng):
    """APFL: per local step, v_bar = a_i v + (1 - a_i) w, w <- w - eta g(w),
    v <- v - eta a_i g(v_bar), and where learned a_i <- clip(a_i - eta <v - w, g(v_bar)>, 0, 1)
    (all with the step's sample, right-hand sides at the step's start); the server averages
    the w's; personal model a_i v_i + (1 - a_i) x_T."""
    x, rows = _start(problem, x0, trials)
    v = np.repeat(x[:, None, :], problem.n, axis=1)
    mix = np.full((trials, problem.n), float(alpha))
    for _ in range(rounds):
        idx = sample_subsets(rng, trials, problem.n, S)
        w = np.repeat(x[:, None, :], S, axis=1)
        vi, ai = v[rows, idx], mix[rows, idx]
        for _ in range(Q):
            z = problem.noise(rng, w.shape)
            g_bar = problem.oracle(idx, ai[..., None] * vi + (1 - ai[..., None]) * w, z)
            new_ai = np.clip(ai - stepsize * np.sum((vi - w) * g_bar, axis=-1), 0, 1) \
                if learn_alpha else ai
            w, vi, ai = (w - stepsize * problem.oracle(idx, w, z),
                         vi - stepsize * ai[..., None] * g_bar, new_ai)
        _put(v, rows, idx, vi)
        _put(mix, rows, idx, ai)
        x = w.mean(axis=1)
    return {"x": x, "personal": mix[..., None] * v + (1 - mix[..., None]) * x[:, None, :]}


# ------------------------------------------------------------------------ fine-tuning


def fedavg_fine_tuned(problem, x0, *, steps, fine_stepsize, S, Q, stepsize, rounds, trials, rng):
    """FedAvg, then every client's personal model: K exact gradient steps of size gamma on
    f_i from x_T."""
    x, _ = _start(problem, x0, trials)
    for _ in range(rounds):
        idx = sample_subsets(rng, trials, problem.n, S)
        w = np.repeat(x[:, None, :], S, axis=1)
        for _ in range(Q):
            w = w - stepsize * problem.oracle(idx, w, problem.noise(rng, w.shape))
        x = w.mean(axis=1)
    every = np.broadcast_to(np.arange(problem.n), (trials, problem.n))
    personal = np.repeat(x[:, None, :], problem.n, axis=1)
    for _ in range(steps):
        personal = personal - fine_stepsize * problem.grad(every, personal)
    return {"x": x, "personal": personal}
