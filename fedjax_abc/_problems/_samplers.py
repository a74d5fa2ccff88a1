"""Client samplers: which clients take part in a round (Algorithm 1, line 4; Assumption 3).

A sampler returns a fixed number m of slots: client indices and their weights. The server
averages the local models of the slots with these weights (zero-weight slots drop out).
``mask`` turns the slots into a weight per client, the mask over all n clients.

- :class:`UniformWithoutReplacement` (the paper's): exactly S distinct clients, every
  S-subset equally likely (eq. 9); Floyd's algorithm, no sort, one draw of S words.
- :class:`FullParticipation`: all n clients (S = n).
- :class:`WithReplacement`: S independent uniform draws, repeats counted twice.
- :class:`Bernoulli`: each client independently with probability p (a random number of
  participants; a round with none leaves x unchanged), drawn in client order by geometric
  skips: about p n draws a round, not n.

A sampler with a random number of participants among its m slots may say how many slots
usually hold them all (:meth:`AbstractSampler.capacity`, :func:`tail_capacity`): the engine
then computes them that many at a time in ``mode="gather"``, and a rare round with more
takes more such passes (none is dropped).
"""

# no ``from __future__ import annotations`` here: equinox reads ``eqx.AbstractVar`` from the
# annotation object (a string annotation would declare a field instead)

import abc
import functools
import math
from typing import Callable, ClassVar, NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from fedjax_abc._problems._args import check_count
from fedjax_abc._problems._moments import ParticipationMoments, available_set, multinomial
from fedjax_abc._problems._hash import GOLDEN_GAMMA, splitmix64, threefry2x32

__all__ = [
    "AbstractSampler",
    "AbstractStatelessSampler",
    "Bernoulli",
    "FullParticipation",
    "SlotChunks",
    "UniformWithoutReplacement",
    "WithReplacement",
    "is_of_size",
    "sample_mask",
    "sampler_of_size",
    "tail_capacity",
]

# The chance that one trial's round has more participants than :func:`tail_capacity` gives.
OVERFLOW_PROBABILITY = 1e-6


def tail_capacity(probs, n: int) -> Optional[int]:
    """How many slots hold a round's participants but with chance below
    :data:`OVERFLOW_PROBABILITY`, when client i takes part independently with probability
    ``probs[i]``: None when that is more than half of n (fewer would save little).

    From Bernstein's inequality for a sum X of independent Bernoulli(p_i):
    P(X >= mu + t) <= exp(-t^2 / (2 (sigma^2 + t / 3))), mu = sum p_i,
    sigma^2 = sum p_i (1 - p_i); solved for t at the probability L = log(1 / delta):
    t = L / 3 + sqrt(L^2 / 9 + 2 sigma^2 L). ``probs``: a NumPy array (or scalar).
    """
    p = np.broadcast_to(np.asarray(probs, np.float64), (n,))
    mu, var = float(p.sum()), float(np.sum(p * (1 - p)))
    L = math.log(1 / OVERFLOW_PROBABILITY)
    capacity = max(1, math.ceil(mu + L / 3 + math.sqrt(L * L / 9 + 2 * var * L)))
    return capacity if 2 * capacity <= n else None


_LOW16 = np.uint32(0xFFFF)
_SHIFT16 = np.uint32(16)


def _uniform_below(words: Array, bound) -> Array:
    """floor(words * bound / 2^32): an integer in [0, bound) from a uint32 word.

    The high 32 bits of the 64-bit product: one uint64 multiply with ``jax_enable_x64`` on,
    otherwise exactly from 16-bit halves in uint32 arithmetic (a uint64 product silently
    becomes uint32 without it), the same integers either way. The bias is below
    bound / 2^32 (about 1e-8 for n = 40): invisible to any Monte Carlo run of practical
    length.
    """
    a = words.astype(jnp.uint32)
    if jax.config.jax_enable_x64:
        b = jnp.asarray(bound).astype(jnp.uint64)
        return ((a.astype(jnp.uint64) * b) >> np.uint64(32)).astype(jnp.int32)
    b = jnp.asarray(bound).astype(jnp.uint32)
    a0, a1 = a & _LOW16, a >> _SHIFT16
    b0, b1 = b & _LOW16, b >> _SHIFT16
    mid0, mid1 = a1 * b0, a0 * b1  # each < 2^32, weight 2^16
    carry = ((a0 * b0) >> _SHIFT16) + (mid0 & _LOW16) + (mid1 & _LOW16)  # < 3 * 2^16
    high = a1 * b1 + (mid0 >> _SHIFT16) + (mid1 >> _SHIFT16) + (carry >> _SHIFT16)
    return high.astype(jnp.int32)


# ------------------------------------------------ independent participation at its cost
#
# Client i takes part with probability p_i, independently of the others. The participants
# are drawn in client order by skipping ahead: candidates come at the rate p = max_i p_i
# (the gap before the next one is geometric, P(gap >= g) = (1 - p)^g, from one uniform u as
# floor(log(u) / log(1 - p))), and candidate i is kept with probability p_i / p (always when
# all p_i are equal). So client i is a candidate with probability p, kept with p_i / p, each
# independently: the law of independent Bernoulli(p_i) inclusions, from about p n draws
# instead of n. Candidate j's uniforms are hashed from the round's two sampler words and
# the counter pairs (0, j) (its gap) and (1, j) (its keep draw): the same candidates
# however many are drawn at a time, so the whole round (independent_taken) and its slots a
# chunk at a time (independent_chunks) hold the same participants.

_GAP, _KEEP = 0, 1  # the first half of a candidate's counter pairs


def _uniforms(words: Array, half: int, first, size: int) -> Array:
    """Uniforms in (0, 1) of candidates first .. first + size - 1 of R trials, shape
    (size, R), from the trials' sampler words (2, R) and the counter pairs (half, j).

    With x64: SplitMix64 seeded with the words' 64 bits, output half 2^32 + j (as the
    engine's "splitmix" words), 52 bits each, (k + 1/2) 2^-52 (53 significant bits, exact);
    else the Threefry-2x32 hash of (half, j) under the words, 23 bits in float32."""
    j = jnp.asarray(first, jnp.uint32) + jnp.arange(size, dtype=jnp.uint32)
    if jax.config.jax_enable_x64:
        seed = (words[0].astype(jnp.uint64) << np.uint64(32)) | words[1].astype(jnp.uint64)
        counter = (np.uint64(half) << np.uint64(32)) + j.astype(jnp.uint64) + np.uint64(1)
        z = splitmix64(seed[None] + counter[:, None] * GOLDEN_GAMMA)
        return ((z >> np.uint64(12)).astype(jnp.float64) + 0.5) * 2.0 ** -52
    y0, _ = threefry2x32(words[0][None], words[1][None], np.uint32(half), j[:, None])
    return ((y0 >> np.uint32(9)).astype(jnp.float32) + 0.5) * 2.0 ** -23


def _rate(probs, n: int):
    """(the candidates' rate p = max_i p_i, each client's keep probability p_i / p (n,), or
    None where every client has the same p), in the dtype of the uniforms."""
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    probs = jnp.asarray(probs).astype(dtype)
    if probs.ndim == 0:
        return probs, None
    top = jnp.max(probs)
    return top, jnp.broadcast_to(probs, (n,)) / top


def _candidates(words: Array, n: int, rate, first, size: int, start: Array):
    """The clients of candidates first .. first + size - 1 of R trials, the candidate
    before ``first`` having been client start - 1 (start (R,), at most n + 1): positions
    (size, R), n for a candidate past the last client, and the next start (R,).

    Positions are sums of gaps + 1 saturated at n + 1 (an associative scan; b + min(a, n + 1
    - b) is min(a + b, n + 1) without an intermediate above n + 1), so no sum overflows
    however large a gap; the gap is clipped at n (beyond, the same)."""
    u = _uniforms(words, _GAP, first, size)
    hazard = -jnp.log1p(-rate)  # inf for p = 1: every gap 0
    gap = jnp.minimum(jnp.floor(-jnp.log(u) / hazard), n).astype(jnp.int32)

    def add(a, b):
        return b + jnp.minimum(a, n + 1 - b)

    end = add(start[None], jax.lax.associative_scan(add, gap + 1, axis=0))
    return end - 1, end[-1]


def _kept(words: Array, n: int, keep, first, size: int, position: Array) -> Array:
    """Which candidates (size, R) take part: those before the last client, each kept with
    its client's probability ``keep`` (None: all)."""
    inside = position < n
    if keep is None:
        return inside
    u = _uniforms(words, _KEEP, first, size)
    return inside & (u < keep[jnp.minimum(position, n - 1)])


def _chunk_size(n: int) -> int:
    """Candidates drawn at a time when the whole round's mask is wanted."""
    return min(n, max(64, math.isqrt(n)))


def independent_taken(words: Array, n: int, probs) -> Array:
    """Who takes part in each of R trials' rounds, (n, R) bool, client i independently with
    probability ``probs[i]`` (a number: all the same): words (2, R), the sampler's words.

    Candidates are drawn :func:`_chunk_size` at a time until every trial's pass the last
    client: about max(p) n of them, not n."""
    R = words.shape[1]
    rate, keep = _rate(probs, n)
    size = _chunk_size(n)
    trials = jnp.arange(R, dtype=jnp.int32)[None, :]

    def more(state):
        return jnp.any(state[1] < n)

    def chunk(state):
        k, start, taken = state
        first = k * size
        position, start = _candidates(words, n, rate, first, size, start)
        took = _kept(words, n, keep, first, size, position)
        taken = taken.at[position, trials].set(took, mode="drop")  # n: past the last client
        return k + 1, start, taken

    state = (jnp.zeros((), jnp.uint32), jnp.zeros((R,), jnp.int32), jnp.zeros((n, R), bool))
    return jax.lax.while_loop(more, chunk, state)[2]


class SlotChunks(NamedTuple):
    """A round's slots of R trials drawn ``capacity`` (C) at a time, participants first
    (:meth:`AbstractSampler.slot_chunks`).

    The slots in order hold the round's participants in the order of the compacted
    ``from_words_batched`` slots, each with its weight; a slot that holds none has weight 0
    and a client that no other slot of its chunk holds with a weight.

    Attributes:
      count: each trial's participants, (R,) int32.
      span: how many leading slots hold each trial's participants, (R,) int32 (the slots
        from ``span`` on have weight 0).
      first: slots 0 .. C - 1, (indices (C, R) int32, weights (C, R)).
      chunk: k -> slots k C .. k C + C - 1 of every trial (the same form), for a traced
        k >= 1: drawn only in the rare round that needs them.
    """

    count: Int[Array, " R"]
    span: Int[Array, " R"]
    first: tuple[Int[Array, "C R"], Float[Array, "C R"]]
    chunk: Callable[[Array], tuple[Int[Array, "C R"], Float[Array, "C R"]]]


def independent_chunks(words: Array, n: int, probs, capacity: int,
                       weight: Callable[[Array], Array]) -> SlotChunks:
    """:func:`independent_taken`'s participants as :class:`SlotChunks` of ``capacity``
    candidates (the same candidates, so the same participants in the same order); a
    participant's weight is ``weight(client indices)``. A candidate not kept holds its own
    client with weight 0; one past the last client holds the client after the chunk's
    leading run of consecutive candidates (wrapping to 0), which is no candidate of the
    chunk (``capacity`` < n)."""
    if not 1 <= capacity < n:
        raise ValueError(f"capacity ({capacity}) must be in [1, n={n})")
    C = capacity
    R = words.shape[1]
    rate, keep = _rate(probs, n)
    slot = jnp.arange(C, dtype=jnp.int32)[:, None]

    def chunk_from(k, start):
        first = k * C
        position, end = _candidates(words, n, rate, first, C, start)
        took = _kept(words, n, keep, first, C, position)
        inside = position < n
        lead = jnp.sum(inside & (position == start[None] + slot), axis=0, dtype=jnp.int32)
        idx = jnp.where(inside, position, ((start + lead) % n)[None])
        w = jnp.where(took, weight(idx), 0)
        return (idx, w), took, inside, end

    def start_of(k):  # where chunk k's candidates start: chunks 0 .. k - 1 drawn again
        return jax.lax.fori_loop(jnp.zeros_like(k), k, lambda j, s: _candidates(
            words, n, rate, j * C, C, s)[1], jnp.zeros((R,), jnp.int32))

    def chunk(k):
        k = jnp.asarray(k, jnp.uint32)
        return chunk_from(k, start_of(k))[0]

    def tally(took, inside):
        return (jnp.sum(took, axis=0, dtype=jnp.int32), jnp.sum(inside, axis=0, dtype=jnp.int32))

    first, took, inside, end = chunk_from(jnp.zeros((), jnp.uint32), jnp.zeros((R,), jnp.int32))
    count, span = tally(took, inside)

    def more(state):
        return jnp.any(state[1] < n)

    def overflow(state):  # a trial with more candidates than one chunk holds (rare)
        k, start, count, span = state
        _, took, inside, start = chunk_from(k, start)
        c, s = tally(took, inside)
        return k + 1, start, count + c, span + s

    _, _, count, span = jax.lax.while_loop(more, overflow, (jnp.ones((), jnp.uint32), end,
                                                            count, span))
    return SlotChunks(count, span, first, chunk)


def own_slots(sampler, cls) -> bool:
    """Whether ``sampler`` draws its slots as ``cls`` does (no subclass overrides them)."""
    kind = type(sampler)
    return kind.from_words is cls.from_words and kind.from_words_batched is cls.from_words_batched


def _check_size(S) -> None:
    if isinstance(S, bool) or not isinstance(S, (int, np.integer)):
        raise ValueError(f"num_sampled (S={S!r}) must be an integer")


class AbstractSampler(eqx.Module):
    """Chooses the participants of one round.

    One method samples: :meth:`sample`, a round's slots from its random words and the
    sampler's state (``init_state``; ``()`` for none). A sampler without state subclasses
    :class:`AbstractStatelessSampler` and writes :meth:`from_words` instead. The rest is
    derived: a round from a key (``sampler(key, n)``), the first round from words
    (:meth:`from_words`), many trials at once (:meth:`from_words_batched`).

    Every concrete sampler declares two attributes (a class that leaves one out cannot be
    instantiated; a wrapper reads them from the sampler it wraps):

    Attributes:
      distinct_slots: True when no client fills two slots of a round (algorithms with
        client states need it), e.g. ``distinct_slots: ClassVar[bool] = True``.
      num_sampled: S, the fixed number of clients a round samples, where there is one (a
        field of :class:`UniformWithoutReplacement`); None where the number is random or
        n (:class:`Bernoulli`, :class:`FullParticipation`). A run records it
        (``SimResult.config["num_sampled"]``).
    """

    distinct_slots: eqx.AbstractVar[bool]
    num_sampled: eqx.AbstractVar[Optional[int]]

    @abc.abstractmethod
    def num_slots(self, n: int) -> int:
        """m: how many (index, weight) slots a round has for n clients."""

    @abc.abstractmethod
    def sample(self, words: Array, n: int, state) -> tuple[Int[Array, " m"], Float[Array, " m"],
                                                          object]:
        """(indices, weights, next state) of one trial's round from its ``num_words(n)``
        random words (uint32) and its state."""

    def __call__(self, key: Array, n: int) -> tuple[Int[Array, " m"], Float[Array, " m"]]:
        """(indices, weights) of the m slots of a first round, drawn with ``key``."""
        return self.from_words(jax.random.bits(key, (self.num_words(n),), jnp.uint32), n)

    def validate(self, n: int) -> None:
        """Raises ValueError when the sampler does not fit n clients."""

    def normalised(self) -> bool:
        """How the server combines the slots (a Python bool, fixed for the sampler).

        True (the default): it averages the slots' messages with weights w_j / sum_j w_j.
        False: the weights are final, their sum has expectation 1 (Horvitz-Thompson); the
        server's update from the weighted mean is scaled by sum_j w_j
        (``RoundInfo.scale``), so that the round's update is sum_j w_j times a client's.
        """
        return True

    def unit_weights(self) -> bool:
        """Whether every participant's weight is 1 (a Python bool; True by default).

        Algorithms that keep the server's copy of a mean of client states (SCAFFOLD's c,
        FedDyn's h) need it; a sampler whose weights are not all 1 says False.
        """
        return True

    def num_words(self, n: int) -> int:
        """How many uint32 random words ``from_words`` needs."""
        return 2

    def participation_moments(self, n: int,
                              round: Optional[int] = None) -> Optional[ParticipationMoments]:
        """One round's inclusion probabilities and weight moments over n clients, in closed
        form (:class:`~fedjax_abc.ParticipationMoments`), or None where none is known (the
        default): ``fa.theory.inclusion_probabilities``, ``weight_moments`` and
        ``sampling_error`` read them. ``round``: the round t of a stateful sampler's
        cycle; None for the long run (the mean over the cycle, the stationary law)."""
        return None

    def inclusion(self, n: int, round: Optional[int] = None):
        """(pi_i, shape (n,); pi_ij, shape (n, n)) of one round in closed form, or None:
        by default those of :meth:`participation_moments` (``fa.theory.
        inclusion_probabilities`` reads them). A sampler that knows its inclusion
        probabilities but not its weights' moments gives this alone."""
        m = self.participation_moments(n, round)
        return None if m is None else (m.pi, m.pi2)

    def step_limits(self, state) -> Optional[Array]:
        """The most local steps each client completes this round, Int[Array, " n"] (each
        at least 1), from one trial's state after the round's draw; None (the default) for
        no limit. A sampler on a clock with partial work (:class:`~fedjax_abc.timing.Timed`)
        says how many steps each client finishes by the deadline, and gives weight 0 to
        one that finishes none; the engine masks the steps after the limit (the algorithm
        reads the count, as FedNova does)."""
        return None

    def check_local_steps(self, local_steps) -> None:
        """Raises ValueError where the run's local work (Q, or a law of local steps) does
        not fit the sampler's own settings (a clock's steps per round); by default anything
        fits. Called when a run is built and at every run, with concrete values."""

    def record_names(self) -> tuple[str, ...]:
        """Names of the numbers a run records from the sampler's state at every record
        (default none; :class:`~fedjax_abc.timing.Timed`'s clock, ``"time"``)."""
        return ()

    def records(self, state) -> tuple:
        """One trial's numbers named by :meth:`record_names`, from its state (scalars)."""
        return ()

    def available_probabilities(self, n: int) -> Optional[np.ndarray]:
        """Where every available client takes part, averaged with weight 1, each available
        independently: those probabilities, shape (n,); None otherwise (the default). Lets
        a wrapper (:class:`~fedjax_abc.Dropout`) compose its own closed form."""
        return None

    def capacity(self, n: int) -> Optional[int]:
        """How many of the ``num_slots(n)`` slots ``mode="gather"`` computes at once (a
        Python int), or None (the default): all of them.

        A sampler whose participants are a random few of many slots (zero weight for the
        rest: :class:`Bernoulli`, :class:`~fedjax_abc.Poisson`) returns a count that holds
        them in all but rare rounds (:func:`tail_capacity`). The engine puts each trial's
        participants first (in slot order) and computes them ``capacity`` at a time until
        every trial's are done: the cost follows the participants, the results are those of
        all slots. None where the sampler's parameters are traced (unknown)."""
        return None

    def slot_chunks(self, words: Array, n: int, capacity: int) -> Optional[SlotChunks]:
        """The slots of R trials' first rounds (words (num_words(n), R)) ``capacity`` at a
        time, participants first (:class:`SlotChunks`), or None (the default): the caller
        then puts the participants of :meth:`from_words_batched`'s slots first itself.

        A sampler whose participants are a random few of n (:class:`Bernoulli`,
        :class:`~fedjax_abc.Poisson`) draws them here at their cost: the slots past the
        first ``capacity`` are drawn only in a round that needs them. The participants,
        their order and weights are those of :meth:`from_words_batched` with its
        zero-weight slots left out. ``capacity``: a Python int below n."""
        return None

    def from_words(self, words: Array, n: int) -> tuple[Int[Array, " m"], Float[Array, " m"]]:
        """The slots of a first round (from :meth:`init_state`) from its words."""
        idx, w, _ = self.sample(words, n, self.init_state(n))
        return idx, w

    def init_state(self, n: int):
        """The sampler's state of one trial at t = 0 (default: ``()``, none).

        A stateful sampler (each client's availability, say) returns a pytree of arrays
        here; the engine carries the state from round to round, one per trial.
        """
        return ()

    def from_words_batched(self, words: Array, n: int) -> tuple[Int[Array, "m R"],
                                                                Float[Array, "m R"]]:
        """The slots of R trials' first rounds at once: words (num_words(n), R) -> (m, R)
        each. The simulator calls this for a sampler without state; by default it maps
        :meth:`from_words` over the columns. A sampler may compute it directly, trial by
        trial in every row (see :class:`UniformWithoutReplacement`), with the same result.
        """
        return jax.vmap(lambda w: self.from_words(w, n), in_axes=1, out_axes=1)(words)


class AbstractStatelessSampler(AbstractSampler):
    """A sampler without state: each round's slots a function of its words alone.

    Subclasses write :meth:`from_words`; :meth:`sample` passes the (empty) state on.
    """

    @abc.abstractmethod
    def from_words(self, words: Array, n: int) -> tuple[Int[Array, " m"], Float[Array, " m"]]:
        """(indices, weights) of the round's m slots from ``num_words(n)`` random words."""

    def sample(self, words, n, state):
        idx, w = self.from_words(words, n)
        return idx, w, state


class UniformWithoutReplacement(AbstractStatelessSampler):
    """S of n clients uniformly without replacement (Assumption 3).

    Floyd's algorithm: for j = n-S, ..., n-1 draw t uniform in [0, j]; take t unless it is
    already taken, else take j. Every S-subset has probability 1 / C(n, S).
    """

    distinct_slots: ClassVar[bool] = True

    num_sampled: int = eqx.field(static=True)

    def __check_init__(self):
        _check_size(self.num_sampled)
        if self.num_sampled < 1:
            raise ValueError(f"num_sampled (S={self.num_sampled}) must be >= 1")

    def participation_moments(self, n, round=None):
        return available_set(np.ones(n), self.num_sampled)

    def num_slots(self, n):
        return self.num_sampled

    def validate(self, n):  # S is an integer >= 1: __check_init__
        if self.num_sampled > n:
            raise ValueError(f"num_sampled (S={self.num_sampled}) must be in [1, n={n}]")

    def num_words(self, n):
        return 0 if self.num_sampled == n else self.num_sampled

    def from_words(self, words, n):
        idx, w = self._floyd(words[:, None], n)
        return idx[:, 0], w[:, 0]

    def from_words_batched(self, words, n):
        if type(self).from_words is not UniformWithoutReplacement.from_words:
            return super().from_words_batched(words, n)  # a subclass changed the slots
        return self._floyd(words, n)

    def _floyd(self, words, n):
        """Floyd's algorithm for R trials at once: words (S, R) -> slots (S, R), weights 1.

        Row k (slot k of every trial) is an elementwise function of the rows before it, so
        the work runs along the trials. Up to 16 slots it is written out (step k compares
        with the k taken so far); beyond, a loop keeps the program small.
        """
        S = self.num_sampled
        R = words.shape[1]
        if S == n:
            return jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[:, None], (n, R)), \
                jnp.ones((n, R))
        if S > 16:
            def body(k, chosen):
                j = n - S + k
                t = _uniform_below(words[k], j + 1)
                taken = jnp.any((chosen == t[None]) & (jnp.arange(S) < k)[:, None], axis=0)
                return chosen.at[k].set(jnp.where(taken, j, t))

            chosen = jax.lax.fori_loop(0, S, body, jnp.zeros((S, R), jnp.int32))
            return chosen, jnp.ones((S, R))
        chosen = []
        for k in range(S):
            j = n - S + k
            t = _uniform_below(words[k], j + 1)
            taken = functools.reduce(jnp.logical_or, [c == t for c in chosen],
                                     jnp.zeros(t.shape, bool))
            chosen.append(jnp.where(taken, j, t))
        return jnp.stack(chosen), jnp.ones((S, R))


class FullParticipation(AbstractStatelessSampler):
    """Every client every round (S = n, I_S = 0)."""

    distinct_slots: ClassVar[bool] = True
    num_sampled: ClassVar[Optional[int]] = None  # all n, whatever n is

    def participation_moments(self, n, round=None):
        return available_set(np.ones(n), n)

    def available_probabilities(self, n):
        return np.ones(n)

    def num_slots(self, n):
        return n

    def num_words(self, n):
        return 0

    def from_words(self, words, n):
        return jnp.arange(n, dtype=jnp.int32), jnp.ones((n,))


def sampler_of_size(num_sampled: Optional[int]) -> AbstractSampler:
    """The sampler ``num_sampled`` stands for: S clients uniformly without replacement
    (Assumption 3), or every client (None)."""
    return FullParticipation() if num_sampled is None else UniformWithoutReplacement(num_sampled)


def is_of_size(sampler: AbstractSampler) -> bool:
    """Whether ``sampler`` is one that ``num_sampled`` stands for (:func:`sampler_of_size`):
    the paper's, which its class and S describe in full."""
    return isinstance(sampler, (UniformWithoutReplacement, FullParticipation))


class WithReplacement(AbstractStatelessSampler):
    """S independent uniform draws from the n clients; a client drawn twice counts twice."""

    distinct_slots: ClassVar[bool] = False
    num_sampled: int = eqx.field(static=True)

    def __check_init__(self):
        _check_size(self.num_sampled)
        if self.num_sampled < 1:
            raise ValueError(f"num_sampled (S={self.num_sampled}) must be >= 1")

    def participation_moments(self, n, round=None):
        return multinomial(np.full(n, 1.0 / n), self.num_sampled, False)

    def num_slots(self, n):
        return self.num_sampled

    def num_words(self, n):
        return self.num_sampled

    def from_words(self, words, n):
        return _uniform_below(words, jnp.asarray(n)), jnp.ones((self.num_sampled,))


def _bad_probability(p):
    raise ValueError(f"participation probability (p={p!r}) must be a number in (0, 1]")


class Bernoulli(AbstractStatelessSampler):
    """Each client takes part independently with probability p (the same p for all).

    The round's m_t participants are averaged with weight 1 each: x_{t+1} is the mean of
    their local models (a random number of them, Binomial(n, p)). A round with none
    (probability (1 - p)^n) leaves x_t as it is; a run in which no trial's model moves warns.
    It is :class:`~fedjax_abc.Poisson` with equal probabilities and ``unbiased=False`` (the
    same draws); ``Poisson(p, unbiased=True)`` weights each participant 1 / (n p) instead,
    which makes the round's update an unbiased estimate of the full mean. It has n slots (one
    per client, weight 0 or 1); ``mode="gather"`` computes the participants only, a few
    more than p n at a time (:meth:`capacity`), with the same results as ``mode="mask"``.

    The participants are drawn in client order by geometric skips, the gap to the next one
    floor(log(u) / log(1 - p)) from one uniform u: about p n + 1 draws a round, not n.

    Attributes:
      p: the participation probability in (0, 1] (an array leaf: a new p compiles nothing,
        except in ``mode="gather"`` one that changes :meth:`capacity`).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> idx, w = fa.Bernoulli(0.5)(jax.random.key(0), 4)  # all n slots, weight 0 or 1
      >>> idx.tolist(), sorted(set(w.tolist())) <= [0.0, 1.0]
      ([0, 1, 2, 3], True)
    """

    distinct_slots: ClassVar[bool] = True
    num_sampled: ClassVar[Optional[int]] = None  # a random number of participants

    p: Float[Array, ""]

    def __init__(self, p):
        if isinstance(p, (str, bytes, bool)) or np.ndim(p) != 0 or not np.isreal(p):
            _bad_probability(p)
        self.p = jnp.asarray(p, float)

    def __check_init__(self):  # also for a value put in by eqx.tree_at (a sweep's axis)
        if not isinstance(self.p, jax.core.Tracer) and not 0.0 < float(self.p) <= 1.0:
            _bad_probability(float(self.p))

    def participation_moments(self, n, round=None):
        return available_set(self.available_probabilities(n), n)

    def available_probabilities(self, n):
        return np.full(n, float(self.p))

    def num_slots(self, n):
        return n

    def capacity(self, n):
        if isinstance(self.p, jax.core.Tracer):
            return None
        return tail_capacity(float(self.p), n)

    def from_words(self, words, n):
        idx, w = self._slots(words[:2, None], n)
        return idx[:, 0], w[:, 0]

    def from_words_batched(self, words, n):
        if type(self).from_words is not Bernoulli.from_words:  # a subclass changed the slots
            return super().from_words_batched(words, n)
        return self._slots(words, n)

    def slot_chunks(self, words, n, capacity):
        if not own_slots(self, Bernoulli):
            return None
        return independent_chunks(words, n, self.p, capacity,
                                  lambda idx: jnp.ones(idx.shape, float))

    def _slots(self, words, n):
        taken = independent_taken(words, n, self.p)
        return (jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[:, None], taken.shape),
                taken.astype(float))


def sample_mask(sampler: AbstractSampler, key: Array, n: int) -> Float[Array, " n"]:
    """The round's mask over all n clients: the total weight each client receives.

    For :class:`UniformWithoutReplacement` it is the indicator vector (I_{1,t}, ..., I_{n,t})
    of eq. (9), with exactly S ones.
    """
    if not isinstance(sampler, AbstractSampler):
        raise ValueError(f"sampler must be a fedjax_abc.AbstractSampler, got {type(sampler).__name__}")
    if not (isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
            and key.shape == ()):
        raise ValueError("key must be a single JAX PRNG key, e.g. jax.random.key(0)")
    n = check_count("n", n)
    sampler.validate(n)
    idx, w = sampler(key, n)
    return jnp.zeros((n,), w.dtype).at[idx].add(w)
