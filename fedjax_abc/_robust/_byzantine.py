"""Byzantine clients: which clients lie, and the attack they send when sampled.

:class:`Byzantine` is a run's component (``simulate(..., byzantine=...)``): a set of f of
the n clients, the same in every trial (``clients=[...]``) or drawn for each trial from
its counter stream (``f=...``: f distinct clients, uniformly, fixed through the trial's
rounds). A sampled Byzantine client computes its round as an honest one would (its own
state kept as the algorithm keeps it), but the server receives the attack's vector in
place of its message. The draw of a trial's set depends on its key alone, so ``mask`` and
``gather`` agree and a trial does not depend on its neighbours.
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from fedjax_abc._robust._aggregators import check_f_leaf, f_leaf
from fedjax_abc._robust._attacks import AbstractAttack

__all__ = ["Byzantine"]


class Byzantine(eqx.Module):
    """f Byzantine clients and their attack.

    Attributes:
      attack: an :class:`~fedjax_abc.robust.AbstractAttack`.
      clients: the Byzantine clients' indices (an int array leaf), or None where they are
        drawn per trial.
      f: how many clients are Byzantine (an int array leaf: a sweep over f, with the set
        drawn per trial, is one program).

    Example:
      >>> import fedjax_abc as fa
      >>> int(fa.robust.Byzantine(fa.robust.SignFlip(), f=3).f)
      3
      >>> int(fa.robust.Byzantine(fa.robust.SignFlip(), clients=[0, 4]).f)
      2
    """

    attack: AbstractAttack
    clients: Optional[Int[Array, " f"]]
    f: Int[Array, ""]

    def __init__(self, attack: AbstractAttack, *, f: Optional[int] = None, clients=None):
        if not isinstance(attack, AbstractAttack):
            raise ValueError("Byzantine's attack must be a fedjax_abc.robust.AbstractAttack "
                             f"(SignFlip(), ALittleIsEnough(1.5), ...), got {type(attack).__name__}")
        if (f is None) == (clients is None):
            raise ValueError("Byzantine takes f (a set drawn per trial) or clients (the same "
                             "set in every trial), one of the two")
        self.attack = attack
        if clients is None:
            self.clients = None
            self.f = f_leaf("Byzantine", f)
        else:
            ids = np.asarray(clients)
            if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
                raise ValueError(f"Byzantine's clients must be a list of client indices, got "
                                 f"{clients!r}"[:200])
            if len(set(ids.tolist())) != ids.size:
                raise ValueError("Byzantine's clients must be distinct")
            if ids.size and ids.min() < 0:
                raise ValueError(f"Byzantine's clients must be >= 0, got {int(ids.min())}")
            self.clients = ids.astype(np.int32)
            self.f = np.asarray(ids.size, np.int32)

    def __check_init__(self):
        check_f_leaf("Byzantine", self.f)

    def validate(self, n: int) -> None:
        """Raises ValueError where the set does not fit n clients."""
        f = int(self.f)
        if f >= n:
            raise ValueError(f"Byzantine's f ({f}) must be below the number of clients "
                             f"(n={n}): someone must be honest")
        if self.clients is not None and f and int(np.max(self.clients)) >= n:
            raise ValueError(f"Byzantine's clients must be below n={n}, got "
                             f"{int(np.max(self.clients))}")

    def num_words(self, n: int) -> int:
        """uint32 words of a trial's draw of the set: one a client (none for a given set)."""
        return 0 if self.clients is not None else n

    def members(self, words: Array, n: int, trials: int) -> Array:
        """Each trial's Byzantine clients as a mask (n, R), from the trials' words
        (num_words(n), R): the f clients of smallest word (ties by index), a uniformly
        random set of f whatever f is, so that f is data (a sweep over it is one program)."""
        if self.clients is not None:
            return jnp.zeros((n, trials), bool).at[jnp.asarray(self.clients)].set(True)
        rank = jnp.argsort(jnp.argsort(words, axis=0, stable=True), axis=0, stable=True)
        return rank < self.f
