"""Independent plain-NumPy reference implementations of several federated algorithms.

Nothing here imports fedjax_abc, jax or optax. The problems (their gradients and stochastic
oracles) and the uniform S-subset sampler come from ``reference_numpy``; the algorithms are
written from their update equations. Everything is vectorised over ``trials`` independent
runs (Python loops only over rounds and local steps) and computed in float64. Used as the
reference that the package's Monte Carlo output is compared against in distribution.

Entry point::

    run(problem, algorithm, x0, *, S, Q, stepsizes, trials, rng, keep_history=False) -> dict

with ``algorithm`` one of

- :class:`FedAvg` ``(server_lr=1.0)``
- :class:`FedProx` ``(mu)``
- :class:`Scaffold` ``(server_lr=1.0)``
- :class:`FedOpt` ``(optimizer)`` with ``optimizer`` one of :func:`sgd`, :func:`adam`,
  :func:`adagrad`, :func:`yogi` (NumPy transcriptions of the optax optimizers of those names,
  same defaults).

The per-algorithm functions :func:`fedavg`, :func:`fedprox`, :func:`scaffold` and
:func:`fedopt` are the same thing with the algorithm's parameters as keywords.

Notation: alpha_t = stepsizes[t]; S_t = the S clients drawn uniformly without replacement in
round t (:func:`reference_numpy.sample_subsets`); every sampled client starts from
y_i^0 = x_t and takes Q local steps l = 0..Q-1 with the problem's stochastic oracle g_i, fresh
noise every local step.

Randomness (same order as :func:`reference_numpy.fedavg`, so that FedAvg with server_lr = 1
reproduces it draw for draw from the same seed): every round first draws S_t with
``sample_subsets(rng, trials, n, S)``, then each local step makes exactly one call
``problem.stochastic_grads(rng, idx, y)`` with idx of shape (trials, S) and y of shape
(trials, S, d). No other random numbers are drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from reference_numpy import sample_subsets

__all__ = [
    "FedAvg", "FedProx", "Scaffold", "FedOpt",
    "Optimizer", "sgd", "adam", "adagrad", "yogi",
    "run", "fedavg", "fedprox", "scaffold", "fedopt",
]


# ------------------------------------------------------------------- server optimizers


@dataclass(frozen=True)
class Optimizer:
    """A server optimizer in optax's init/update form, for arrays of shape (trials, d).

    ``init(x)`` returns the state; ``update(g, state)`` returns ``(u, new_state)`` and the
    server applies x <- x + u (optax.apply_updates). Every update already includes the sign
    flip and learning rate of optax.scale_by_learning_rate (u = -lr * direction).
    """

    name: str
    init: Callable[[np.ndarray], Any]
    update: Callable[[np.ndarray, Any], tuple]
    hyper: dict


def sgd(learning_rate, momentum=None, nesterov=False):
    """optax.sgd(learning_rate, momentum=None, nesterov=False).

    momentum None: u = -lr g. Otherwise optax.trace(decay=momentum): trace_0 = 0,
    trace_t = g_t + momentum * trace_{t-1}; u_t = -lr trace_t (nesterov=False) or
    u_t = -lr (g_t + momentum * trace_t) (nesterov=True).
    """
    lr = float(learning_rate)

    def init(x):
        return None if momentum is None else np.zeros_like(x, dtype=np.float64)

    def update(g, trace):
        if momentum is None:
            return -lr * g, None
        trace = g + momentum * trace
        direction = g + momentum * trace if nesterov else trace
        return -lr * direction, trace

    return Optimizer("sgd", init, update, dict(learning_rate=lr, momentum=momentum,
                                                nesterov=nesterov))


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    """optax.adam (nesterov=False): scale_by_adam then scale_by_learning_rate.

    m_0 = v_0 = 0, count t = 1, 2, ...:
    m_t = (1 - b1) g + b1 m_{t-1};  v_t = (1 - b2) g^2 + b2 v_{t-1};
    mhat = m_t / (1 - b1^t);  vhat = v_t / (1 - b2^t);
    u_t = -lr * mhat / (sqrt(vhat + eps_root) + eps).
    """
    lr = float(learning_rate)

    def init(x):
        z = np.zeros_like(x, dtype=np.float64)
        return (0, z, z.copy())

    def update(g, state):
        count, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * g * g + b2 * v
        count += 1
        mhat = m / (1 - b1**count)
        vhat = v / (1 - b2**count)
        return -lr * mhat / (np.sqrt(vhat + eps_root) + eps), (count, m, v)

    return Optimizer("adam", init, update, dict(learning_rate=lr, b1=b1, b2=b2, eps=eps,
                                                 eps_root=eps_root))


def adagrad(learning_rate, initial_accumulator_value=0.1, eps=1e-7):
    """optax.adagrad: scale_by_rss then scale_by_learning_rate.

    s_0 = initial_accumulator_value (every coordinate); s_t = s_{t-1} + g^2;
    u_t = -lr * g / sqrt(s_t + eps) where s_t > 0, and 0 where s_t = 0 (eps inside the root).
    No bias correction, no step counter.
    """
    lr = float(learning_rate)

    def init(x):
        return np.full_like(x, initial_accumulator_value, dtype=np.float64)

    def update(g, s):
        s = s + g * g
        safe = np.where(s > 0, s, 1.0)
        scale = np.where(s > 0, 1.0 / np.sqrt(safe + eps), 0.0)
        return -lr * scale * g, s

    return Optimizer("adagrad", init, update, dict(learning_rate=lr,
                                                    initial_accumulator_value=initial_accumulator_value,
                                                    eps=eps))


def yogi(learning_rate, b1=0.9, b2=0.999, eps=1e-3, eps_root=0.0, initial_accumulator_value=1e-6):
    """optax.yogi: scale_by_yogi then scale_by_learning_rate.

    m_0 = v_0 = initial_accumulator_value (1e-6; BOTH moments, as optax initialises them);
    count t = 1, 2, ...:
    m_t = (1 - b1) g + b1 m_{t-1};
    v_t = v_{t-1} - (1 - b2) sign(v_{t-1} - g^2) g^2   (sign(0) = 0);
    mhat = m_t / (1 - b1^t);  vhat = v_t / (1 - b2^t);
    u_t = -lr * mhat / (sqrt(vhat + eps_root) + eps).
    optax.yogi exposes only (learning_rate, b1, b2, eps); eps_root = 0 and
    initial_accumulator_value = 1e-6 are scale_by_yogi's defaults.
    """
    lr = float(learning_rate)

    def init(x):
        z = np.full_like(x, initial_accumulator_value, dtype=np.float64)
        return (0, z, z.copy())

    def update(g, state):
        count, m, v = state
        g2 = g * g
        m = (1 - b1) * g + b1 * m
        v = v - (1 - b2) * np.sign(v - g2) * g2
        count += 1
        mhat = m / (1 - b1**count)
        vhat = v / (1 - b2**count)
        return -lr * mhat / (np.sqrt(vhat + eps_root) + eps), (count, m, v)

    return Optimizer("yogi", init, update, dict(learning_rate=lr, b1=b1, b2=b2, eps=eps,
                                                 eps_root=eps_root,
                                                 initial_accumulator_value=initial_accumulator_value))


# -------------------------------------------------------------------------- algorithms


@dataclass(frozen=True)
class FedAvg:
    """y^{l+1} = y^l - alpha_t g_i(y^l); x_{t+1} = x_t + server_lr (mean_{S_t} y_i^Q - x_t)."""

    server_lr: float = 1.0


@dataclass(frozen=True)
class FedProx:
    """y^{l+1} = y^l - alpha_t (g_i(y^l) + mu (y^l - x_t)); x_{t+1} = mean_{S_t} y_i^Q."""

    mu: float


@dataclass(frozen=True)
class Scaffold:
    """SCAFFOLD (Karimireddy et al. 2020, Alg. 1, option II), server stepsize server_lr.

    c = c_i = 0 at the start; every trial keeps all n clients' c_i. Sampled client i:
    y^{l+1} = y^l - alpha_t (g_i(y^l) - c_i + c);
    c_i^+ = c_i - c + (x_t - y_i^Q) / (Q alpha_t);
    x_{t+1} = x_t + server_lr mean_{S_t} (y_i^Q - x_t);
    c <- c + (S / n) mean_{S_t} (c_i^+ - c_i); sampled clients set c_i <- c_i^+.
    (c and c_i used in round t are the values at the start of round t.)
    """

    server_lr: float = 1.0


@dataclass(frozen=True)
class FedOpt:
    """FedAvg local steps; server x_{t+1} = x_t + u_t, u_t = optimizer update for
    the pseudo-gradient Delta_t = x_t - mean_{S_t} y_i^Q (one optimizer step per round)."""

    optimizer: Optimizer


def _initial(x0, trials, d):
    """x0 (a scalar, shape (d,), (1, d) or (trials, d)) as a fresh (trials, d) float64 array."""
    return np.array(np.broadcast_to(np.asarray(x0, dtype=np.float64), (trials, d)))


def run(problem, algorithm, x0, *, S, Q, stepsizes, trials, rng, keep_history=False):
    """``trials`` independent runs of ``algorithm`` for len(stepsizes) rounds.

    problem: any reference_numpy problem (attributes n, d and
        ``stochastic_grads(rng, idx, x)``), e.g. ExactGradients(...) for exact gradients.
    x0: scalar or array broadcastable to (trials, d).
    Returns a dict with
      "x": x_T, shape (trials, d);
      "history" (if keep_history): x_0 .. x_T, shape (T + 1, trials, d);
      Scaffold: "c" (trials, d) and "c_clients" (trials, n, d), the final control variates;
      FedOpt: "opt_state", the final optimizer state.
    """
    n, d = problem.n, problem.d
    if not 1 <= S <= n:
        raise ValueError(f"S = {S} must be in 1..n = {n}")
    if Q < 1:
        raise ValueError(f"Q = {Q} must be >= 1")
    x = _initial(x0, trials, d)
    history = [x.copy()] if keep_history else None
    out = {}

    if isinstance(algorithm, Scaffold):
        c = np.zeros((trials, d))
        c_clients = np.zeros((trials, n, d))
    if isinstance(algorithm, FedOpt):
        opt_state = algorithm.optimizer.init(x)

    for alpha in np.asarray(stepsizes, dtype=np.float64).reshape(-1):
        idx = sample_subsets(rng, trials, n, S)          # (trials, S)
        xs = x[:, None, :]                                # (trials, 1, d)
        y = np.repeat(xs, S, axis=1)                      # (trials, S, d)

        if isinstance(algorithm, (FedAvg, FedOpt)):
            for _ in range(Q):
                y = y - alpha * problem.stochastic_grads(rng, idx, y)
            y_mean = y.mean(axis=1)
            if isinstance(algorithm, FedAvg):
                x = x + algorithm.server_lr * (y_mean - x)
            else:
                u, opt_state = algorithm.optimizer.update(x - y_mean, opt_state)
                x = x + u

        elif isinstance(algorithm, FedProx):
            mu = float(algorithm.mu)
            for _ in range(Q):
                y = y - alpha * (problem.stochastic_grads(rng, idx, y) + mu * (y - xs))
            x = y.mean(axis=1)

        elif isinstance(algorithm, Scaffold):
            ci = np.take_along_axis(c_clients, idx[:, :, None], axis=1)   # (trials, S, d)
            correction = c[:, None, :] - ci
            for _ in range(Q):
                y = y - alpha * (problem.stochastic_grads(rng, idx, y) + correction)
            ci_plus = ci - c[:, None, :] + (xs - y) / (Q * alpha)
            dy = (y - xs).mean(axis=1)
            dc = (ci_plus - ci).mean(axis=1)
            x = x + algorithm.server_lr * dy
            c = c + (S / n) * dc
            np.put_along_axis(c_clients, idx[:, :, None], ci_plus, axis=1)

        else:
            raise TypeError(f"unknown algorithm {algorithm!r}")

        if keep_history:
            history.append(x.copy())

    out["x"] = x
    if keep_history:
        out["history"] = np.stack(history)
    if isinstance(algorithm, Scaffold):
        out["c"], out["c_clients"] = c, c_clients
    if isinstance(algorithm, FedOpt):
        out["opt_state"] = opt_state
    return out


# ------------------------------------------------------------ per-algorithm shorthands


def fedavg(problem, x0, *, S, Q, stepsizes, trials, rng, server_lr=1.0):
    """FedAvg with server stepsize; returns x_T, shape (trials, d)."""
    return run(problem, FedAvg(server_lr), x0, S=S, Q=Q, stepsizes=stepsizes, trials=trials,
               rng=rng)["x"]


def fedprox(problem, x0, *, S, Q, stepsizes, trials, rng, mu):
    """FedProx(mu); returns x_T, shape (trials, d)."""
    return run(problem, FedProx(mu), x0, S=S, Q=Q, stepsizes=stepsizes, trials=trials,
               rng=rng)["x"]


def scaffold(problem, x0, *, S, Q, stepsizes, trials, rng, server_lr=1.0):
    """SCAFFOLD (option II); returns x_T, shape (trials, d)."""
    return run(problem, Scaffold(server_lr), x0, S=S, Q=Q, stepsizes=stepsizes, trials=trials,
               rng=rng)["x"]


def fedopt(problem, x0, *, S, Q, stepsizes, trials, rng, optimizer):
    """FedOpt with a server optimizer from this module; returns x_T, shape (trials, d)."""
    return run(problem, FedOpt(optimizer), x0, S=S, Q=Q, stepsizes=stepsizes, trials=trials,
               rng=rng)["x"]
