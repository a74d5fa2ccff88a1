"""A shared body and personal heads: the parameters split by a boolean mask (FedRep, FedPer).

Coordinates where ``head`` is True are personal: each client keeps its own values as its
client state and never sends them; the other coordinates (the body) are averaged by the
server. :func:`head_mask` builds the mask of a ``from_model`` problem from the paths of the
model's parameters.
"""


from typing import Callable, ClassVar, NamedTuple, Sequence, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._fedavg import ServerState

__all__ = ["AbstractBodyHead", "HeadRun", "check_head", "head_mask", "parameter_paths"]


class HeadRun(NamedTuple):
    """A client's local state through its round: its head h (a (d,) vector whose head
    coordinates count) and how many local steps it has taken."""

    head: Array
    step: Array


def check_head(head) -> np.ndarray:
    """``head`` as a 1-D NumPy boolean mask; ValueError unless it is one with at least one
    shared (False) coordinate. A tracer passes unchecked (returned as it is)."""
    try:
        a = np.asarray(head)
    except Exception:  # a tracer: checked where concrete
        return head
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"head must be a 1-D boolean mask over the d parameters, got shape "
                         f"{a.shape}")
    if a.dtype != np.bool_:
        if not np.issubdtype(a.dtype, np.number) or not np.all((a == 0) | (a == 1)):
            raise ValueError("head must be a boolean mask (True: a personal coordinate)")
        a = a.astype(bool)
    if a.all():
        raise ValueError(f"head marks all {a.size} parameters personal: at least one must be "
                         "shared (the body the server averages)")
    return a


class AbstractBodyHead(AbstractAlgorithm):
    """Clients with a personal head and a shared body (``head``, a mask over the d
    parameters).

    Client i keeps its head h_i (the coordinates where ``head`` is True; its client state
    holds a full (d,) vector, whose head coordinates count; they start at x0's). Its local
    steps start from (body of x_t, h_i), the point z = where(head, h_i, y) at which every
    gradient is taken; the engine's local model y carries the body (its head coordinates
    stay x_t's, so a message transform acts on the body update alone) and the local state
    the head. The client sends y and keeps its new head; the server averages the bodies:
    x_{t+1} = where(head, x_t, sum_i w_i y_i / sum_i w_i). x_t's head coordinates stay x0's
    (the server never sees a head): the records' gap f(x_t) is of that model, and
    ``SimResult.client_loss`` (``record_clients=True``) of each client's own,
    where(head, h_i, x_t) (``personal``). Only participants update their heads.

    A subclass gives ``local_step``: how the Q steps train body and head.
    """

    head: eqx.AbstractVar[Bool[Array, " d"]]

    def init(self, x0):
        _check_size(self.head, x0.shape[-1])
        return ServerState(x0)

    def init_client(self, x0):
        return x0  # h_i: the head coordinates of x0

    def point(self, y: Array, h: Array) -> Array:
        """The client's model: the body of y with the head h."""
        return jnp.where(self.head, h, y)

    def client_init(self, server, client):
        return HeadRun(client, jnp.zeros((), jnp.int32))

    def client_final(self, server, client, y, local, info):
        return y, local.head

    reads_scale: ClassVar[bool] = False

    def server_update(self, server, mean_message, info: RoundInfo):
        return ServerState(jnp.where(self.head, server.x, mean_message))

    def personal(self, server, client, objective):
        return self.point(server.x, client)


def _check_size(head, d: int) -> None:
    if head.shape != (d,):
        raise ValueError(f"head must have shape (d={d},) (one flag per parameter), got "
                         f"{tuple(head.shape)}")


def parameter_paths(module: eqx.Module) -> list[tuple[str, int]]:
    """(path, size) of each floating array leaf of an ``equinox.Module``, in the order
    ``fa.problems.from_model`` flattens them into x (e.g. ``(".layers[1].weight", 20)``).

    Example:
      >>> import equinox as eqx, jax
      >>> parameter_paths(eqx.nn.Linear(2, 3, key=jax.random.key(0)))
      [('.weight', 6), ('.bias', 3)]
    """
    params = eqx.filter(module, eqx.is_inexact_array)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return [(jax.tree_util.keystr(path), int(np.size(leaf))) for path, leaf in leaves]


def head_mask(module: eqx.Module,
              where: Union[Callable, str, Sequence[str]]) -> np.ndarray:
    """The ``head`` mask of FedRep and FedPer for a ``fa.problems.from_model`` problem: True
    on the coordinates of x that belong to the parameters ``where`` names.

    Args:
      module: the ``equinox.Module`` given to ``from_model`` (or the module at any point,
        ``problem.loss.model.unravel(x)``).
      where: a function of the module returning a part of it (a leaf, a submodule, or a
        tuple of them), as for ``eqx.tree_at``, e.g. ``lambda m: m.layers[-1]``; or a path
        prefix of :func:`parameter_paths` (``".layers[2]"``), or several.

    Returns:
      Bool[ndarray, "d"], in x's order (:func:`parameter_paths`).

    Example:
      >>> import equinox as eqx, jax
      >>> mlp = eqx.nn.MLP(2, 3, width_size=4, depth=1, key=jax.random.key(0))
      >>> mask = head_mask(mlp, lambda m: m.layers[-1])  # the last layer: 4 * 3 + 3
      >>> int(mask.sum()), mask.size
      (15, 27)
      >>> bool((head_mask(mlp, ".layers[1]") == mask).all())
      True
    """
    params = eqx.filter(module, eqx.is_inexact_array)
    if callable(where):
        flags = jax.tree_util.tree_map(lambda a: np.zeros(np.shape(a), bool), params)
        try:
            flags = eqx.tree_at(where, flags, replace_fn=lambda part: jax.tree_util.tree_map(
                lambda a: np.ones(np.shape(a), bool), part))
        except Exception as e:  # noqa: BLE001 - a user's function: its error in one line
            raise ValueError(f"where(module) must return parameters of the module: "
                             f"{type(e).__name__}: {e}".splitlines()[0][:200]) from None
        leaves = jax.tree_util.tree_leaves(flags)
        mask = np.concatenate([np.ravel(a) for a in leaves]) if leaves else np.zeros(0, bool)
    else:
        prefixes = (where,) if isinstance(where, str) else tuple(where)
        if not prefixes or not all(isinstance(p, str) for p in prefixes):
            raise ValueError("where must be a function of the module or path prefixes (str)")
        paths = parameter_paths(module)
        unknown = [p for p in prefixes if not any(_under(path, p) for path, _ in paths)]
        if unknown:
            raise ValueError(f"no parameter's path starts with {unknown[0]!r}; the paths are "
                             f"{[p for p, _ in paths][:8]}")
        mask = np.concatenate([np.full(size, any(_under(path, p) for p in prefixes))
                               for path, size in paths])
    return mask


def _under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it (".layers[1]" holds ".layers[1].bias",
    not ".layers[10].bias")."""
    return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")
