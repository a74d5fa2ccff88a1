"""Pre-aggregators: maps of a round's messages applied before a rule, and their composition.

A pre-aggregator maps the rows (m, D) with weights (m,) to rows (m', D) with weights
(m',) (weight 0: absent), so that it composes with any rule of
:mod:`~fedjax_abc._robust._aggregators` and with other pre-aggregators
(:func:`compose`). The definitions are ByzFL's (``byzfl.aggregators.preaggregators``) on the
present rows in slot order.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from fedjax_abc._algorithms._checks import check_leaf, positive_scalar
from fedjax_abc._problems._args import check_count
from fedjax_abc._robust import _kappa
from fedjax_abc._robust._aggregators import (AbstractAggregator, _mean_of, check_f_leaf,
                                             f_leaf, pairwise_distances, present_first, ranks)

__all__ = ["AbstractPreAggregator", "Bucketing", "Clipping", "Composed", "NNM", "compose"]


class AbstractPreAggregator(eqx.Module):
    """A map of a round's rows and weights to new rows and weights (see the module)."""

    def num_words(self, m: int) -> int:
        """uint32 random words a round of m rows needs (default: none)."""
        return 0

    def num_out(self, m: int) -> int:
        """How many rows it returns for m (default: m)."""
        return m

    def check_slots(self, m: int) -> None:
        """Raises ValueError where it cannot run on m rows (default: it can)."""

    @abc.abstractmethod
    def __call__(self, vectors: Float[Array, "m D"], weights=None,
                 words=None) -> tuple[Array, Array]:
        """(rows (m', D), weights (m',)): the present rows mapped, absent ones weight 0."""


def _weights(vectors: Array, weights) -> Array:
    return jnp.ones(vectors.shape[:1], vectors.dtype) if weights is None else weights


class Clipping(AbstractPreAggregator):
    """Every row clipped to norm c: v min(1, c / ||v||) (ByzFL's ``Clipping``).

    In a run, the rows are the updates (messages relative to the round's origin).
    """

    c: Float[Array, ""]

    def __init__(self, c=2.0):
        self.c = positive_scalar("Clipping's c (norm bound)", c)

    def __check_init__(self):
        check_leaf("Clipping's c (norm bound)", self.c, 0.0, strict=True)

    def __call__(self, vectors, weights=None, words=None):
        c = self.c.astype(vectors.dtype)
        size = jnp.sqrt(jnp.sum(vectors ** 2, axis=1))
        over = size > c
        scale = jnp.where(over, c / jnp.where(over, size, 1), 1)
        return vectors * scale[:, None], _weights(vectors, weights)


class NNM(AbstractPreAggregator):
    """Nearest-neighbour mixing: every present row replaced by the mean of its k - f nearest
    present rows, itself included (k present rows; ByzFL's ``NNM``, needs f < k).

    Reference: Allouah, Farhadkhani, Guerraoui, Gupta, Pinot and Stephan, "Fixing by mixing:
    a recipe for optimal Byzantine ML under heterogeneity", AISTATS 2023.
    """

    f: Int[Array, ""]

    def __init__(self, f: int):
        self.f = f_leaf("NNM", f)

    def __check_init__(self):
        check_f_leaf("NNM", self.f)

    def check_slots(self, m):
        if int(self.f) >= m:
            raise ValueError(f"NNM(f={int(self.f)}) needs more than f inputs, got {m} slots "
                             "a round")

    def __call__(self, vectors, weights=None, words=None):
        rows, present, k = present_first(vectors, weights)
        dist = jnp.where(present[None, :], pairwise_distances(rows), jnp.inf)
        near = ranks(dist.T).T < k - self.f  # (m, m): row i's k - f nearest
        return jax.vmap(lambda take: _mean_of(rows, take))(near), present.astype(
            _weights(vectors, weights).dtype)


class Bucketing(AbstractPreAggregator):
    """The present rows in a random order, cut into buckets of s (the last one smaller
    where s does not divide their number), each bucket's mean a row (ByzFL's
    ``Bucketing``). The order comes from the round's random words (one per slot).

    Reference: Karimireddy, He and Jaggi, "Byzantine-robust learning on heterogeneous
    datasets via bucketing", ICLR 2022.
    """

    s: int = eqx.field(static=True)

    def __init__(self, s: int):
        self.s = check_count("Bucketing's s (bucket size)", s)

    def num_words(self, m):
        return m

    def num_out(self, m):
        return -(-m // self.s)

    def __call__(self, vectors, weights=None, words=None):
        m = vectors.shape[0]
        w = _weights(vectors, weights)
        present = w > 0
        k = jnp.sum(present, dtype=jnp.int32)
        if words is None:
            raise ValueError(f"Bucketing draws a random order: give it {m} uint32 words")
        # present rows first in a random order (a word each), then the absent ones
        sort_key = jnp.where(present, words[:m] >> 1, jnp.uint32(0x80000000) | jnp.arange(
            m, dtype=jnp.uint32))
        order = jnp.argsort(sort_key, stable=True)
        rows = vectors[order]
        buckets = self.num_out(m)
        j = jnp.arange(m)
        member = (j[None, :] // self.s == jnp.arange(buckets)[:, None]) & (j[None, :] < k)
        means = jax.vmap(lambda take: _mean_of(rows, take))(member)
        return means, jnp.any(member, axis=1).astype(w.dtype)


class Composed(AbstractAggregator):
    """Pre-aggregators applied in order, then a rule (ByzFL's ``RobustAggregator``)."""

    pre: tuple
    rule: AbstractAggregator
    streaming: ClassVar[bool] = False

    def __init__(self, pre, rule):
        for p in pre:
            if not isinstance(p, AbstractPreAggregator):
                raise ValueError("compose's stages before the last must be pre-aggregators "
                                 f"(NNM, Bucketing, Clipping, ...), got {type(p).__name__}")
        if not isinstance(rule, AbstractAggregator):
            raise ValueError("compose's last stage must be an aggregation rule (Median, Krum, "
                             f"...), got {type(rule).__name__}")
        self.pre, self.rule = tuple(pre), rule

    def _sizes(self, m: int) -> list:
        sizes = [m]
        for p in self.pre:
            sizes.append(p.num_out(sizes[-1]))
        return sizes

    def num_words(self, m):
        sizes = self._sizes(m)
        return sum(p.num_words(s) for p, s in zip(self.pre, sizes)) + self.rule.num_words(
            sizes[-1])

    def check_slots(self, m):
        sizes = self._sizes(m)
        for p, s in zip(self.pre, sizes):
            p.check_slots(s)
        self.rule.check_slots(sizes[-1])

    def kappa(self, n, f):
        if len(self.pre) == 1 and isinstance(self.pre[0], NNM):
            return _kappa.kappa_with_nnm(self.rule.kappa(n, f), n, f)
        return None

    def __call__(self, vectors, weights=None, words=None):
        w = _weights(vectors, weights)
        start = 0
        for p in self.pre:
            count = p.num_words(vectors.shape[0])
            vectors, w = p(vectors, w, None if words is None else words[start:start + count])
            start += count
        return self.rule(vectors, w, None if words is None else words[start:])


def compose(*stages) -> Composed:
    """Pre-aggregators then a rule, e.g. ``compose(NNM(2), Krum(2))``."""
    if not stages:
        raise ValueError("compose needs at least a rule")
    return Composed(stages[:-1], stages[-1])
