"""Federated problems: n local objectives f_i given as one loss plus per-client parameters.

The paper (eq. 1) solves min_x f(x) := (1/n) sum_i f_i(x). A :class:`Problem` stores the loss
``loss(params_i, x) -> f_i(x)``, the per-client parameters (pytree leaves with a leading axis
of length n), the local infima f_i*, the global infimum f* and a minimiser x*, and the
stochastic-gradient oracle that goes with it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from fedjax_abc._problems import _minimize
from fedjax_abc._problems._oracles import AbstractOracle

__all__ = ["Client", "Problem", "make_problem"]


class Client(NamedTuple):
    """One client as seen by an oracle: its parameters, its infimum f_i* and its index i."""

    params: PyTree
    local_min: Float[Array, ""]
    index: Int[Array, ""]


class Problem(eqx.Module):
    """n local objectives f_i(x) = ``loss(params_i, x)`` on R^d with their oracle.

    Attributes:
      loss: ``loss(params_i, x) -> scalar``, one client's objective. Static: a plain function.
      params: per-client parameters, every leaf with leading axis n.
      local_minima: f_i* = inf_x f_i(x), shape (n,).
      f_star: f* = inf_x f(x), shape ().
      x_star: a minimiser of f, shape (d,).
      oracle: the stochastic gradient oracle g_i(x; xi) (Assumption 2).
      grad_fn: optional closed-form ``grad_fn(params_i, x) -> grad f_i(x)``; ``jax.grad`` if None.
      name: a label used in reports.
    """

    loss: Callable[[PyTree, Array], Array] = eqx.field(static=True)
    params: PyTree
    local_minima: Float[Array, " n"]
    f_star: Float[Array, ""]
    x_star: Float[Array, " d"]
    oracle: AbstractOracle
    grad_fn: Optional[Callable[[PyTree, Array], Array]] = eqx.field(static=True, default=None)
    name: str = eqx.field(static=True, default="problem")

    @property
    def num_clients(self) -> int:
        return int(jax.tree_util.tree_leaves(self.params)[0].shape[0])

    @property
    def dim(self) -> int:
        return int(self.x_star.shape[0])

    @property
    def sigma_f_star(self) -> Array:
        """sigma_f* = f* - (1/n) sum_i f_i* (eq. 11)."""
        return self.f_star - jnp.mean(self.local_minima)

    def client(self, i) -> Client:
        """Client i: its parameters, f_i* and index (i may be traced)."""
        params_i = jax.tree_util.tree_map(lambda a: a[i], self.params)
        return Client(params_i, self.local_minima[i], jnp.asarray(i, jnp.int32))

    def local_value(self, client: Client, x: Array) -> Array:
        """f_i(x)."""
        return self.loss(client.params, x)

    def local_grad(self, client: Client, x: Array) -> Array:
        """grad f_i(x), closed form if ``grad_fn`` was given, else by autodiff."""
        if self.grad_fn is not None:
            return self.grad_fn(client.params, x)
        return jax.grad(self.loss, argnums=1)(client.params, x)

    def local_value_and_grad(self, client: Client, x: Array):
        """(f_i(x), grad f_i(x))."""
        if self.grad_fn is not None:
            return self.loss(client.params, x), self.grad_fn(client.params, x)
        return jax.value_and_grad(self.loss, argnums=1)(client.params, x)

    def local_values(self, x: Array) -> Float[Array, " n"]:
        """(f_1(x), ..., f_n(x))."""
        return jax.vmap(self.loss, in_axes=(0, None))(self.params, x)

    def local_grads(self, x: Array) -> Float[Array, "n d"]:
        """(grad f_1(x), ..., grad f_n(x)), shape (n, d)."""
        idx = jnp.arange(self.num_clients)
        return jax.vmap(lambda i: self.local_grad(self.client(i), x))(idx)

    def value_and_grad(self, x: Array):
        """(f(x), grad f(x)) in one pass over the clients."""
        idx = jnp.arange(self.num_clients)
        vals, grads = jax.vmap(lambda i: self.local_value_and_grad(self.client(i), x))(idx)
        return jnp.mean(vals), jnp.mean(grads, axis=0)

    def value(self, x: Array) -> Array:
        """f(x) = (1/n) sum_i f_i(x) (eq. 1)."""
        return jnp.mean(self.local_values(x))

    def grad(self, x: Array) -> Array:
        """grad f(x) = (1/n) sum_i grad f_i(x)."""
        return jnp.mean(self.local_grads(x), axis=0)

    def gap(self, x: Array) -> Array:
        """f(x) - f*."""
        return self.value(x) - self.f_star

    def astype(self, dtype) -> "Problem":
        """The same problem with every floating array leaf (oracle included) cast to dtype."""
        return cast_floating(self, dtype)


def cast_floating(tree, dtype):
    def cast(leaf):
        if isinstance(leaf, (jax.Array, np.ndarray)) and jnp.issubdtype(leaf.dtype, jnp.floating):
            return jnp.asarray(leaf, dtype)
        return leaf

    return jax.tree_util.tree_map(cast, tree)


def make_problem(
    loss: Callable[[PyTree, Array], Array],
    params: PyTree,
    oracle: AbstractOracle,
    *,
    dim: int = 1,
    local_minima=None,
    f_star=None,
    x_star=None,
    grad_fn=None,
    search_box: tuple[float, float] = (-100.0, 100.0),
    name: str = "custom",
) -> Problem:
    """Builds a :class:`Problem` from a loss and per-client parameters.

    Whatever of f_i*, f*, x* is not given is computed numerically in float64: for d = 1 by a
    global grid search over ``search_box`` refined by bounded Brent minimisation; for d > 1 by
    multi-start L-BFGS-B in the box. Give them in closed form when you know them.

    Args:
      loss: ``loss(params_i, x) -> f_i(x)`` for x of shape (d,).
      params: pytree, every leaf with leading axis n (the number of clients).
      oracle: an :class:`~fedjax_abc.AbstractOracle`.
      dim: d.
      local_minima, f_star, x_star: known values (optional).
      grad_fn: optional closed-form gradient ``grad_fn(params_i, x)``.
      search_box: (lo, hi) box for the numerical minimisation.
      name: a label.

    Returns:
      A :class:`Problem`.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> loss = lambda c, x: 0.5 * jnp.sum((x - c) ** 2)
      >>> p = fa.make_problem(loss, jnp.array([[0.0], [2.0]]), fa.GaussianOracle(1.0, 0.0))
      >>> round(float(p.f_star), 6), round(float(p.sigma_f_star), 6)
      (0.5, 0.5)
    """
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise ValueError("params must have at least one array leaf with leading axis n")
    n = int(jnp.shape(leaves[0])[0]) if jnp.ndim(leaves[0]) else 0
    if n < 1 or any(jnp.ndim(a) == 0 or jnp.shape(a)[0] != n for a in leaves):
        raise ValueError("every leaf of params must have the same leading axis n >= 1 (clients)")
    if dim < 1:
        raise ValueError(f"dim (d={dim}) must be >= 1")
    lo, hi = search_box
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"search_box {search_box} must be a finite interval lo < hi")
    params = jax.tree_util.tree_map(jnp.asarray, params)
    f64 = jax.jit(lambda p, x: loss(p, jnp.asarray(x, jnp.float64)))

    def client_fn(i):
        p_i = jax.tree_util.tree_map(lambda a: a[i], params)
        return lambda x: float(f64(p_i, np.atleast_1d(x)))

    if local_minima is None:
        local_minima = [_minimize.global_minimum(client_fn(i), dim, lo, hi)[1] for i in range(n)]
    if f_star is None or x_star is None:
        vmapped = jax.jit(
            lambda x: jnp.mean(jax.vmap(loss, in_axes=(0, None))(params, jnp.asarray(x, jnp.float64)))
        )
        xs, fs = _minimize.global_minimum(lambda x: float(vmapped(np.atleast_1d(x))), dim, lo, hi)
        x_star = xs if x_star is None else x_star
        f_star = fs if f_star is None else f_star
    return Problem(
        loss=loss,
        params=params,
        local_minima=jnp.asarray(local_minima, jnp.float64).reshape(n),
        f_star=jnp.asarray(f_star, jnp.float64).reshape(()),
        x_star=jnp.asarray(x_star, jnp.float64).reshape(dim),
        oracle=oracle,
        grad_fn=grad_fn,
        name=name,
    )
