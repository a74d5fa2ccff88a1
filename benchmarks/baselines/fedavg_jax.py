"""FedAvg on a learning problem in plain JAX: the reference for the package's learning path.

Independent of ``fedjax_abc``: the data come as padded arrays (features (n, M, p), labels
(n, M), counts (n,)), the models are written out (softmax regression logits = X W + b; a
tanh MLP X W1 + b1 -> tanh -> W2 + b2), the loss is the mean cross-entropy of a mini-batch
plus (l2 / 2) ||x||^2, and its gradient is ``jax.grad`` of the loss of the whole (b, p)
batch, so every layer is one matrix product of the batch. One round of one trial: S
clients uniformly without replacement (``top_k`` of uniforms), each Q SGD steps on b
distinct rows of its own (``top_k`` of uniforms over its m_i rows), the plain mean of the
local models. ``vmap`` over the sampled clients and over the trials, ``lax.scan`` over the
steps and the rounds, one ``jit``: what a JAX user would write for this workload, and so
the speed the package's learning path should reach.

:func:`batched_products` is the arithmetic alone: the matrix products of one local step of
``slots`` clients (forward and backward), each a batched product of the workload's shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["MODELS", "batched_products", "make_fedavg", "product_flops", "to_params"]

MODELS = ("softmax", "mlp")


def to_params(kind: str, x, p: int, K: int, width: int = 64):
    """The package's flat x (d,) as this module's parameters.

    Softmax regression: x = ravel(W (p, K), b (K,)). MLP: x = the leaves of
    ``equinox.nn.MLP(p, K, width, 1)`` in order, (W1 (width, p), b1, W2 (K, width), b2);
    the weights are stored here transposed, (p, width) and (width, K), so that the forward
    products are X W.
    """
    if kind == "softmax":
        return x[..., : p * K].reshape(x.shape[:-1] + (p, K)), x[..., p * K:]
    o1 = width * p
    o2 = o1 + width
    o3 = o2 + K * width
    W1 = jnp.swapaxes(x[..., :o1].reshape(x.shape[:-1] + (width, p)), -1, -2)
    W2 = jnp.swapaxes(x[..., o2:o3].reshape(x.shape[:-1] + (K, width)), -1, -2)
    return W1, x[..., o1:o2], W2, x[..., o3:]


def _logits(kind: str, params, X):
    if kind == "softmax":
        W, b = params
        return X @ W + b
    W1, b1, W2, b2 = params
    return jnp.tanh(X @ W1 + b1) @ W2 + b2


def _loss(kind: str, params, X, y, l2):
    logp = jax.nn.log_softmax(_logits(kind, params, X))
    ce = -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
    return ce + 0.5 * l2 * sum(jnp.sum(a * a) for a in params)


def make_fedavg(kind: str, *, num_sampled: int, local_steps: int, batch: int, rounds: int,
                stepsize: float, l2: float):
    """The jitted ``run(features, labels, counts, params0, keys) -> params_T``.

    ``params0``: the trials' starting parameters (leaves with leading axis R, see
    :func:`to_params`); ``keys``: (R,) PRNG keys, one a trial. Returns the trials' final
    parameters.
    """
    if kind not in MODELS:
        raise ValueError(f"kind ({kind!r}) must be one of {MODELS}")
    S, Q, b, T = num_sampled, local_steps, batch, rounds
    grad = jax.grad(lambda params, X, y: _loss(kind, params, X, y, l2))

    def one_trial(features, labels, counts, params, key):
        n, M = labels.shape

        def client(i, k, start):
            def step(theta, kk):
                u = jnp.where(jnp.arange(M) < counts[i], jax.random.uniform(kk, (M,)), -1.0)
                rows = jax.lax.top_k(u, b)[1]
                g = grad(theta, features[i, rows], labels[i, rows])
                return jax.tree_util.tree_map(lambda a, d: a - stepsize * d, theta, g), None

            theta, _ = jax.lax.scan(step, start, jax.random.split(k, Q))
            return theta

        def one_round(theta, k):
            k_pick, k_steps = jax.random.split(k)
            picked = jax.lax.top_k(jax.random.uniform(k_pick, (n,)), S)[1]
            local = jax.vmap(client, in_axes=(0, 0, None))(picked, jax.random.split(k_steps, S),
                                                            theta)
            return jax.tree_util.tree_map(lambda a: jnp.mean(a, axis=0), local), None

        theta, _ = jax.lax.scan(one_round, params, jax.random.split(key, T))
        return theta

    return jax.jit(jax.vmap(one_trial, in_axes=(None, None, None, 0, 0)))


def product_flops(kind: str, slots: int, batch: int, p: int = 60, K: int = 10,
                  width: int = 64) -> int:
    """Floating-point operations of the matrix products of one local step of ``slots``
    clients: forward and the gradient's products (two per multiply-add)."""
    if kind == "softmax":
        per_row = 2 * p * K  # X W, X^T r
    else:
        per_row = 2 * p * width + 3 * width * K  # X W1, X^T dh; h W2, h^T dz, dz W2^T
    return 2 * slots * batch * per_row


def batched_products(kind: str, slots: int, batch: int, dtype, p: int = 60, K: int = 10,
                     width: int = 64):
    """(jitted function, its arguments): the products of one local step of ``slots``
    clients with a (batch, p) mini-batch each, every product one batched matrix product."""
    key = jax.random.key(0)
    X = jax.random.normal(key, (slots, batch, p), dtype)
    if kind == "softmax":
        W = jax.random.normal(key, (slots, p, K), dtype)

        def f(X, W):
            z = jnp.einsum("sbp,spk->sbk", X, W)
            return jnp.einsum("sbp,sbk->spk", X, z)

        return jax.jit(f), (X, W)
    W1 = jax.random.normal(key, (slots, p, width), dtype)
    W2 = jax.random.normal(key, (slots, width, K), dtype)

    def g(X, W1, W2):
        h = jnp.einsum("sbp,sph->sbh", X, W1)
        z = jnp.einsum("sbh,shk->sbk", h, W2)
        dW2 = jnp.einsum("sbh,sbk->shk", h, z)
        dh = jnp.einsum("sbk,shk->sbh", z, W2)
        dW1 = jnp.einsum("sbp,sbh->sph", X, dh)
        return dW1, dW2

    return jax.jit(g), (X, W1, W2)
