"""Federated problems: n local objectives f_i given as one loss plus per-client parameters.

The paper (eq. 1) solves min_x f(x) := (1/n) sum_i f_i(x). A :class:`Problem` stores the loss
``loss(params_i, x) -> f_i(x)``, the per-client parameters (pytree leaves with a leading axis
of length n), the local infima f_i*, the global infimum f* and a minimiser x*, and the
stochastic-gradient oracle that goes with it.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Callable, NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from fedjax_abc._problems import _minimize
from fedjax_abc._problems._args import require_x64
from fedjax_abc._problems._host import method
from fedjax_abc._problems._minima import AbstractMinima, Minima
from fedjax_abc._problems._oracles import AbstractOracle

__all__ = ["AbstractPooled", "Client", "Problem", "make_problem", "with_placeholder_minima"]


class AbstractPooled(eqx.Module):
    """Every client's data in one place, for f(x) and grad f(x) in one pass: what
    ``Problem.pooled`` holds (a learning problem's rows without padding,
    :class:`~fedjax_abc._problems._models.PooledData`)."""

    @abc.abstractmethod
    def value_and_grad(self, x: Array):
        """(f(x), grad f(x)), x of shape (d,)."""

    @abc.abstractmethod
    def check_matches(self, params: PyTree) -> None:
        """ValueError (one line) unless these data are the problem's per-client ``params``
        (checked when a problem is built and again after ``eqx.tree_at``)."""


class Client(NamedTuple):
    """One client as seen by an oracle: its parameters, its infimum f_i* and its index i."""

    params: PyTree
    local_min: Float[Array, ""]
    index: Int[Array, ""]


def _row(a: Array, i) -> Array:
    """a[i] along the leading (client) axis, i in range. ``take`` with clipping makes a
    lighter gather than NumPy indexing, which also wraps negative indices: 2% of problem
    (27)'s ``gather`` mode, which reads the sampled clients' rows every round."""
    return jnp.take(a, i, axis=0, mode="clip")


class Problem(eqx.Module):
    """n local objectives f_i(x) = ``loss(params_i, x)`` on R^d with their oracle.

    Attributes:
      loss: ``loss(params_i, x) -> scalar``, one client's objective. Static: a plain function.
      params: per-client parameters, every leaf with leading axis n.
      minima: the infima below, as arrays (:class:`~fedjax_abc._problems._minima.Minima`)
        or computed when first asked for (``DeferredMinima``: a learning problem's).
      local_minima: f_i* = inf_x f_i(x), shape (n,) (a property of ``minima``).
      f_star: f* = inf_x f(x), shape () (a property of ``minima``).
      x_star: a minimiser of f, shape (d,) (a property of ``minima``).
      oracle: the stochastic gradient oracle g_i(x; xi) (Assumption 2).
      grad_fn: optional closed-form ``grad_fn(params_i, x) -> grad f_i(x)``; ``jax.grad`` if None.
      name: a label used in reports.
      certified: True when f_i*, f*, x* are the infima and a minimiser (closed forms or a
        numerical minimisation trusted to float64 precision); False when they are only the
        best values a local search found (a nonconvex learning problem): upper bounds on the
        infima, so f(x) - f* may be negative.
      pooled: optional, an :class:`AbstractPooled` whose ``value_and_grad(x)`` gives
        (f(x), grad f(x)) in one pass over all clients' data (a learning problem's rows
        without padding); used by :meth:`value_and_grad` and by the records of a run.

    Built as ``Problem(loss, params, local_minima, f_star, x_star, oracle, ...)`` with the
    three arrays, or with ``minima=`` in their place; arrays given with ``minima`` replace
    its values (``dataclasses.replace(problem, f_star=...)``).
    """

    loss: Callable[[PyTree, Array], Array] = eqx.field(static=True)
    params: PyTree
    minima: AbstractMinima
    oracle: AbstractOracle
    grad_fn: Optional[Callable[[PyTree, Array], Array]] = eqx.field(static=True, default=None)
    name: str = eqx.field(static=True, default="problem")
    certified: bool = eqx.field(static=True, default=True)
    pooled: Optional[AbstractPooled] = None

    def __init__(self, loss, params, local_minima=None, f_star=None, x_star=None, oracle=None,
                 grad_fn=None, name: str = "problem", certified: bool = True, pooled=None, *,
                 minima: Optional[AbstractMinima] = None):
        require_x64("a Problem (f*, x*, the clients' f_i* in float64)")
        given = (local_minima, f_star, x_star)
        if minima is None:
            if any(v is None for v in given):
                raise ValueError("a Problem needs local_minima, f_star and x_star (or minima=)")
            minima = Minima(*given)
        elif any(v is not None for v in given):  # new values of some (dataclasses.replace)
            known = _known(minima)
            minima = Minima(*(old if v is None else v for v, old in zip(
                given, (known.local_minima, known.f_star, known.x_star))))
        self.loss = loss
        self.params = params
        self.minima = minima
        self.oracle = oracle
        self.grad_fn = grad_fn
        self.name = name
        self.certified = certified
        self.pooled = pooled

    def __check_init__(self):
        if not callable(self.loss):
            raise ValueError(f"Problem.loss must be a function loss(params_i, x) -> f_i(x), "
                             f"got {self.loss!r}")
        if not isinstance(self.oracle, AbstractOracle):
            raise ValueError(f"Problem.oracle must be a fedjax_abc.AbstractOracle, got "
                             f"{self.oracle!r}")
        if self.grad_fn is not None and not callable(self.grad_fn):
            raise ValueError(f"Problem.grad_fn must be a function or None, got {self.grad_fn!r}")
        if not isinstance(self.minima, AbstractMinima):
            raise ValueError(f"Problem.minima must be a Minima or DeferredMinima, got "
                             f"{type(self.minima).__name__}")
        if self.pooled is not None:
            if not isinstance(self.pooled, AbstractPooled):
                raise ValueError(f"Problem.pooled must be an AbstractPooled or None, got "
                                 f"{type(self.pooled).__name__}")
            method(self.pooled, "check_matches")(self.params)
        leaves = jax.tree_util.tree_leaves(self.params)
        if leaves and all(np.ndim(a) >= 1 for a in leaves) and not self.minima.deferred:
            n = int(np.shape(leaves[0])[0])  # else refused when run
            if np.shape(self.minima.local_minima) != (n,):
                raise ValueError(f"Problem.local_minima must have shape (n={n},) (one f_i* per "
                                 f"client), got {np.shape(self.minima.local_minima)}")

    @property
    def local_minima(self) -> Float[Array, " n"]:
        """f_i* = inf_x f_i(x), shape (n,) (computed now where they are deferred)."""
        return _known(self.minima).local_minima

    @property
    def f_star(self) -> Float[Array, ""]:
        """f* = inf_x f(x), shape () (computed now where it is deferred)."""
        return _known(self.minima).f_star

    @property
    def x_star(self) -> Float[Array, " d"]:
        """A minimiser x* of f, shape (d,) (computed now where it is deferred)."""
        return _known(self.minima).x_star

    def solved(self) -> "Problem":
        """This problem with its f_i*, f*, x* as arrays (computed now where deferred)."""
        if not self.minima.deferred:
            return self
        return _copy(self, type(self), dict(minima=_known(self.minima)))

    @property
    def num_clients(self) -> int:
        return int(jax.tree_util.tree_leaves(self.params)[0].shape[0])

    @property
    def dim(self) -> int:
        return self.minima.dim

    @property
    def sigma_f_star(self) -> Array:
        """sigma_f* = f* - (1/n) sum_i f_i* (eq. 11)."""
        return self.f_star - jnp.mean(self.local_minima)

    def client(self, i) -> Client:
        """Client i: its parameters, f_i* and index, 0 <= i < n (i may be traced, and is then
        taken as in range)."""
        if isinstance(i, (int, np.integer)) and not 0 <= i < self.num_clients:
            raise ValueError(f"client index {i} is outside 0..{self.num_clients - 1}")
        params_i = jax.tree_util.tree_map(lambda a: _row(a, i), self.params)
        return Client(params_i, _row(self.local_minima, i), jnp.asarray(i, jnp.int32))

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
        """(f(x), grad f(x)) in one pass over the clients (over ``pooled`` data if given)."""
        if self.pooled is not None:
            return self.pooled.value_and_grad(x)
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
        """The same problem with every floating array leaf (oracle included) cast to dtype,
        and deferred f_i*, f*, x* given in dtype when computed."""
        cast = cast_floating(self, dtype)
        if not self.minima.deferred or self.minima.dtype == jnp.dtype(dtype).name:
            return cast
        return _copy(cast, type(cast), dict(minima=dataclasses.replace(
            self.minima, dtype=jnp.dtype(dtype).name)))


def _known(minima: AbstractMinima) -> Minima:
    """``minima``'s values (computed now where deferred), without binding a method of a
    module for arrays that are there (the simulator reads them on every call)."""
    return method(minima, "known")() if minima.deferred else minima


class _ZeroMinima(Problem):
    """A :class:`Problem` whose f_i* are all exactly +0, as found on the host when a run was
    checked (:func:`with_constant_zero_minima`): client i's f_i* is then the constant 0.

    An oracle's f_i(x) - f_i* then compiles to f_i(x), bit for bit the same value, without a
    per-round gather of the f_i* and a load of them at every local step: 8% of problem
    (27)'s ``gather`` mode in a native loop (``use_cpu_cores``'s default on several
    devices). The simulator uses it on several CPU devices only, which is where loops are
    native by default (it does not read the XLA flags again): run op by op, the lighter step
    crosses XLA:CPU's threshold for splitting an operation over its threads (more arithmetic
    than bytes), and problem (27)'s float32 ``gather`` mode ran 1.2x-1.4x slower, split at
    every local step. Private to the simulator: only its own copy of a problem is one, so no later
    change of the leaves can leave the constant stale.
    """

    def client(self, i) -> Client:  # the unused read of f_i* is dropped when traced
        return super().client(i)._replace(local_min=jnp.zeros((), self.local_minima.dtype))


def with_constant_zero_minima(problem: Problem, **changes) -> Problem:
    """``problem`` with its f_i* a compile-time 0 where they are all +0 (concrete values);
    otherwise ``problem`` itself. A subclass of :class:`Problem` keeps its own ``client``.
    ``changes``: new values of other fields, as ``dataclasses.replace`` takes them (one
    construction instead of two), new ``minima`` among them."""
    minima = changes.get("minima", problem.minima)
    if type(problem) is Problem and not minima.deferred \
            and not isinstance(minima.local_minima, jax.core.Tracer):
        minima = np.asarray(minima.local_minima)
        if not (np.any(minima != 0) or np.any(np.signbit(minima))):  # -0.0: a zero's sign
            return _copy(problem, _ZeroMinima, changes)
    return _copy(problem, type(problem), changes) if changes else problem


def with_placeholder_minima(problem: Problem) -> Problem:
    """``problem`` with deferred f_i*, f*, x* replaced by zeros of their shapes and dtype (a
    copy that runs and traces without computing them: for a run whose steps do not read
    f_i*, and which forms its gap from f(x) when it is read); otherwise ``problem``."""
    if not problem.minima.deferred:
        return problem
    return _copy(problem, type(problem), dict(minima=problem.minima.placeholder()))


def renamed(problem: Problem, name: str) -> Problem:
    """``problem`` under another name (a static label), its values as they are: no check or
    solve runs again, so it can be made whatever JAX's settings are now."""
    return _copy(problem, type(problem), dict(name=name))


def _copy(problem: Problem, cls: type, changes: dict) -> Problem:
    """``problem`` as a ``cls`` with ``changes`` to its fields, built as JAX unflattens a
    module (its fields set, no checks run): for the simulator's copies of a checked problem,
    whose changes (its name, the same f_i*) need no check, at a fraction of a construction's
    cost per call."""
    copy = object.__new__(cls)
    for f in dataclasses.fields(problem):
        object.__setattr__(copy, f.name, changes.get(f.name, object.__getattribute__(
            problem, f.name)))
    return copy


def cast_floating(tree, dtype):
    """``tree`` with every floating array leaf cast to ``dtype`` (a JAX array already of that
    dtype, strongly typed, is kept as it is). A NumPy scalar (a hyperparameter) is cast on
    the host and passed with each compiled call, which costs less than a copy to the device
    made here; other NumPy arrays become JAX arrays, copied to the device once."""
    dtype = jnp.dtype(dtype)

    def cast(leaf):
        if isinstance(leaf, (jax.Array, np.ndarray)) and jnp.issubdtype(leaf.dtype, jnp.floating):
            if isinstance(leaf, jax.Array) and leaf.dtype == dtype and not leaf.weak_type:
                return leaf
            if isinstance(leaf, np.ndarray) and leaf.ndim == 0:
                return leaf.astype(dtype)
            return jnp.asarray(leaf, dtype)
        return leaf

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    cast_leaves = [cast(leaf) for leaf in leaves]
    if all(a is b for a, b in zip(cast_leaves, leaves)):
        return tree  # nothing to cast: the same tree, not a copy of it
    return treedef.unflatten(cast_leaves)


_RTOL = 1e-9  # relative tolerance of the checks that the given f_i*, f*, x* fit the loss


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def _check_loss(loss, params, dim: int) -> None:
    """Raises ValueError unless ``loss(params_i, x)`` traces to a floating scalar for x in R^d."""
    if not callable(loss):
        raise ValueError(f"loss must be a function loss(params_i, x), got {type(loss).__name__}")
    p0 = jax.tree_util.tree_map(lambda a: a[0], params)
    x = jax.ShapeDtypeStruct((dim,), jnp.float64)
    try:
        out = jax.eval_shape(loss, p0, x)
    except Exception as err:  # noqa: BLE001 - any failure of user code is reported in one line
        raise ValueError(f"loss {_name(loss)} raised {_first_line(err)} when traced with x of "
                         f"shape ({dim},) (it must be a JAX function of x)") from None
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape != () or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        what = type(out).__name__ if shape is None else f"shape {shape} dtype {dtype}"
        raise ValueError(f"loss {_name(loss)} must return a floating scalar for x of shape "
                         f"({dim},), it returned {what}")


def _given(name: str, value, shape: tuple[int, ...]):
    """A given f_i*, f* or x* as a float64 array of ``shape`` (None stays None)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    # x_star of a 1-D problem may be a scalar; f_star may be a one-element array
    if arr.shape != shape and not (arr.size == 1 and np.prod(shape) == 1 and arr.ndim <= 1):
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    return arr.reshape(shape)


def _value_and_grad64(fn):
    """``(p, x) -> (fn(p, x), grad_x fn(p, x))`` in float64 NumPy, for SciPy; falls back to
    ``(p, x) -> fn(p, x)`` (finite differences) if ``fn`` cannot be differentiated."""
    vg = jax.jit(jax.value_and_grad(lambda p, x: fn(p, jnp.asarray(x, jnp.float64)), argnums=1))
    f = jax.jit(lambda p, x: fn(p, jnp.asarray(x, jnp.float64)))
    state = {"grad": True}

    def call(p, x):
        if state["grad"]:
            try:
                v, g = vg(p, x)
                return float(v), np.asarray(g, np.float64)
            except Exception:  # noqa: BLE001 - e.g. reverse mode of a while loop
                state["grad"] = False
        return float(f(p, x))

    return call


def _check_search(x: np.ndarray, fx: float, what: str, give: str, box) -> None:
    """Raises ValueError if a numerical minimiser is not finite or lies on the box's edge."""
    lo, hi = box
    if x is None or not np.isfinite(fx) or not np.all(np.isfinite(x)):
        raise ValueError(f"the numerical minimisation of {what} on search_box {tuple(box)} found "
                         "no point where the loss is finite")
    edge = 1e-6 * (hi - lo)
    if np.any((x <= lo + edge) | (x >= hi - edge)):
        xs = np.array2string(np.asarray(x), precision=6, threshold=6)
        raise ValueError(f"the minimiser of {what} found numerically is at the edge of search_box "
                         f"{tuple(box)} (x = {xs}, {what} = {fx:.6g}): {what} may be unbounded "
                         f"below or its minimum outside the box; give a larger search_box or "
                         f"{give}")


def _check_consistent(values, local_minima, f_star: float, x_star, found, given) -> None:
    """Raises ValueError if f_i*, f*, x* contradict the loss at x* or at the points searched.

    values(x) -> (f_1(x), ..., f_n(x)); ``given`` names what the user gave. No point known (x*
    and every numerical minimiser or descent) may have f below a given f* or f_i below a
    given f_i*; f(x*) = f* and f* >= (1/n) sum_i f_i* must hold, all to a relative 1e-9.
    """
    def tol(v):
        return _RTOL * np.maximum(1.0, np.abs(v))

    def num(v):
        return repr(float(v))

    how = "given" if "x_star" in given else "found numerically"
    fx = values(x_star)
    if not np.all(np.isfinite(fx)):
        raise ValueError(f"the loss is not finite at x_star = {x_star.tolist()} ({how}): "
                         f"f_i = {fx.tolist()}")
    for x in [x_star] + list(found):
        fi, where = values(x), np.asarray(x).tolist()
        if "f_star" in given and fi.mean() < f_star - tol(f_star):
            raise ValueError(f"f_star = {num(f_star)} (given) is above f(x) = {num(fi.mean())} "
                             f"at x = {where}: f* must be the infimum of f")
        low = fi < local_minima - tol(local_minima)
        if "local_minima" in given and np.any(low):
            i = int(np.argmax(low))
            raise ValueError(f"local_minima[{i}] = {num(local_minima[i])} (given) is above "
                             f"f_{i}(x) = {num(fi[i])} at x = {where}: f_{i}* must be the "
                             f"infimum of f_{i}")
    if abs(fx.mean() - f_star) > tol(f_star):
        how_f = "given" if "f_star" in given else "found numerically"
        raise ValueError(f"f(x_star) = {num(fx.mean())} (x_star {how}) differs from f_star = "
                         f"{num(f_star)} ({how_f}): x_star must be a minimiser, f(x_star) = f_star")
    if f_star < local_minima.mean() - tol(f_star):
        raise ValueError(f"f_star = {num(f_star)} is below the mean of local_minima, "
                         f"{num(local_minima.mean())}: f* >= (1/n) sum_i f_i* must hold")


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

    Nothing wrong is returned silently: a numerical minimiser on the edge of the box (f
    unbounded below, or its minimum outside the box) is an error, and so are given values
    that the loss contradicts: f(x*) != f*, or a point (a numerical minimiser, or a local
    descent from x*) where f falls below a given f* or f_i below a given f_i*.

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

    Raises:
      ValueError: in one line, naming what is wrong: the loss does not trace to a floating
        scalar, a given value has the wrong shape or is not finite, a minimiser lies on the
        edge of ``search_box``, or the given values contradict the loss.

    Example:
      >>> import jax.numpy as jnp, fedjax_abc as fa
      >>> loss = lambda c, x: 0.5 * jnp.sum((x - c) ** 2)
      >>> p = fa.make_problem(loss, jnp.array([[0.0], [2.0]]), fa.GaussianOracle(1.0, 0.0))
      >>> round(float(p.f_star), 6), round(float(p.sigma_f_star), 6)
      (0.5, 0.5)
    """
    require_x64("make_problem (f*, x* and the f_i* are found in float64)")
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise ValueError("params must have at least one array leaf with leading axis n")
    n = int(jnp.shape(leaves[0])[0]) if jnp.ndim(leaves[0]) else 0
    if n < 1 or any(jnp.ndim(a) == 0 or jnp.shape(a)[0] != n for a in leaves):
        raise ValueError("every leaf of params must have the same leading axis n >= 1 (clients)")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim (d={dim!r}) must be an integer >= 1")
    if not callable(loss):
        raise ValueError(f"loss must be a function loss(params_i, x) -> f_i(x), got {loss!r}")
    if not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle (e.g. "
                         f"fa.GaussianOracle(1.0, 0.0)), got {oracle!r}")
    lo, hi = search_box
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"search_box {search_box} must be a finite interval lo < hi")
    params = jax.tree_util.tree_map(jnp.asarray, params)
    _check_loss(loss, params, dim)
    local_minima = _given("local_minima", local_minima, (n,))
    f_star = _given("f_star", f_star, ())
    x_star = _given("x_star", x_star, (dim,))
    f64 = jax.jit(lambda p, x: loss(p, jnp.asarray(x, jnp.float64)))
    values64 = jax.jit(
        lambda x: jax.vmap(loss, in_axes=(0, None))(params, jnp.asarray(x, jnp.float64)))

    def client_fn(i):
        p_i = jax.tree_util.tree_map(lambda a: a[i], params)
        return lambda x: float(f64(p_i, np.atleast_1d(x)))

    given = [label for label, v in (("local_minima", local_minima), ("f_star", f_star),
                                    ("x_star", x_star)) if v is not None]
    found = []  # every numerical minimiser: no point may have f < f* or f_i < f_i*
    if local_minima is None:
        local_minima = []
        for i in range(n):
            xs_i, fs_i = _minimize.global_minimum(client_fn(i), dim, lo, hi)
            _check_search(xs_i, fs_i, f"f_{i}", "local_minima", search_box)
            local_minima.append(fs_i)
            found.append(xs_i)
    if f_star is None or x_star is None:
        vmapped = jax.jit(
            lambda x: jnp.mean(jax.vmap(loss, in_axes=(0, None))(params, jnp.asarray(x, jnp.float64)))
        )
        xs, fs = _minimize.global_minimum(lambda x: float(vmapped(np.atleast_1d(x))), dim, lo, hi)
        _check_search(xs, fs, "f", "f_star and x_star", search_box)
        found.append(xs)
        x_star = xs if x_star is None else x_star
        f_star = fs if f_star is None else f_star
    x_star = np.asarray(x_star, np.float64).reshape(dim)
    # a given infimum is tested by a local descent from x*: f_i (f) must not fall below it
    if "local_minima" in given:
        vg = _value_and_grad64(loss)
        for i in range(n):
            p_i = jax.tree_util.tree_map(lambda a, i=i: a[i], params)
            found.append(_minimize.descend(lambda x, p_i=p_i: vg(p_i, x), x_star)[0])
    if "f_star" in given:
        vg = _value_and_grad64(lambda p, x: jnp.mean(jax.vmap(loss, in_axes=(0, None))(p, x)))
        found.append(_minimize.descend(lambda x: vg(params, x), x_star)[0])
    _check_consistent(lambda x: np.asarray(values64(np.atleast_1d(x)), np.float64),
                      np.asarray(local_minima, np.float64).reshape(n), float(f_star),
                      x_star, found, given)
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
