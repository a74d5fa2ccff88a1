"""Checks of an algorithm's (and a message transform's) outputs, made while a round is traced.

The engine calls these on the shapes it sees when it traces a round (no arithmetic, and
nothing again once the program is compiled). Each refuses, in one line naming the method,
what the engine would otherwise broadcast into finite garbage or reject from deep inside a
scan:

- ``init`` must return an :class:`~fedjax_abc.algorithms.AbstractServerState` whose model
  ``x`` has the problem's shape (d,) and the run's dtype (:func:`check_server`);
- every leaf of a message must be floating in the run's dtype and of shape () or with the
  model's d as its first axis, and one leaf at least of the latter: a (1,) message, or a
  scalar one, against d = 5 would broadcast (:func:`check_message`);
- ``client_final`` must return a client state, a transform's ``apply`` a state, and
  ``server_update`` a server state of the structure, shapes and dtypes they started with
  (:func:`check_same`); a transform's statistics must be scalars (:func:`check_stats`).
"""

from __future__ import annotations

import jax
import numpy as np

from fedjax_abc._algorithms._base import AbstractServerState

__all__ = ["check_message", "check_same", "check_server", "check_stats"]


def check_server(name: str, server, d: int, dtype, lead: int = 0) -> None:
    """``name``.init's state: an AbstractServerState with x of shape (d,) and ``dtype``
    (after ``lead`` batch axes)."""
    if not isinstance(server, AbstractServerState):
        raise ValueError(f"{name}.init must return a fedjax_abc.algorithms.AbstractServerState "
                         f"(a state with the model x), got {type(server).__name__}")
    shape = tuple(server.x.shape[lead:])
    if shape != (d,) or np.dtype(server.x.dtype) != np.dtype(dtype):
        raise ValueError(f"{name}.init's model x must have shape ({d},) and dtype "
                         f"{np.dtype(dtype)}, got {shape} {np.dtype(server.x.dtype)}")


def check_message(name: str, message, d: int, dtype, lead: int) -> None:
    """Every leaf of ``name``'s messages (after ``lead`` batch axes): ``dtype``, shape () or
    (d, ...); and at least one leaf of the model's shape (d, ...): a message of scalars
    alone (a number where the model belongs) would be broadcast over the coordinates."""
    leaves = jax.tree_util.tree_leaves_with_path(message)
    if leaves and all(tuple(leaf.shape[lead:]) == () for _, leaf in leaves):
        raise ValueError(f"{name}.client_final's message has no leaf of the model's shape "
                         f"(d={d},): its scalars would be broadcast over the coordinates; "
                         "send the local model (or an update of its shape)")
    for path, leaf in leaves:
        where = f"{name}.client_final's message{jax.tree_util.keystr(path)}"
        shape = tuple(leaf.shape[lead:])
        if np.dtype(leaf.dtype) != np.dtype(dtype):
            raise ValueError(f"{where} must have the run's dtype {np.dtype(dtype)}, got "
                             f"{np.dtype(leaf.dtype)}")
        if shape and shape[0] != d:
            raise ValueError(f"{where} must have shape () or (d={d}, ...), got {shape}: it "
                             "would be broadcast against the model")


def _layout(tree) -> tuple:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple((tuple(a.shape), np.dtype(a.dtype)) for a in leaves)


def check_same(what: str, before, after) -> None:
    """``after`` has ``before``'s structure, shapes and dtypes (``what`` made it)."""
    b, a = _layout(before), _layout(after)
    if a[0] != b[0]:
        raise ValueError(f"{what} changes the state's structure: {b[0]} -> {a[0]}")
    for (s0, t0), (s1, t1) in zip(b[1], a[1]):
        if s0 != s1 or t0 != t1:
            raise ValueError(f"{what} changes a state leaf from {s0} {t0} to {s1} {t1}")


def check_stats(name: str, stats, lead: int) -> None:
    """A transform's statistics are a dict of scalars (after ``lead`` batch axes)."""
    if not isinstance(stats, dict):
        raise ValueError(f"{name}.apply must return (update, state, stats) with stats a dict, "
                         f"got {type(stats).__name__}")
    for stat, leaf in stats.items():
        if not isinstance(stat, str) or tuple(np.shape(leaf)[lead:]) != ():
            raise ValueError(f"{name}.apply's statistic {stat!r} must be named by a string and "
                             f"a scalar, got shape {tuple(np.shape(leaf)[lead:])}")
