"""IFCA, the iterative federated clustering algorithm (Ghosh, Chung, Yin and Ramchandran,
"An efficient framework for clustered federated learning", NeurIPS 2020): k cluster
models, each client joining the one of lowest loss."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import local_objective
from fedjax_abc._algorithms._fedavg import sgd_step

__all__ = ["IFCA", "IFCAState", "cluster_estimate"]


class IFCAState(AbstractServerState):
    """IFCA's server state: x, the model of the cluster most clients chose last round (x0
    before the first round), and the k cluster models (k, d)."""

    x: Array
    models: Array


def cluster_estimate(models: Array, value) -> Array:
    """j_hat = argmin_j f_i(theta_j) (Algorithm 2's cluster estimate), the lowest index among ties.

    Args:
      models: the cluster models theta_j, (k, d).
      value: z -> f_i(z), the client's loss.

    Example:
      >>> import jax.numpy as jnp
      >>> int(cluster_estimate(jnp.array([[0.0], [3.0]]), lambda z: jnp.sum((z - 2.0) ** 2)))
      1
    """
    return jnp.argmin(jax.vmap(value)(models))


class IFCA(AbstractAlgorithm):
    """IFCA (Ghosh, Chung, Yin and Ramchandran, NeurIPS 2020), Algorithm 2 with model
    averaging.

    The server keeps k cluster models theta_1, ..., theta_k. In round t every sampled
    client i picks the cluster of lowest loss, j_hat = argmin_j f_i(theta_j) (with
    the client's exact loss on all its data, ``info.objective.value``), runs the engine's
    Q local SGD steps from theta_j_hat to y_i, and sends its update y_i - theta_j_hat in its
    cluster's slot with a one-hot count; the server averages each cluster's members,

        theta_j <- theta_j + sum_{i: j_hat_i = j} w_i (y_i - theta_j) / sum_{i: j_hat_i = j} w_i,

    Algorithm 2's model averaging (theta_j = the mean of its members' local models); a
    cluster no client chose keeps its model. A message is the pair ((d, k) updates, zero
    outside the client's column; (d, k) counts, the column's one-hot repeated on every row),
    the (d, ...) leaves the engine's messages take.

    x_t, which the records read (gap, x), is the model of the cluster chosen by the largest
    total weight in round t - 1 (the lowest index among ties; x_{t-1} after a round without
    participants), and x0 before the first round. The cluster models start at
    theta_j = x0 + offsets_j, a deterministic spread the user gives (the paper draws them
    at random; its guarantees need a start near the true centres). Client i's own model
    (``personal``) is the model of its best cluster.

    The cluster choice needs f_i at every cluster model, which the engine gives a client
    with its final message (:class:`~fedjax_abc.algorithms.LocalInfo`), not before its
    local steps; so every client runs its local steps from all k cluster models at once,
    with the same noise, and keeps the run of its cluster: the numbers of running from the
    chosen model only, for k times the local work. The engine's own local model stays at
    x_t, so a message transform (compression, privacy noise) would act on a zero update:
    IFCA takes none.

    Fixed point (exact gradients, full participation, clusters that keep their members):
    each cluster model is FedAvg's fixed point over its members,
    :func:`fedjax_abc.theory.ifca_fixed_point`.

    Attributes:
      offsets: (k, d), the cluster models' start relative to x0 (an array leaf).
      k: the number of clusters (static), at most the number of clients.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.algorithms.IFCA(2, offsets=[[-1.0], [1.0]]).k
      2
    """

    offsets: Float[Array, "k d"]
    k: int = eqx.field(static=True)

    def __init__(self, k, offsets):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k (IFCA's clusters) must be an integer >= 1, got {k!r}")
        self.k = int(k)
        try:
            self.offsets = np.asarray(offsets, np.float64)
        except (TypeError, ValueError):
            raise ValueError("offsets must be a (k, d) array of numbers") from None
        _check_offsets(self.offsets, self.k)

    def __check_init__(self):
        _check_offsets(self.offsets, self.k)

    def init(self, x0):
        d = x0.shape[-1]
        if self.offsets.shape[1] != d:
            raise ValueError(f"offsets must have shape (k={self.k}, d={d}), got "
                             f"{tuple(self.offsets.shape)}")
        return IFCAState(x0, x0 + jnp.asarray(self.offsets, x0.dtype))

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return server.models  # the k local runs, each from its cluster's model

    def local_step(self, server, y, runs, gradient, stepsize):
        return y, sgd_step(runs, jax.vmap(gradient)(runs), stepsize)

    def client_final(self, server, client, y, runs, info):
        j = cluster_estimate(server.models, local_objective("IFCA", info).value)
        one_hot = jax.nn.one_hot(j, self.k, dtype=y.dtype)  # (k,)
        update = (runs[j] - server.models[j])[:, None] * one_hot[None, :]  # (d, k)
        counts = jnp.broadcast_to(one_hot, update.shape)
        return (update, counts), client

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        if self.k > info.num_clients:
            raise ValueError(f"IFCA's k ({self.k} clusters) must be at most the number of "
                             f"clients (n={info.num_clients})")
        update, counts = mean_message  # (d, k) each: the weighted means of the messages
        members = counts > 0
        step = jnp.where(members, update / jnp.where(members, counts, 1), 0)
        models = server.models + step.T
        x = jnp.where(jnp.any(members), models[jnp.argmax(counts[0])], server.x)
        return IFCAState(x, models)

    def personal(self, server, client, objective):
        return server.models[cluster_estimate(server.models, objective.value)]


def _check_offsets(offsets, k: int) -> None:
    """ValueError unless the (concrete) offsets are a finite (k, d) array."""
    try:
        a = np.asarray(offsets, np.float64)
    except Exception:  # a tracer: checked where concrete
        return
    if a.ndim != 2 or a.shape[0] != k:
        raise ValueError(f"offsets must have shape (k={k}, d), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("offsets must be finite")
