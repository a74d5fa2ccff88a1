"""Algorithm 1 on federated softmax regression with mini-batch SGD: NumPy and PyTorch baselines.

Independent of ``fedjax_abc``: the data come as plain arrays (:class:`SoftmaxData`), the
gradient is written from the formulas (cross-entropy of softmax(X W + b) on a mini-batch of
b rows, plus l2 x), and the b rows of each client and step are drawn without replacement by
Floyd's algorithm on uniforms. Both baselines are vectorised over trials and clients, with
Python loops over rounds and local steps; mode "all" runs all n clients each round (the
``mask`` formulation), "sampled" only the S sampled ones (``gather``).

:func:`jax_softmax` is the same in straightforward JAX (``jax.grad``, ``vmap``, ``scan``, one
``jit``). :func:`torch_softmax` needs PyTorch (the ``bench`` extra); it is imported only when called.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["SoftmaxData", "jax_softmax", "numpy_softmax", "torch_softmax"]


@dataclasses.dataclass(frozen=True)
class SoftmaxData:
    """n clients' data padded to M rows: features (n, M, p), labels (n, M), counts (n,)."""

    features: np.ndarray
    labels: np.ndarray
    counts: np.ndarray
    num_classes: int
    l2: float
    batch: int
    kind = "softmax"

    @classmethod
    def from_lists(cls, features, labels, num_classes, l2, batch):
        n, M, p = len(features), max(len(y) for y in labels), features[0].shape[1]
        X = np.zeros((n, M, p))
        y = np.zeros((n, M), np.int64)
        for i, (a, b) in enumerate(zip(features, labels)):
            X[i, : len(b)], y[i, : len(b)] = a, b
        return cls(X, y, np.array([len(b) for b in labels]), int(num_classes), float(l2),
                   int(batch))

    @property
    def num_clients(self) -> int:
        return self.features.shape[0]

    @property
    def dim(self) -> int:
        return (self.features.shape[2] + 1) * self.num_classes


def _floyd(u: np.ndarray, m: np.ndarray, b: int) -> np.ndarray:
    """b distinct rows in [0, m) per leading index from uniforms u (..., b): Floyd's algorithm."""
    chosen = np.empty(u.shape, np.int64)
    for k in range(b):
        j = m - b + k
        t = np.floor(u[..., k] * (j + 1)).astype(np.int64)
        taken = np.any(chosen[..., :k] == t[..., None], axis=-1) if k else np.zeros(t.shape, bool)
        chosen[..., k] = np.where(taken, j, t)
    return chosen


def _check(problem, num_sampled, x0, trials):
    n, d = problem.num_clients, problem.dim
    if not 1 <= num_sampled <= n:
        raise ValueError(f"num_sampled (S={num_sampled}) must be in [1, n={n}]")
    if problem.counts.min() < problem.batch:
        raise ValueError("a client has fewer rows than the batch")
    return np.array(np.broadcast_to(np.asarray(x0, np.float64).reshape(-1, d), (trials, d)))


def numpy_softmax(problem: SoftmaxData, *, num_sampled: int, local_steps: int, stepsize,
                  rounds: int, x0, trials: int, seed: int = 0, mode: str = "all",
                  dtype: str = "float64") -> np.ndarray:
    """Algorithm 1 with mini-batch SGD on softmax regression; returns x_T, (trials, d)."""
    x = _check(problem, num_sampled, x0, trials).astype(dtype)
    rng = np.random.default_rng(seed)
    n, M, p = problem.features.shape
    K, b, S = problem.num_classes, problem.batch, num_sampled
    flat_X = problem.features.reshape(n * M, p).astype(dtype)
    flat_y = problem.labels.reshape(n * M)
    eye = np.eye(K, dtype=dtype)
    alphas = np.broadcast_to(np.asarray(stepsize, np.float64), (rounds,)).astype(dtype)
    for t in range(rounds):
        picks = np.argpartition(rng.random((trials, n)), S - 1, axis=1)[:, :S]  # (R, S)
        clients = np.broadcast_to(np.arange(n), (trials, n)) if mode == "all" else picks
        m = problem.counts[clients]  # (R, c)
        theta = np.repeat(x[:, None, :], clients.shape[1], axis=1)  # (R, c, d)
        for _ in range(local_steps):
            rows = _floyd(rng.random(clients.shape + (b,)), m, b)  # (R, c, b)
            idx = clients[..., None] * M + rows  # (R, c, b)
            Xb, yb = flat_X[idx], flat_y[idx]  # (R, c, b, p), (R, c, b)
            W = theta[..., : p * K].reshape(theta.shape[:2] + (p, K))
            bias = theta[..., p * K:]
            z = np.einsum("rcbp,rcpk->rcbk", Xb, W) + bias[:, :, None, :]
            z -= z.max(-1, keepdims=True)
            P = np.exp(z)
            P /= P.sum(-1, keepdims=True)
            resid = (P - eye[yb]) / b
            gW = np.einsum("rcbp,rcbk->rcpk", Xb, resid).reshape(theta.shape[:2] + (p * K,))
            grad = np.concatenate([gW, resid.sum(2)], axis=-1) + problem.l2 * theta
            theta = theta - alphas[t] * grad
        if mode == "all":
            theta = np.take_along_axis(theta, picks[:, :, None], axis=1)
        x = theta.mean(axis=1)
    return x


def torch_softmax(problem: SoftmaxData, *, num_sampled: int, local_steps: int, stepsize,
                  rounds: int, x0, trials: int, seed: int = 0, mode: str = "all",
                  dtype: str = "float64") -> np.ndarray:
    """The same as :func:`numpy_softmax` in PyTorch (CPU tensors, no autograd)."""
    import torch

    tdt = {"float64": torch.float64, "float32": torch.float32}[dtype]
    x = torch.as_tensor(_check(problem, num_sampled, x0, trials), dtype=tdt)
    gen = torch.Generator().manual_seed(seed)
    n, M, p = problem.features.shape
    K, b, S = problem.num_classes, problem.batch, num_sampled
    flat_X = torch.as_tensor(problem.features.reshape(n * M, p), dtype=tdt)
    flat_y = torch.as_tensor(problem.labels.reshape(n * M))
    counts = torch.as_tensor(problem.counts)
    alphas = np.broadcast_to(np.asarray(stepsize, np.float64), (rounds,))
    with torch.no_grad():
        for t in range(rounds):
            picks = torch.argsort(torch.rand((trials, n), generator=gen), dim=1)[:, :S]
            clients = torch.arange(n).expand(trials, n) if mode == "all" else picks
            m = counts[clients]
            theta = x[:, None, :].repeat(1, clients.shape[1], 1)
            for _ in range(local_steps):
                u = torch.rand(clients.shape + (b,), generator=gen, dtype=torch.float64)
                rows = torch.empty(clients.shape + (b,), dtype=torch.int64)
                for k in range(b):  # Floyd's algorithm
                    j = m - b + k
                    tk = torch.floor(u[..., k] * (j + 1)).to(torch.int64)
                    if k:
                        taken = (rows[..., :k] == tk[..., None]).any(-1)
                        tk = torch.where(taken, j, tk)
                    rows[..., k] = tk
                idx = clients[..., None] * M + rows
                Xb, yb = flat_X[idx], flat_y[idx]
                W = theta[..., : p * K].reshape(theta.shape[:2] + (p, K))
                z = torch.einsum("rcbp,rcpk->rcbk", Xb, W) + theta[..., None, p * K:]
                P = torch.softmax(z, dim=-1)
                resid = (P - torch.nn.functional.one_hot(yb, K).to(tdt)) / b
                gW = torch.einsum("rcbp,rcbk->rcpk", Xb, resid).reshape(theta.shape[:2] + (p * K,))
                grad = torch.cat([gW, resid.sum(2)], dim=-1) + problem.l2 * theta
                theta = theta - float(alphas[t]) * grad
            if mode == "all":
                theta = torch.gather(theta, 1, picks[:, :, None].expand(-1, -1, theta.shape[2]))
            x = theta.mean(dim=1)
    return x.numpy()


def _make_jax_softmax(n: int, S: int, Q: int, b: int, K: int, mode: str):
    """The jitted ``run(X, y, counts, l2, x0, alphas, keys) -> x_T`` of :func:`jax_softmax`."""
    import jax
    import jax.numpy as jnp

    def loss(theta, X, y, l2):
        p = X.shape[-1]
        W, bias = theta[: p * K].reshape(p, K), theta[p * K:]
        logp = jax.nn.log_softmax(X @ W + bias)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1)) + 0.5 * l2 * theta @ theta

    def local_run(i, X, y, counts, l2, x, alpha, key):  # client i's rows read where needed
        count = counts[i]

        def step(theta, k):  # b distinct rows of the client's count: Floyd on b uniforms
            u = jax.random.uniform(k, (b,))
            rows = jnp.zeros((b,), jnp.int32)
            for j in range(b):
                top = (count - b + j).astype(jnp.int32)
                r = jnp.floor(u[j] * (top + 1)).astype(jnp.int32)
                taken = jnp.any((rows == r) & (jnp.arange(b) < j))
                rows = rows.at[j].set(jnp.where(taken, top, r))
            g = jax.grad(loss)(theta, X[i, rows], y[i, rows], l2)
            return theta - alpha * g.astype(theta.dtype), None

        theta, _ = jax.lax.scan(step, x, jax.random.split(key, Q))
        return theta

    def one_round(data, carry, alpha):
        X, y, counts, l2 = data
        x, key = carry
        key, k_sample, k_noise = jax.random.split(key, 3)
        idx = jax.random.permutation(k_sample, n)[:S]
        run = jax.vmap(local_run, in_axes=(0, None, None, None, None, None, None, 0))
        if mode == "all":
            local = run(jnp.arange(n), X, y, counts, l2, x, alpha,
                        jax.random.split(k_noise, n))[idx]
        else:
            local = run(idx, X, y, counts, l2, x, alpha, jax.random.split(k_noise, S))
        return (jnp.mean(local, axis=0), key), None

    def one_trial(X, y, counts, l2, x0, alphas, key):
        (x, _), _ = jax.lax.scan(lambda c, a: one_round((X, y, counts, l2), c, a), (x0, key),
                                 alphas)
        return x

    return jax.jit(jax.vmap(one_trial, in_axes=(None, None, None, None, 0, None, 0)))


_JAX_RUNS: dict = {}


def jax_softmax(problem: SoftmaxData, *, num_sampled: int, local_steps: int, stepsize,
                rounds: int, x0, trials: int, seed: int = 0, mode: str = "all",
                dtype: str = "float64") -> np.ndarray:
    """The same in straightforward JAX: the loss's gradient by ``jax.grad``, a key split per
    local step, b rows without replacement by Floyd's algorithm on b uniforms (as
    :func:`numpy_softmax`), clients by ``jax.random.permutation``; ``vmap`` over clients and trials, ``scan`` over
    steps and rounds, one ``jit`` (compiled once per configuration)."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    x = _check(problem, num_sampled, x0, trials)
    jdt = {"float64": jnp.float64, "float32": jnp.float32}[dtype]
    n = problem.num_clients
    config = (n, num_sampled, local_steps, problem.batch, problem.num_classes, mode)
    if config not in _JAX_RUNS:
        _JAX_RUNS[config] = _make_jax_softmax(*config)
    alphas = jnp.asarray(np.broadcast_to(np.asarray(stepsize, np.float64), (rounds,)), jdt)
    out = _JAX_RUNS[config](jnp.asarray(problem.features, jdt), jnp.asarray(problem.labels),
                            jnp.asarray(problem.counts), jnp.asarray(problem.l2, jdt),
                            jnp.asarray(x, jdt), alphas,
                            jax.random.split(jax.random.key(seed), trials))
    return np.asarray(jax.block_until_ready(out))
