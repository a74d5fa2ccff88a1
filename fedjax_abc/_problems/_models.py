"""Models whose parameters are the problem's x, and the data a learning problem's clients hold.

A learning problem's x in R^d is a model's parameters flattened (``ravel_pytree``); each
model (an :class:`AbstractModel`) says how to turn x into logits for a batch of features,
and ``unravel`` gives the parameters back as a pytree:

- :class:`SoftmaxRegression`: logits = features @ W + b, x = (W (p, K), b (K,)) flattened,
  d = (p + 1) K; convex cross-entropy.
- :class:`LogisticRegression`: one logit features @ w + b for labels in {0, 1}, d = p + 1;
  convex logistic loss.
- :class:`MLP`: an ``equinox.nn.MLP`` (tanh, so smooth), x its array leaves flattened;
  nonconvex.
- :class:`EquinoxModel`: any ``equinox.Module`` mapping a row of features to K logits, with
  the user's loss ``loss(module, X, y)`` (a mean over rows); x its floating array leaves
  flattened (``fedjax_abc.problems.from_model``).

:class:`ClientData` holds every client's (X_i, y_i) padded to M = max_i m_i rows with the
count m_i, the client's weight w_i in the global objective and the l2 coefficient; its
leaves have leading axis n (the Problem's ``params``). :class:`DatasetLoss` is the loss
``loss(params_i, x)`` of a client:

    f_i(x) = w_i ( (1/m_i) sum_{j < m_i} ell(x; X_ij, y_ij) + (l2 / 2) ||x||^2 ),

where ell is the model's per-sample loss (cross-entropy). The same loss on a mini-batch
(:meth:`ClientData.take`) is the mini-batch oracle's estimate.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, Callable, ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, Int

from fedjax_abc._problems._args import check_count
from fedjax_abc._problems._problem import AbstractPooled

__all__ = ["AbstractModel", "ClientData", "DatasetGrad", "DatasetLoss", "EquinoxModel",
           "LogisticRegression", "MLP", "PooledData", "SoftmaxRegression", "cross_entropy"]


class ClientData(eqx.Module):
    """The clients' data as a problem's per-client parameters (one client: no leading n).

    Attributes:
      features: (n, M, p) features, rows m_i .. M - 1 of client i zero padding.
      labels: (n, M) int32 labels (padding 0).
      count: (n,) int32, m_i >= 1.
      weight: (n,) w_i, the client's weight: f = (1/n) sum_i f_i with f_i carrying w_i
        (1 for the paper's uniform weighting, n m_i / m to weight by samples).
      l2: (n,) the l2 coefficient (the same for all clients).
    """

    features: Float[Array, "n M p"]
    labels: Int[Array, "n M"]
    count: Int[Array, " n"]
    weight: Float[Array, " n"]
    l2: Float[Array, " n"]

    def take(self, rows: Array) -> "ClientData":
        """One client's mini-batch: its rows ``rows`` (b,), counted as b samples."""
        return ClientData(self.features[rows], self.labels[rows],
                          jnp.asarray(rows.shape[0], self.count.dtype), self.weight, self.l2)


def _fixed_reduce(op, a: Array, axis: int) -> Array:
    """``op``-reduce along ``axis`` in index order, as explicit element-wise ops up to 64 terms.

    XLA may hand a reduction to a library kernel whose order of operations depends on the
    size of the whole batch (the trials beside it); element-wise ops keep a trial's numbers
    its own. Longer axes use ``jnp.sum`` / ``jnp.max``.
    """
    size = a.shape[axis]
    if size > 64:
        return jnp.sum(a, axis) if op is jnp.add else jnp.max(a, axis)
    total = jax.lax.index_in_dim(a, 0, axis, keepdims=False)
    for j in range(1, size):
        total = op(total, jax.lax.index_in_dim(a, j, axis, keepdims=False))
    return total


def _softmax(logits: Array) -> Array:
    """softmax over the last axis with the max and the sum in a fixed order (``_fixed_reduce``)."""
    z = logits - _fixed_reduce(jnp.maximum, logits, -1)[..., None]
    e = jnp.exp(z)
    return e / _fixed_reduce(jnp.add, e, -1)[..., None]


def _has_closed_form(model) -> bool:
    """Whether the model gives its gradients in closed form (``weighted_grad``)."""
    return bool(model.closed_form)


def _cross_entropy(logits: Array, labels: Array) -> Array:
    """-log softmax(logits)[label] per row; the sums over the classes in a fixed order."""
    top = jax.lax.stop_gradient(_fixed_reduce(jnp.maximum, logits, -1))
    lse = top + jnp.log(_fixed_reduce(jnp.add, jnp.exp(logits - top[..., None]), -1))
    # a one-hot product, not a gather: its gradient is no scatter (faster to compile and run)
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    return lse - _fixed_reduce(jnp.add, logits * onehot, -1)


class AbstractModel(abc.ABC):
    """What a learning problem needs of its model.

    Attributes (of every model):
      num_features: p, the features of a row. num_classes: K.
      convex: whether every per-sample loss is convex in x (then f_i* and f* are found by
        Newton's method and certified; otherwise by L-BFGS, the best value found).
      closed_form: whether ``weighted_grad`` and ``hessian`` are closed forms (otherwise
        autodiff of ``sample_losses``).
      curvature: c such that a row's loss Hessian is at most c (x~ x~^T) (x) I in the
        Loewner order (x~ the row with a 1 appended): a bound on the smoothness from the data
        alone (``fa.theory.smoothness_bound``); None where no such bound is known.
    """

    num_features: int
    num_classes: int
    convex: bool
    closed_form: ClassVar[bool] = False
    curvature: ClassVar[Optional[float]] = None

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """d, the length of x."""

    @abc.abstractmethod
    def unravel(self, x: Array):
        """x -> the model's parameters (a pytree, or the model itself)."""

    @abc.abstractmethod
    def init(self, key) -> Array:
        """A starting point x0 (d,), float64."""

    @abc.abstractmethod
    def logits(self, x: Array, features: Array) -> Array:
        """Logits (rows, K) (logistic regression: (rows,)) of features (rows, p)."""

    @abc.abstractmethod
    def sample_losses(self, x: Array, features: Array, labels: Array) -> Array:
        """The loss of every row, shape (rows,)."""

    def predict(self, x: Array, features: Array) -> Array:
        """The predicted class of every row."""
        return jnp.argmax(self.logits(x, features), axis=-1)

    def weighted_grad(self, x: Array, features: Array, labels: Array, coef: Array) -> Array:
        """sum_j c_j grad ell_j(x), (d,) (autodiff unless ``closed_form``)."""
        return jax.grad(lambda z: jnp.sum(coef * self.sample_losses(z, features, labels)))(x)

    def hessian(self, x: Array, features: Array, labels: Array, coef: Array) -> Array:
        """sum_j c_j Hess ell_j(x), (d, d) (autodiff unless ``closed_form``)."""
        return jax.hessian(lambda z: jnp.sum(coef * self.sample_losses(z, features, labels)))(x)


@dataclasses.dataclass(frozen=True)
class SoftmaxRegression(AbstractModel):
    """Multinomial logistic regression: logits = X W + b, x = ravel((W, b)), d = (p + 1) K.

    Attributes:
      num_features: p. num_classes: K >= 2.
    """

    num_features: int
    num_classes: int
    convex: ClassVar[bool] = True
    closed_form: ClassVar[bool] = True
    curvature: ClassVar[Optional[float]] = 0.5  # the softmax's Jacobian is at most I / 2

    def __post_init__(self):
        check_count("SoftmaxRegression num_features (p)", self.num_features)
        check_count("SoftmaxRegression num_classes (K)", self.num_classes, low=2)

    @property
    def dim(self) -> int:
        return (self.num_features + 1) * self.num_classes

    def unravel(self, x: Array):
        """x -> (W (p, K), b (K,))."""
        p, K = self.num_features, self.num_classes
        return x[: p * K].reshape(p, K), x[p * K:]

    def init(self, key) -> Array:
        """The starting point 0 (the loss is convex; the key is unused)."""
        return jnp.zeros((self.dim,), jnp.float64)

    def logits(self, x: Array, features: Array) -> Array:
        W, b = self.unravel(x)
        return features @ W.astype(features.dtype) + b.astype(features.dtype)

    def sample_losses(self, x: Array, features: Array, labels: Array) -> Array:
        """Cross-entropy of every row, shape (rows,)."""
        return _cross_entropy(self.logits(x, features), labels)

    def predict(self, x: Array, features: Array) -> Array:
        return jnp.argmax(self.logits(x, features), axis=-1)

    def weighted_grad(self, x: Array, features: Array, labels: Array, coef: Array) -> Array:
        """sum_j c_j grad ell_j(x), (d,), in closed form: r_j = c_j (softmax(z_j) - e_{y_j}),
        grad_W = X^T r, grad_b = sum_j r_j."""
        K = self.num_classes
        P = _softmax(self.logits(x, features))
        onehot = (labels[:, None] == jnp.arange(K)).astype(P.dtype)
        r = coef.astype(P.dtype)[:, None] * (P - onehot)
        return jnp.concatenate([(features.T @ r).reshape(-1), _fixed_reduce(jnp.add, r, 0)])

    def hessian(self, x: Array, features: Array, labels: Array, coef: Array) -> Array:
        """sum_j c_j Hess ell_j(x), (d, d), in closed form, for rows (M, p) with weights c (M,).

        With X~ = [X, 1] and P = softmax(logits), Hess ell_j = (diag(P_j) - P_j P_j^T) kron
        X~_j X~_j^T in the order of x = ravel([[W], [b]]). Accumulated over blocks of rows
        (memory: a block times d).
        """
        K = self.num_classes
        rows = features.shape[0]
        block = _block(rows)
        Xt = jnp.concatenate([features, jnp.ones((rows, 1), features.dtype)], axis=1)
        P = jax.nn.softmax(self.logits(x, features), axis=-1)

        def add(H, j):
            Xb = jax.lax.dynamic_slice_in_dim(Xt, j * block, block)
            Pb = jax.lax.dynamic_slice_in_dim(P, j * block, block)
            cb = jax.lax.dynamic_slice_in_dim(coef, j * block, block)
            diag = jnp.einsum("ja,jk,jb->akb", Xb, cb[:, None] * Pb, Xb)  # (p+1, K, p+1)
            V = (Xb[:, :, None] * Pb[:, None, :]).reshape(block, self.dim)
            full = diag[:, :, :, None] * jnp.eye(K, dtype=diag.dtype)[None, :, None, :]
            return H + full.reshape(self.dim, self.dim) - V.T @ (cb[:, None] * V), None

        H, _ = jax.lax.scan(add, jnp.zeros((self.dim, self.dim), Xt.dtype),
                            jnp.arange(rows // block))
        return H


def _block(rows: int) -> int:
    """Rows per block of a Hessian accumulation: a divisor of ``rows``, at most 512."""
    for b in range(min(rows, 512), 0, -1):
        if rows % b == 0:
            return b
    return 1


@dataclasses.dataclass(frozen=True)
class LogisticRegression(AbstractModel):
    """Binary logistic regression: logit = X w + b, labels in {0, 1}, x = (w, b), d = p + 1.

    Attributes:
      num_features: p.
    """

    num_features: int
    num_classes: ClassVar[int] = 2
    convex: ClassVar[bool] = True
    closed_form: ClassVar[bool] = True
    curvature: ClassVar[Optional[float]] = 0.25  # sigma' <= 1/4

    def __post_init__(self):
        check_count("LogisticRegression num_features (p)", self.num_features)

    @property
    def dim(self) -> int:
        return self.num_features + 1

    def unravel(self, x: Array):
        """x -> (w (p,), b ())."""
        return x[:-1], x[-1]

    def init(self, key) -> Array:
        return jnp.zeros((self.dim,), jnp.float64)

    def logits(self, x: Array, features: Array) -> Array:
        w, b = self.unravel(x)
        return features @ w.astype(features.dtype) + b.astype(features.dtype)

    def sample_losses(self, x: Array, features: Array, labels: Array) -> Array:
        """log(1 + e^z) - y z per row (the cross-entropy of sigmoid(z))."""
        z = self.logits(x, features)
        return jax.nn.softplus(z) - labels.astype(z.dtype) * z

    def predict(self, x: Array, features: Array) -> Array:
        return (self.logits(x, features) > 0).astype(jnp.int32)

    def weighted_grad(self, x: Array, features: Array, labels: Array, coef: Array) -> Array:
        """sum_j c_j grad ell_j(x), (d,): r_j = c_j (sigmoid(z_j) - y_j), grad = (X^T r, sum r)."""
        z = self.logits(x, features)
        r = coef.astype(z.dtype) * (jax.nn.sigmoid(z) - labels.astype(z.dtype))
        return jnp.concatenate([features.T @ r, _fixed_reduce(jnp.add, r, 0)[None]])

    def hessian(self, x: Array, features: Array, labels: Array, coef: Array) -> Array:
        """sum_j c_j sigma_j (1 - sigma_j) X~_j X~_j^T, (d, d), X~ = [X, 1]."""
        rows = features.shape[0]
        Xt = jnp.concatenate([features, jnp.ones((rows, 1), features.dtype)], axis=1)
        s = jax.nn.sigmoid(self.logits(x, features))
        return Xt.T @ ((coef * s * (1 - s))[:, None] * Xt)


def _mlp_structure(p: int, K: int, width: int, depth: int):
    """(unravel, static part) of an equinox MLP of this shape, built abstractly
    (``filter_eval_shape``: no arrays are made)."""
    net = eqx.filter_eval_shape(eqx.nn.MLP, p, K, width, depth, activation=jax.nn.tanh,
                                key=jax.random.key(0))
    is_leaf = lambda a: isinstance(a, jax.ShapeDtypeStruct)  # noqa: E731
    params, static = eqx.partition(net, is_leaf)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    shapes = tuple(leaf.shape for leaf in leaves)
    return (lambda x: _unflatten(x, treedef, shapes)), static


def _unflatten(x: Array, treedef, shapes) -> Any:
    """The pytree of ``treedef`` whose leaves of ``shapes`` are x's consecutive pieces, in x's
    dtype (jax.flatten_util's unravel would cast to the leaves')."""
    sizes = [math.prod(s) for s in shapes]
    offsets = [sum(sizes[:j]) for j in range(len(sizes))]
    return jax.tree_util.tree_unflatten(
        treedef, [x[o: o + n].reshape(s) for o, n, s in zip(offsets, sizes, shapes)])


def _mlp_dim(p: int, K: int, width: int, depth: int) -> int:
    """The parameters of ``equinox.nn.MLP(p, K, width, depth)``: its linear layers' weights
    and biases."""
    sizes = [p, K] if depth == 0 else [p] + [width] * depth + [K]
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


@dataclasses.dataclass(frozen=True)
class MLP(AbstractModel):
    """A tanh multilayer perceptron (``equinox.nn.MLP``), x its parameters flattened.

    Attributes:
      num_features: p. num_classes: K. width: hidden units per layer. depth: hidden layers.
    """

    num_features: int
    num_classes: int
    width: int = 32
    depth: int = 1
    convex: ClassVar[bool] = False

    def __post_init__(self):
        check_count("MLP num_features (p)", self.num_features)
        check_count("MLP num_classes (K)", self.num_classes, low=2)
        check_count("MLP width", self.width)
        check_count("MLP depth", self.depth, low=0)

    @property
    def dim(self) -> int:
        return _mlp_dim(self.num_features, self.num_classes, self.width, self.depth)

    def unravel(self, x: Array):
        """x -> the ``equinox.nn.MLP`` with these parameters."""
        unravel, static = _mlp_structure(self.num_features, self.num_classes, self.width,
                                         self.depth)
        return eqx.combine(unravel(x), static)

    def init(self, key) -> Array:
        """Equinox's default initialisation drawn with ``key``, flattened (float64)."""
        net = eqx.nn.MLP(self.num_features, self.num_classes, self.width, self.depth,
                         activation=jax.nn.tanh, key=key)
        flat, _ = ravel_pytree(eqx.filter(net, eqx.is_array))
        return flat.astype(jnp.float64)

    def logits(self, x: Array, features: Array) -> Array:
        net = self.unravel(x.astype(features.dtype))
        return jax.vmap(net)(features)

    def sample_losses(self, x: Array, features: Array, labels: Array) -> Array:
        return _cross_entropy(self.logits(x, features), labels)


def cross_entropy(module, features: Array, labels: Array) -> Array:
    """The mean cross-entropy of ``module``'s logits on rows (m, p) with integer labels (m,):
    the loss ``fedjax_abc.problems.from_model`` takes for a classifier."""
    return jnp.mean(_cross_entropy(jax.vmap(module)(features), labels))


class _Buffer:
    """A module's non-floating array (an integer buffer, a mask) held by value in the static
    part: hashed and compared by its bytes, so that the model keys a compiled program as a
    static value must (a JAX array cannot); :func:`_thawed` puts the array back."""

    def __init__(self, a):
        self.array = np.asarray(a)
        self.key = (self.array.dtype.str, self.array.shape, self.array.tobytes())

    def __eq__(self, other):
        return isinstance(other, _Buffer) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _frozen(static):
    """The static part with its arrays held by value (:class:`_Buffer`)."""
    return jax.tree_util.tree_map(lambda a: _Buffer(a) if eqx.is_array(a) else a, static)


def _thawed(static):
    """The static part with :func:`_frozen`'s arrays back as JAX arrays."""
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a.array) if isinstance(a, _Buffer) else a,
                                  static)


def _structure(module):
    """(treedef, shapes, static part) of a module's floating array leaves; the static part
    holds the module's other arrays by value."""
    params, static = eqx.partition(module, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    return treedef, tuple(tuple(a.shape) for a in leaves), _frozen(static)


@dataclasses.dataclass(frozen=True)
class EquinoxModel(AbstractModel):
    """A user's ``equinox.Module`` and loss as a learning problem's model.

    x is the module's floating array leaves flattened in their tree order; the rest of the
    module (its structure, activations, integer buffers) is static, its arrays held by value. ``module(row)`` maps a
    row of p features to K logits (reshape inside it for images); ``loss(module, X, y)`` is
    a mean over the rows of X (the per-row losses the engine needs are its values on single
    rows).

    Attributes:
      static: the module without its floating leaves. treedef, shapes: of those leaves.
      loss: the loss. num_features: p. num_classes: K. convex: declared by the user.
      start: the module's own parameters, flattened (``init``).
    """

    static: Any
    treedef: Any
    shapes: tuple
    loss: Callable
    num_features: int
    num_classes: int
    convex: bool = False
    start: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    @classmethod
    def of(cls, module, loss: Callable, num_features: int, num_classes: int,
           convex: bool = False) -> "EquinoxModel":
        """The model of ``module`` (its parameters as given are ``init``'s point)."""
        treedef, shapes, static = _structure(module)
        leaves = jax.tree_util.tree_leaves(eqx.filter(module, eqx.is_inexact_array))
        start = jnp.concatenate([jnp.ravel(a).astype(jnp.float64) for a in leaves]) if leaves \
            else jnp.zeros((0,), jnp.float64)
        return cls(static, treedef, shapes, loss, int(num_features), int(num_classes),
                   bool(convex), start)

    @property
    def dim(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def unravel(self, x: Array):
        """x -> the equinox module with these parameters (in x's dtype)."""
        return eqx.combine(_unflatten(x, self.treedef, self.shapes), _thawed(self.static))

    def init(self, key) -> Array:
        """The module's own parameters (the key is unused)."""
        return jnp.asarray(self.start, jnp.float64)

    def logits(self, x: Array, features: Array) -> Array:
        return jax.vmap(self.unravel(x.astype(features.dtype)))(features)

    def sample_losses(self, x: Array, features: Array, labels: Array) -> Array:
        module = self.unravel(x.astype(features.dtype))
        return jax.vmap(lambda row, label: self.loss(module, row[None], label[None]))(
            features, labels)


@dataclasses.dataclass(frozen=True)
class DatasetLoss:
    """f_i(x) = w_i ((1/m_i) sum_{j < m_i} ell(x; X_ij, y_ij) + (l2/2) ||x||^2) of one client.

    Called as ``loss(params_i, x)`` with ``params_i`` one client's :class:`ClientData`.
    Hashable by its model, so problems with models of the same shape share compilations.
    """

    model: Any

    def __call__(self, data: ClientData, x: Array) -> Array:
        rows = data.labels.shape[-1]
        losses = self.model.sample_losses(x, data.features, data.labels)
        valid = jnp.arange(rows) < data.count
        # a mini-batch's rows in a fixed order (see _fixed_reduce), a client's many with jnp.sum
        total = _fixed_reduce(jnp.add, jnp.where(valid, losses, 0), 0)
        mean = total / data.count.astype(losses.dtype)
        return data.weight * (mean + 0.5 * data.l2 * jnp.sum(x * x))


def model_of(loss) -> Optional[AbstractModel]:
    """The model a problem's loss carries: a learning problem's (its loss a
    :class:`DatasetLoss`); None for any other loss."""
    return loss.model if isinstance(loss, DatasetLoss) else None


@dataclasses.dataclass(frozen=True)
class DatasetGrad:
    """grad f_i(x) of :class:`DatasetLoss`: closed form where the model has ``weighted_grad``
    (softmax and logistic regression), else ``jax.grad``. Called as ``grad(params_i, x)``.

    The closed form's small sums (a mini-batch's rows, the classes) run in a fixed order,
    so a trial's gradient does not depend on the number of trials computed beside it.
    """

    model: Any

    @property
    def closed_form(self) -> bool:
        """True for softmax and logistic regression, False for autodiff (the MLP)."""
        return _has_closed_form(self.model)

    def __call__(self, data: ClientData, x: Array) -> Array:
        if not self.closed_form:
            return jax.grad(DatasetLoss(self.model), argnums=1)(data, x)
        rows = data.labels.shape[-1]
        count = data.count.astype(x.dtype)
        coef = jnp.where(jnp.arange(rows) < data.count, 1 / count, 0).astype(data.features.dtype)
        g = self.model.weighted_grad(x, data.features, data.labels, coef).astype(x.dtype)
        return data.weight.astype(x.dtype) * (g + data.l2.astype(x.dtype) * x)


class PooledData(AbstractPooled):
    """Every client's rows in one array, for f(x) and grad f(x) in one pass without padding.

    f(x) = (1/n) sum_i f_i(x) = sum_j c_j ell(x; X_j, y_j) + (l2_bar / 2) ||x||^2 with
    c_j = w_i / (n m_i) for row j of client i and l2_bar = l2 (1/n) sum_i w_i. The padded
    per-client arrays cost n max_i m_i rows a pass, these sum_i m_i.

    Attributes:
      model: the model (static).
      features: (m, p), the clients' rows one after another. labels: (m,).
      coef: (m,) c_j. l2: () l2_bar.
    """

    model: Any = eqx.field(static=True)
    features: Float[Array, "m p"]
    labels: Int[Array, " m"]
    coef: Float[Array, " m"]
    l2: Float[Array, ""]

    def check_matches(self, params: ClientData) -> None:
        """ValueError (one line) unless these rows are ``params``' (the padded per-client
        data the local steps read): compared through sums of features, labels, weights and
        l2, so that a problem whose data were changed alone (``eqx.tree_at`` on
        ``params.features``, ``dataclasses.replace(problem, params=...)``) is refused
        rather than recorded from the old rows (and measured against the old data's minima,
        which its solver keeps). Tracers pass unchecked."""
        try:
            ours = [np.asarray(a, np.float64) for a in (self.features, self.labels, self.coef,
                                                        self.l2)]
            theirs = [np.asarray(a, np.float64) for a in (params.features, params.labels,
                                                          params.weight, params.l2,
                                                          params.count)]
        except Exception:  # noqa: BLE001 - tracers: no values to compare
            return
        features, labels, coef, l2 = ours
        pfeatures, plabels, weight, pl2, count = theirs
        same = (features.shape[0] == count.sum()
                and np.isclose(features.sum(), pfeatures.sum(), rtol=1e-9,
                               atol=1e-9 * np.abs(features).sum())
                and labels.sum() == plabels.sum()
                and np.isclose(coef.sum(), weight.mean(), rtol=1e-9)
                and np.isclose(l2, pl2.mean() * weight.mean(), rtol=1e-9, atol=1e-300))
        if not same:
            raise ValueError("the problem's per-client data differ from the pooled rows its "
                             "records read and the data its minima are computed from: build a "
                             "new problem from the new data (fa.problems.softmax_regression, "
                             "learning_problem, ...) instead of changing its params")

    def value_and_grad(self, x: Array):
        """(f(x), grad f(x)), x of shape (d,)."""
        features = self.features.astype(x.dtype)
        coef = self.coef.astype(x.dtype)
        l2 = self.l2.astype(x.dtype)

        def value(x):
            return (jnp.sum(coef * self.model.sample_losses(x, features, self.labels))
                    + 0.5 * l2 * jnp.sum(x * x))

        if not _has_closed_form(self.model):
            return jax.value_and_grad(value)(x)
        g = self.model.weighted_grad(x, features, self.labels, coef) + l2 * x
        return value(x), g.astype(x.dtype)
