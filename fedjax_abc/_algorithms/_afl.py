"""Agnostic federated learning (Mohri, Sivek and Suresh, ICML 2019): a minimax over the
clients' mixture weights lambda, solved by stochastic mirror descent with Euclidean
projections (gradient descent on the model, projected ascent on lambda)."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._algorithms._base import AbstractAlgorithm, AbstractServerState, RoundInfo
from fedjax_abc._algorithms._checks import check_leaf, local_objective, positive_scalar
from fedjax_abc._algorithms._fedavg import sgd_step

__all__ = ["AFL", "AFLState", "pack_vector", "project_simplex", "unpack_vector"]


def project_simplex(v: Array) -> Array:
    """The Euclidean projection of v (n,) onto the simplex {l >= 0, sum_i l_i = 1}.

    argmin_l ||l - v||^2 over the simplex is max(v - theta, 0) with theta chosen so that the
    result sums to 1: with u = v sorted in decreasing order, rho = max{j : u_j -
    (sum_{r <= j} u_r - 1) / j > 0} and theta = (sum_{r <= rho} u_r - 1) / rho (Held,
    Wolfe and Crowder 1974; Duchi, Shalev-Shwartz, Singer and Chandra, ICML 2008, Fig. 1).

    Example:
      >>> import jax.numpy as jnp
      >>> project_simplex(jnp.array([1.0, 0.5, 0.0])).tolist()  # theta = 1/4
      [0.75, 0.25, 0.0]
      >>> project_simplex(jnp.array([2.0, 0.0])).tolist()
      [1.0, 0.0]
    """
    n = v.shape[-1]
    u = jnp.sort(v)[::-1]
    css = jnp.cumsum(u) - 1
    j = jnp.arange(1, n + 1, dtype=v.dtype)
    rho = jnp.sum(u - css / j > 0)  # the condition holds exactly for j <= rho
    theta = css[rho - 1] / rho.astype(v.dtype)
    return jnp.maximum(v - theta, 0)


def pack_vector(v: Array, d: int) -> Array:
    """v (n,) as a (d, ceil(n / d)) array, zero-padded: a message leaf of the model's
    leading shape (the engine's messages are leaves of shape () or (d, ...)), holding
    ceil(n / d) d <= n + d numbers instead of a (d, n) broadcast's n d."""
    n = v.shape[-1]
    m = -(-n // d)
    return jnp.pad(v, (0, m * d - n)).reshape(d, m)


def unpack_vector(packed: Array, n: int) -> Array:
    """The first n entries of a :func:`pack_vector` array: v (n,)."""
    return packed.reshape(-1)[:n]


class AFLState(AbstractServerState):
    """AFL's server state: the model x and the clients' mixture weights lambda (n,)."""

    x: Array
    weights: Array


class AFL(AbstractAlgorithm):
    """Agnostic federated learning (Mohri, Sivek and Suresh, ICML 2019): Algorithm 1,
    Stochastic-AFL, with Euclidean projections.

    AFL minimises the worst mixture of the clients' losses,

        min_x max_{lambda in simplex} L(x, lambda) = sum_i lambda_i f_i(x),

    by simultaneous gradient descent on x and projected gradient ascent on lambda, both at
    (x_t, lambda_t):

        x_{t+1} = x_t - gamma_w sum_i lambda_i grad f_i(x_t),
        lambda_{t+1} = Proj_simplex(lambda_t + gamma_lambda (f_1(x_t), ..., f_n(x_t)))
                                                                            (Algorithm 1).

    Here client i runs the engine's Q local steps from x_t to y_i and sends the pair
    (n lambda_i (y_i - x_t), n f_i(x_t) e_i), its update weighted by its mixture weight and
    its exact loss (``info.objective.value``) in its own coordinate (``info.objective.index``);
    the mean over all n clients is (sum_i lambda_i (y_i - x_t), (f_1(x_t), ..., f_n(x_t))).
    The server steps x_{t+1} = x_t + eta sum_i lambda_i (y_i - x_t) and lambda as above
    (:func:`project_simplex`). With Q = 1 and eta = 1 this is Algorithm 1 with
    gamma_w = alpha_t (the run's stepsize) and exact gradients; with Q > 1 it is close to
    DRFA (Deng, Kamani and Mahdavi, NeurIPS 2020), which updates lambda from the losses at
    a randomly chosen iterate of the local steps rather than at x_t. The loss vector, n
    numbers, travels packed into a (d, ceil(n / d)) leaf (:func:`pack_vector`).

    Full participation: the closed forms (:func:`fedjax_abc.theory.afl_minimax`) and the
    paper's exact gradients need every client every round, and unit weights (the engine
    refuses samplers with other weights). The engine gives an algorithm no way to refuse a
    partial sampler; with S of n clients sampled uniformly the two means are unbiased
    estimates of the sums above (the paper's stochastic gradients, sampled by client), a
    stochastic AFL whose lambda needs decreasing stepsizes to settle.

    Departures: the paper's guarantee is for the averaged iterates (1/T) sum_t x_t, which
    FLGo's AFL (``flgo/algorithm/afl.py``) evaluates; the records here are the last
    iterates, which converge too on strongly convex clients with stepsizes small enough.
    The model set W is all of R^d (no projection of x); Lambda is the whole simplex (the
    paper allows a subset of it).

    Attributes:
      lambda_stepsize: gamma_lambda > 0 (an array leaf).
      weights: lambda_0 (n,), on the simplex (an array leaf; default uniform 1 / n).
      server_stepsize: eta > 0 (an array leaf).
      num_clients: n (static; must be the problem's).

    Example:
      >>> import fedjax_abc as fa
      >>> alg = fa.algorithms.AFL(lambda_stepsize=0.1, num_clients=4)
      >>> alg.weights.tolist()
      [0.25, 0.25, 0.25, 0.25]
    """

    lambda_stepsize: Float[Array, ""]
    weights: Float[Array, " n"]
    server_stepsize: Float[Array, ""]
    num_clients: int = eqx.field(static=True)

    needs_unit_weights: ClassVar[bool] = True

    def __init__(self, lambda_stepsize, num_clients, *, weights=None, server_stepsize=1.0):
        if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or \
                num_clients < 1:
            raise ValueError(f"num_clients (n={num_clients!r}) must be an integer >= 1")
        self.num_clients = int(num_clients)
        self.lambda_stepsize = positive_scalar("lambda_stepsize (gamma_lambda)", lambda_stepsize)
        self.server_stepsize = positive_scalar("server_stepsize (eta)", server_stepsize)
        if weights is None:
            weights = np.full(self.num_clients, 1.0 / self.num_clients)
        try:
            self.weights = np.asarray(weights, np.float64)
        except (TypeError, ValueError):
            raise ValueError("weights (lambda_0) must be an array of n numbers") from None
        _check_weights(self.weights, self.num_clients)

    def __check_init__(self):
        check_leaf("lambda_stepsize (gamma_lambda)", self.lambda_stepsize, 0.0, strict=True)
        check_leaf("server_stepsize (eta)", self.server_stepsize, 0.0, strict=True)
        _check_weights(self.weights, self.num_clients)

    def init(self, x0):
        return AFLState(x0, jnp.asarray(self.weights, x0.dtype))

    def init_client(self, x0):
        return ()

    def client_init(self, server, client):
        return ()

    def local_step(self, server, y, local, gradient, stepsize):
        return sgd_step(y, gradient(y), stepsize), local

    def client_final(self, server, client, y, local, info):
        objective = local_objective("AFL", info)
        n, i = self.num_clients, objective.index
        loss = objective.value(server.x)
        update = n * server.weights[i] * (y - server.x)
        losses = jnp.zeros((n,), y.dtype).at[i].set(n * loss)
        return (update, pack_vector(losses, y.shape[-1])), client

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        if info.num_clients != self.num_clients:
            raise ValueError(f"AFL's num_clients ({self.num_clients}) must be the problem's "
                             f"n={info.num_clients}")
        update, packed = mean_message
        dtype = server.x.dtype
        x = server.x + self.server_stepsize.astype(dtype) * update
        losses = unpack_vector(packed, self.num_clients)
        weights = project_simplex(server.weights + self.lambda_stepsize.astype(dtype) * losses)
        return AFLState(x, weights)


def _check_weights(weights, n: int) -> None:
    """ValueError unless the (concrete) weights are n finite numbers >= 0 summing to 1."""
    try:
        given = np.asarray(weights)
        w = given.astype(np.float64)
    except Exception:  # a tracer: checked where concrete
        return
    if w.shape != (n,):
        raise ValueError(f"weights (lambda_0) must have shape (n={n},), got {w.shape}")
    eps = np.finfo(given.dtype).eps if np.issubdtype(given.dtype, np.floating) else 0.0
    if not np.all(np.isfinite(w)) or np.any(w < 0) or abs(w.sum() - 1) > 1e-12 + 4 * n * eps:
        raise ValueError(f"weights (lambda_0) must lie on the simplex (>= 0, summing to 1), "
                         f"got sum {w.sum():g}, min {w.min():g}")
