"""Participation models beyond uniform sampling: who takes part, with which weight.

- :class:`Poisson`: client i independently with its own probability p_i, weighted
  1 / (n p_i) (unbiased, Horvitz-Thompson) or averaged over the participants.
- :class:`ImportanceSampler`: S draws with replacement from p, weighted 1 / (S n p_i) per
  draw (Hansen-Hurwitz; unbiased) or averaged over the draws.
- :class:`Cyclic`: only group t mod K is available in round t; S of it uniformly.
- :class:`MarkovAvailability`: each client's availability a two-state Markov chain started
  from its stationary law; S of the available uniformly.
- :class:`TraceAvailability`: a user's boolean (P, n) array, row t mod P in round t.
- :class:`Dropout`: a wrapper: a selected client delivers with probability q_i.
- :class:`SizeWeighted`: a wrapper: every slot's weight times n s_i / sum(s) (FedAvg's
  n_k / n data-size weighting).

A sampler is *normalised* (``normalised()`` True, AbstractSampler's default) when the
server averages the slots' messages with weights w_j / sum_j w_j; an unbiased one
(Poisson's and ImportanceSampler's default, ``unbiased=True``) returns final weights whose
sum has expectation 1, and the server scales its update by their sum (``RoundInfo.scale``).
``unit_weights()`` says whether every participant's weight is 1 (algorithms that track a
mean of client states need it). The stateful samplers carry their state (a round counter, the
availabilities) from round to round; their arrays (probabilities, group ids, traces) are
data, so new values of the same shape compile nothing (in ``mode="gather"``, Poisson
probabilities that change its :meth:`~fedjax_abc.AbstractSampler.capacity` compile anew).
"""


import abc
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from fedjax_abc._problems._args import check_count, check_flag
from fedjax_abc._problems._moments import (ParticipationMoments, available_set, multinomial,
                                          rows_moments)
from fedjax_abc._problems._samplers import (AbstractSampler, AbstractStatelessSampler,
                                          independent_chunks, independent_taken, own_slots,
                                          tail_capacity)

__all__ = ["AbstractAvailability", "Cyclic", "Dropout", "ImportanceSampler", "MarkovAvailability", "Poisson",
           "SizeWeighted", "TraceAvailability", "uniform_among"]


def _unit(words: Array) -> Array:
    """u in (0, 1) from uint32 words, exactly (float64 with x64, else 23 bits in float32:
    (k + 1/2) 2^-23 needs 24 significant bits, all float32 has, so u < 1 always)."""
    if jax.config.jax_enable_x64:
        return (words.astype(jnp.float64) + 0.5) * 2.0 ** -32
    return ((words >> np.uint32(9)).astype(jnp.float32) + 0.5) * 2.0 ** -23


# |sum(p) - 1| allowed per entry: float32 rounding of a normalised vector, not a typo
_SUM_TOLERANCE = 1e-6


def _concrete(value) -> Optional[np.ndarray]:
    """The value as a NumPy array, or None for a tracer (a sweep's traced axis)."""
    if isinstance(value, jax.core.Tracer):
        return None
    return np.asarray(value)


def _probabilities(name: str, value, *, low_open: bool = True) -> jnp.ndarray:
    """A float array of probabilities in (0, 1] ([0, 1) with ``low_open=False``)."""
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"{name} must be probabilities, got {value!r}")
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of probabilities, got {value!r}"[:200]) \
            from None
    _check_probabilities(name, a, low_open)
    return jnp.asarray(a, float)


def _check_probabilities(name: str, a, low_open: bool = True) -> None:
    a = _concrete(a)
    if a is None:
        return
    bad = ~np.isfinite(a) | ((a <= 0) | (a > 1) if low_open else (a < 0) | (a >= 1))
    if np.any(bad):
        where = "(0, 1]" if low_open else "[0, 1)"
        raise ValueError(f"{name} must be in {where}, got {float(a[bad].ravel()[0])!r}")


def _check_clients(name: str, a, n: int) -> None:
    if np.ndim(a) not in (0, 1) or (np.ndim(a) == 1 and np.shape(a)[0] != n):
        raise ValueError(f"{name} must be a number or have one entry per client (n={n}), got "
                         f"shape {np.shape(a)}")


def _check_size(S) -> int:
    return check_count("num_sampled (S)", S)


def uniform_among(words: Array, available: Array, num_sampled: int) -> tuple[Array, Array]:
    """S slots uniformly without replacement among the available clients (fewer if fewer).

    Each client gets a random key from its word; the S largest keys of the available clients
    are taken (a uniformly random order of them, so every S-subset is equally likely).
    Slots beyond the number of available clients get weight 0.

    Args:
      words: (n,) uint32, one per client.
      available: (n,) bool.
      num_sampled: S (static).

    Returns:
      (indices (S,) int32, weights (S,) in {0, 1}).
    """
    score = jnp.where(available, (words >> np.uint32(1)).astype(jnp.int32), -1)
    top, idx = jax.lax.top_k(score, num_sampled)
    return idx.astype(jnp.int32), (top >= 0).astype(float)


class Poisson(AbstractStatelessSampler):
    """Client i takes part independently with probability ``probs[i]`` (Poisson sampling).

    ``unbiased=True`` (default): participant i has weight 1 / (n p_i), and the server's
    update is the weighted sum (E = the full mean: Horvitz-Thompson). ``unbiased=False``:
    the participants are averaged (a round with none leaves x unchanged); with equal p this
    is :class:`~fedjax_abc.Bernoulli`, the same draws.

    The participants are drawn in client order at their cost: candidates by geometric skips
    at the rate max_i p_i, candidate i kept with probability p_i / max_i p_i. A round takes
    about n max_i p_i draws (twice that with unequal probabilities), not n; the law is
    that of independent inclusions with probabilities p_i.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.Poisson([0.2, 0.5, 1.0]).num_slots(3)
      3
    """

    distinct_slots: ClassVar[bool] = True
    num_sampled: ClassVar[Optional[int]] = None  # a random number of participants

    probs: Float[Array, " n"]
    unbiased: bool = eqx.field(static=True)

    def __init__(self, probs, unbiased: bool = True):
        self.probs = _probabilities("Poisson probs", probs)
        self.unbiased = check_flag("unbiased", unbiased)

    def __check_init__(self):
        _check_probabilities("Poisson probs", self.probs)

    def normalised(self):
        return not self.unbiased

    def unit_weights(self):
        return not self.unbiased

    def validate(self, n):
        _check_clients("Poisson probs", self.probs, n)

    def participation_moments(self, n, round=None):
        p = np.broadcast_to(np.asarray(self.probs, np.float64), (n,))
        if not self.unbiased:
            return available_set(p, n)
        m2 = np.full((n, n), 1.0 / n ** 2)
        np.fill_diagonal(m2, 1.0 / (n ** 2 * p))
        pi2 = np.outer(p, p)
        np.fill_diagonal(pi2, p)
        return ParticipationMoments(p.copy(), pi2, np.full(n, 1.0 / n), m2)

    def available_probabilities(self, n):
        if self.unbiased:
            return None  # weighted 1 / (n p_i), not averaged
        return np.broadcast_to(np.asarray(self.probs, np.float64), (n,)).copy()

    def num_slots(self, n):
        return n

    def capacity(self, n):
        p = _concrete(self.probs)
        return None if p is None else tail_capacity(p, n)

    def num_words(self, n):
        return 2

    def from_words(self, words, n):
        idx, w = self._slots(words[:2, None], n)
        return idx[:, 0], w[:, 0]

    def from_words_batched(self, words, n):
        if type(self).from_words is not Poisson.from_words:  # a subclass changed the slots
            return super().from_words_batched(words, n)
        return self._slots(words, n)

    def slot_chunks(self, words, n, capacity):
        if not own_slots(self, Poisson):
            return None
        return independent_chunks(words, n, self.probs, capacity, self._weight(n))

    def _weight(self, n):
        """A participant's weight from its client index."""
        p = jnp.broadcast_to(self.probs, (n,))
        if self.unbiased:
            return lambda idx: (1.0 / (n * p[idx])).astype(float)
        return lambda idx: jnp.ones(idx.shape, float)

    def _slots(self, words, n):
        taken = independent_taken(words, n, self.probs)
        idx = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[:, None], taken.shape)
        return idx, jnp.where(taken, self._weight(n)(idx), 0)


class ImportanceSampler(AbstractStatelessSampler):
    """S independent draws of a client from the distribution ``probs`` (with replacement).

    ``unbiased=True`` (default): a draw of client i has weight 1 / (S n p_i) and the server's
    update is the weighted sum (E = the full mean: the Hansen-Hurwitz estimator of optimal
    client sampling). ``unbiased=False``: the draws are averaged (E = sum_i p_i v_i).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.ImportanceSampler([0.5, 0.25, 0.25], num_sampled=2).num_slots(3)
      2
    """

    distinct_slots: ClassVar[bool] = False  # a client drawn twice fills two slots

    probs: Float[Array, " n"]
    num_sampled: int = eqx.field(static=True)
    unbiased: bool = eqx.field(static=True)

    def __init__(self, probs, num_sampled: int, unbiased: bool = True):
        self.num_sampled = _check_size(num_sampled)
        p = _probabilities("ImportanceSampler probs", probs)
        if p.ndim != 1:
            raise ValueError(f"ImportanceSampler probs must be a 1-d array, got shape {p.shape}")
        unbiased = check_flag("unbiased", unbiased)
        total = float(np.sum(np.asarray(probs, np.float64)))
        if abs(total - 1.0) > _SUM_TOLERANCE * p.size:
            raise ValueError(f"ImportanceSampler probs must sum to 1, got {total!r}")
        self.probs, self.unbiased = p / jnp.sum(p), unbiased

    def __check_init__(self):
        _check_probabilities("ImportanceSampler probs", self.probs)
        p = _concrete(self.probs)
        # the constructor divides by the sum; a value put in by eqx.tree_at must be so too
        # (the weights 1 / (S n p_i) read p as it is), to the rounding of its dtype
        tolerance = 4 * np.finfo(jnp.result_type(self.probs)).eps * (p.size if p is not None else 1)
        if p is not None and abs(float(p.sum()) - 1.0) > tolerance:
            raise ValueError(f"ImportanceSampler probs must sum to 1, got {float(p.sum())!r}: "
                             "divide them by their sum")

    def normalised(self):
        return not self.unbiased

    def unit_weights(self):
        return not self.unbiased

    def validate(self, n):
        if self.probs.shape != (n,):
            raise ValueError(f"ImportanceSampler probs must have one entry per client (n={n}), "
                             f"got shape {self.probs.shape}")

    def participation_moments(self, n, round=None):
        return multinomial(np.asarray(self.probs, np.float64), self.num_sampled, self.unbiased)

    def num_slots(self, n):
        return self.num_sampled

    def num_words(self, n):
        return self.num_sampled

    def from_words(self, words, n):
        u = _unit(words[:self.num_sampled])
        cdf = jnp.cumsum(self.probs.astype(u.dtype))
        idx = jnp.minimum(jnp.sum(u[:, None] * cdf[-1] >= cdf[None, :-1], axis=1), n - 1)
        idx = idx.astype(jnp.int32)
        if not self.unbiased:
            return idx, jnp.ones((self.num_sampled,))
        return idx, (1.0 / (self.num_sampled * n * self.probs[idx])).astype(float)


def _counter_state(n: int):
    return {"t": jnp.zeros((), jnp.int32)}


class AbstractAvailability(AbstractSampler):
    """S clients uniformly among those available in the round (all of them when fewer).

    Subclasses say who is available: :meth:`availability` from the round's words and the
    sampler's state (a round counter, each client's chain), and :meth:`init_state`. The
    round's words are the availability's (``availability_words(n)`` of them) and then one
    per client for the choice (:func:`uniform_among`). A round with no one available leaves
    x unchanged.
    """

    distinct_slots: ClassVar[bool] = True

    num_sampled: eqx.AbstractVar[int]

    @abc.abstractmethod
    def availability(self, words: Array, n: int, state) -> tuple[Bool[Array, " n"], object]:
        """(who is available this round, the state of the next round)."""

    def availability_words(self, n: int) -> int:
        """How many random words :meth:`availability` reads (default 0)."""
        return 0

    def num_slots(self, n):
        return self.num_sampled

    def num_words(self, n):
        return self.availability_words(n) + n

    def sample(self, words, n, state):
        V = self.availability_words(n)
        available, state = self.availability(words[:V], n, state)
        idx, w = uniform_among(words[V:V + n], available, self.num_sampled)
        return idx, w, state


class Cyclic(AbstractAvailability):
    """Cyclic participation: only group t mod K is available in round t, S of it uniformly.

    ``groups``: each client's group id in {0, ..., K-1}, an array of n; None puts client i in
    group floor(i K / n) (K contiguous blocks). Stateful: the round counter.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.Cyclic(num_groups=4, num_sampled=2).group_ids(8).tolist()
      [0, 0, 1, 1, 2, 2, 3, 3]
    """

    num_groups: int = eqx.field(static=True)
    num_sampled: int = eqx.field(static=True)
    groups: Optional[Int[Array, " n"]]

    def __init__(self, num_groups: int, num_sampled: int, groups=None):
        self.num_groups = check_count("num_groups (K)", num_groups)
        self.num_sampled = _check_size(num_sampled)
        if groups is not None:
            g = np.asarray(groups)
            if g.ndim != 1 or not np.issubdtype(g.dtype, np.integer):
                raise ValueError(f"Cyclic groups must be a 1-d array of integer group ids, got "
                                 f"{groups!r}"[:200])
            if g.size and (g.min() < 0 or g.max() >= self.num_groups):
                raise ValueError(f"Cyclic groups must be in [0, num_groups={self.num_groups}), "
                                 f"got {int(g.min())}..{int(g.max())}")
            groups = jnp.asarray(g, jnp.int32)
        self.groups = groups

    def __check_init__(self):
        g = None if self.groups is None else _concrete(self.groups)
        if g is not None and g.size and (g.min() < 0 or g.max() >= self.num_groups):
            raise ValueError(f"Cyclic groups must be in [0, num_groups={self.num_groups})")

    def group_ids(self, n: int) -> Array:
        """Each client's group id, shape (n,)."""
        if self.groups is not None:
            return self.groups
        return jnp.asarray(np.arange(n) * self.num_groups // n, jnp.int32)

    def participation_moments(self, n, round=None):
        g = np.asarray(self.group_ids(n))
        rows = (g[None, :] == np.arange(self.num_groups)[:, None]).astype(np.float64)
        return rows_moments(rows, self.num_sampled, round)

    def validate(self, n):
        if self.groups is not None and self.groups.shape != (n,):
            raise ValueError(f"Cyclic groups must have one entry per client (n={n}), got shape "
                             f"{self.groups.shape}")
        if self.num_groups > n:
            raise ValueError(f"num_groups (K={self.num_groups}) must be <= n={n}")
        sizes = np.bincount(np.asarray(self.group_ids(n)), minlength=self.num_groups)
        if sizes.min() < self.num_sampled:
            g = int(np.argmin(sizes))
            size = int(sizes[g])
            raise ValueError(f"num_sampled (S={self.num_sampled}) is larger than group {g} "
                             f"({size} client{'' if size == 1 else 's'})")

    def init_state(self, n):
        return _counter_state(n)

    def availability(self, words, n, state):
        t = state["t"]
        return self.group_ids(n) == t % self.num_groups, {"t": t + 1}


def _check_trace(a: np.ndarray) -> None:
    """A trace of availability: a (P, n) array, P >= 1, of booleans or 0/1."""
    if a.ndim != 2 or a.shape[0] == 0 or a.dtype.kind not in "biuf":
        raise ValueError(f"TraceAvailability available must be a boolean (P, n) array, got "
                         f"shape {a.shape} and dtype {a.dtype}")
    if a.dtype.kind != "b" and not np.all((a == 0) | (a == 1)):
        raise ValueError("TraceAvailability available must hold 0/1 or booleans")
    if not a.any():
        raise ValueError("TraceAvailability available has no client available in any row: "
                         "every round would be empty")


class TraceAvailability(AbstractAvailability):
    """Availability from a trace: row t mod P of ``available`` (P, n) in round t.

    S clients are taken uniformly among the available ones (all of them when fewer; a round
    with none leaves x unchanged). Stateful: the round counter.

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> day = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], bool)  # two phases of a cycle
      >>> fa.TraceAvailability(day, num_sampled=1).period
      2
    """

    available: Bool[Array, "P n"]
    num_sampled: int = eqx.field(static=True)

    def __init__(self, available, num_sampled: int):
        a = np.asarray(available)
        _check_trace(a)
        self.available = jnp.asarray(a, bool)
        self.num_sampled = _check_size(num_sampled)

    def __check_init__(self):  # also for a trace put in by eqx.tree_at (a sweep's axis)
        if not isinstance(self.available, jax.core.Tracer):
            _check_trace(np.asarray(self.available))

    @property
    def period(self) -> int:
        """P, the number of rows of the trace."""
        return int(self.available.shape[0])

    def participation_moments(self, n, round=None):
        return rows_moments(np.asarray(self.available, np.float64), self.num_sampled, round)

    def validate(self, n):
        if self.available.shape[1] != n:
            raise ValueError(f"TraceAvailability available must have n={n} columns (one per "
                             f"client), got shape {self.available.shape}")
        if self.num_sampled > n:
            raise ValueError(f"num_sampled (S={self.num_sampled}) must be in [1, n={n}]")

    def init_state(self, n):
        return _counter_state(n)

    def availability(self, words, n, state):
        t = state["t"]
        return self.available[t % self.available.shape[0]], {"t": t + 1}


class MarkovAvailability(AbstractAvailability):
    """Each client's availability a two-state Markov chain; S of the available uniformly.

    An available client leaves with probability ``p_leave`` each round, an unavailable one
    returns with probability ``p_return`` (numbers, or one per client). Round 0 draws every
    chain from its stationary law, P(available) = p_return / (p_leave + p_return)
    (:func:`fedjax_abc.theory.stationary_availability`); so every round's availability has
    that law. S clients are taken uniformly among the available (all when fewer; none
    leaves x unchanged). Stateful: the availabilities.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.MarkovAvailability(p_leave=0.1, p_return=0.3, num_sampled=4).num_words(10)
      20
    """

    p_leave: Float[Array, "*n"]
    p_return: Float[Array, "*n"]
    num_sampled: int = eqx.field(static=True)

    def __init__(self, p_leave, p_return, num_sampled: int):
        self.p_leave = _probabilities("p_leave", p_leave, low_open=False)
        self.p_return = _probabilities("p_return", p_return)
        self.num_sampled = _check_size(num_sampled)

    def __check_init__(self):
        _check_probabilities("p_leave", self.p_leave, low_open=False)
        _check_probabilities("p_return", self.p_return)

    def validate(self, n):
        _check_clients("p_leave", self.p_leave, n)
        _check_clients("p_return", self.p_return, n)
        if self.num_sampled > n:
            raise ValueError(f"num_sampled (S={self.num_sampled}) must be in [1, n={n}]")

    def stationary(self, n: int) -> Array:
        """Each client's stationary availability p_return / (p_leave + p_return), (n,)."""
        a = self.p_return / (self.p_leave + self.p_return)
        return jnp.broadcast_to(a, (n,))

    def participation_moments(self, n, round=None):
        return available_set(np.asarray(self.stationary(n), np.float64), self.num_sampled)

    def availability_words(self, n):
        return n

    def init_state(self, n):
        return {"available": jnp.zeros((n,), bool), "started": jnp.zeros((), bool)}

    def availability(self, words, n, state):
        u = _unit(words)
        leave = jnp.broadcast_to(self.p_leave, (n,)).astype(u.dtype)
        back = jnp.broadcast_to(self.p_return, (n,)).astype(u.dtype)
        prev = state["available"]
        moved = jnp.where(prev, u >= leave, u < back)
        fresh = u < self.stationary(n).astype(u.dtype)
        available = jnp.where(state["started"], moved, fresh)
        return available, {"available": available, "started": jnp.ones((), bool)}


class AbstractWrapper(AbstractSampler):
    """A sampler that changes another's weights (:class:`Dropout`, :class:`SizeWeighted`):
    the wrapped sampler's slots, state, records, step limits, ``distinct_slots`` and
    ``num_sampled`` are its own."""

    sampler: eqx.AbstractVar[AbstractSampler]

    @property
    def distinct_slots(self):
        return self.sampler.distinct_slots

    @property
    def num_sampled(self):
        return self.sampler.num_sampled

    def normalised(self):
        return self.sampler.normalised()

    def num_slots(self, n):
        return self.sampler.num_slots(n)

    def init_state(self, n):
        return self.sampler.init_state(n)

    def record_names(self):
        return self.sampler.record_names()

    def records(self, state):
        return self.sampler.records(state)

    def step_limits(self, state):
        return self.sampler.step_limits(state)


class Dropout(AbstractWrapper):
    """A selected client delivers its message with probability ``deliver[i]``, else drops out.

    Wraps another sampler: a dropped client's slots get weight 0 (one draw per client and
    round, so a client in two slots drops from both). Over a normalised sampler the server
    averages what arrives; over an unbiased one a delivered slot's weight is divided by q_i,
    which keeps the update unbiased.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.Dropout(fa.UniformWithoutReplacement(4), deliver=0.9).num_words(10)
      14
    """

    sampler: AbstractSampler
    deliver: Float[Array, "*n"]

    def __init__(self, sampler: AbstractSampler, deliver):
        if not isinstance(sampler, AbstractSampler):
            raise ValueError(f"Dropout's sampler must be a fedjax_abc.AbstractSampler, got "
                             f"{type(sampler).__name__}")
        self.sampler = sampler
        self.deliver = _probabilities("deliver", deliver)

    def __check_init__(self):
        _check_probabilities("deliver", self.deliver)

    def unit_weights(self):
        return self.sampler.unit_weights()

    def validate(self, n):
        self.sampler.validate(n)
        _check_clients("deliver", self.deliver, n)

    def participation_moments(self, n, round=None):
        q = np.broadcast_to(np.asarray(self.deliver, np.float64), (n,))
        inner = self.sampler
        if inner.normalised():
            available = inner.available_probabilities(n)
            if available is None:
                raise ValueError(f"no closed form for Dropout over the normalised "
                                 f"{type(inner).__name__} (survivors of a selection averaged)")
            return available_set(available * q, n)  # every available client takes part
        m = inner.participation_moments(n, round)
        if m is None:
            return None
        pi2 = m.pi2 * np.outer(q, q)
        np.fill_diagonal(pi2, m.pi * q)
        m2 = m.m2.copy()
        np.fill_diagonal(m2, np.diag(m.m2) / q)
        return ParticipationMoments(m.pi * q, pi2, m.m1, m2)

    def capacity(self, n):  # dropping participants leaves the inner sampler's bound
        return self.sampler.capacity(n)

    def num_words(self, n):
        return self.sampler.num_words(n) + n

    def _drop(self, words, n, idx, w):
        u = _unit(words[self.sampler.num_words(n):])
        q = jnp.broadcast_to(self.deliver, (n,)).astype(u.dtype)
        arrives = (u < q)[idx]
        if self.sampler.normalised():
            return jnp.where(arrives, w, 0)
        return jnp.where(arrives, w / q[idx], 0).astype(w.dtype)

    def sample(self, words, n, state):
        idx, w, state = self.sampler.sample(words[:self.sampler.num_words(n)], n, state)
        return idx, self._drop(words, n, idx, w), state


class SizeWeighted(AbstractWrapper):
    """Another sampler with every slot's weight times n s_i / sum(s) (data-size weighting).

    With the paper's sampler this is FedAvg's aggregation sum_{i in S_t} n_i y_i /
    sum_{i in S_t} n_i; with an unbiased sampler the update's expectation becomes
    sum_i (s_i / sum s) v_i, the data-weighted objective's.

    Example:
      >>> import fedjax_abc as fa
      >>> fa.SizeWeighted(fa.FullParticipation(), sizes=[10, 30]).relative_sizes(2).tolist()
      [0.5, 1.5]
    """

    sampler: AbstractSampler
    sizes: Float[Array, " n"]

    def __init__(self, sampler: AbstractSampler, sizes):
        if not isinstance(sampler, AbstractSampler):
            raise ValueError(f"SizeWeighted's sampler must be a fedjax_abc.AbstractSampler, got "
                             f"{type(sampler).__name__}")
        s = np.asarray(sizes, dtype=np.float64) if not isinstance(sizes, (str, bytes)) else None
        if s is None or s.ndim != 1 or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise ValueError(f"sizes must be a 1-d array of positive numbers, got {sizes!r}"[:200])
        self.sampler, self.sizes = sampler, jnp.asarray(s, float)

    def __check_init__(self):
        s = _concrete(self.sizes)
        if s is not None and (not np.all(np.isfinite(s)) or np.any(s <= 0)):
            raise ValueError("sizes must be positive numbers")

    def unit_weights(self):
        return False

    def relative_sizes(self, n: int) -> Array:
        """n s_i / sum(s), shape (n,): mean 1."""
        return n * self.sizes / jnp.sum(self.sizes)

    def validate(self, n):
        self.sampler.validate(n)
        if self.sizes.shape != (n,):
            raise ValueError(f"sizes must have one entry per client (n={n}), got shape "
                             f"{self.sizes.shape}")

    def participation_moments(self, n, round=None):
        r = np.asarray(self.relative_sizes(n), np.float64)
        inner = self.sampler
        m = inner.participation_moments(n, round)
        if m is None:
            return None
        if not inner.normalised():
            return ParticipationMoments(m.pi, m.pi2, m.m1 * r, m.m2 * np.outer(r, r))
        available = inner.available_probabilities(n)
        if available is not None and np.all(available == 1):  # everyone, every round
            return ParticipationMoments(m.pi, m.pi2, r / n, np.outer(r, r) / n ** 2)
        raise ValueError(f"no closed form for SizeWeighted over the normalised "
                         f"{type(inner).__name__} (a ratio of random sums)")

    def capacity(self, n):  # the same participants, other weights
        return self.sampler.capacity(n)

    def num_words(self, n):
        return self.sampler.num_words(n)

    def sample(self, words, n, state):
        idx, w, state = self.sampler.sample(words, n, state)
        return idx, (w * self.relative_sizes(n)[idx]).astype(w.dtype), state

