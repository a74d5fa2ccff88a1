"""Synchronous rounds on a simulated clock: wait-for-all, a deadline, over-selection.

:class:`Timed` wraps a sampler (the clients the server asks) with a
:class:`~fedjax_abc.timing.Clock` (how long each one's work takes). The server keeps

- every asked client, and waits for the slowest (no deadline, no ``keep``);
- those that finish by the ``deadline``: the others' work is lost;
- the first ``keep`` to finish (over-selection: ask S' > S, keep S, as production systems
  do, Bonawitz et al. 2019), and of those only the ones within the deadline if one is set;
- with ``partial=True``, every asked client that completes at least one local step by the
  deadline, with the steps it completed (its local run stops there; FedNova's
  normalisation by the steps, ``fa.algorithms.FedNova``, removes the bias toward fast
  clients).

The round lasts until the last kept client's work arrives, or until the deadline when the
server is still waiting for one then. The sampler's state carries each trial's clock; a
run records it as the metric ``time`` (``SimResult.metrics["time"]``, the simulated time at
every recorded round), which :meth:`~fedjax_abc.SimResult.on_time_grid` puts on a common
time grid.
"""

from __future__ import annotations

import math
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from fedjax_abc._problems._args import check_count, check_flag
from fedjax_abc._problems._moments import available_set
from fedjax_abc._problems._samplers import AbstractSampler
from fedjax_abc._problems._time import AbstractLaw, Clock, _value

__all__ = ["Timed"]


def _deadline(value) -> Array:
    if isinstance(value, jax.core.Tracer):
        return value
    if value is None:
        return jnp.asarray(math.inf, float)
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"Timed's deadline must be a number, got {value!r}")
    try:
        x = float(np.asarray(value, np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"Timed's deadline must be a number, got {value!r}"[:200]) from None
    return jnp.asarray(x, float)  # its range: Timed.__check_init__


def round_time(finish: Array, taking_part: Array, deadline, keep: Optional[int]):
    """Which slots the server keeps and how long the round lasts, from the slots' finish
    times (m,) and who was asked (m,) bool.

    Kept: the asked that finish by the deadline, and of those the first ``keep`` (ties in
    slot order). The round lasts until the target-th finish, the target being the number
    asked (at most ``keep``); the deadline if that comes later; 0 when no one was asked.
    """
    eligible = jnp.where(taking_part, finish, jnp.inf)
    order = jnp.argsort(eligible, stable=True)
    ranked = eligible[order]
    rank = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype))
    asked = jnp.sum(taking_part.astype(jnp.int32))
    target = asked if keep is None else jnp.minimum(asked, keep)
    kept = taking_part & (finish <= deadline)
    if keep is not None:
        kept = kept & (rank < keep)
    last = ranked[jnp.maximum(target - 1, 0)]
    duration = jnp.where(target > 0, jnp.minimum(last, deadline), 0.0)
    return kept, duration.astype(finish.dtype)


class Timed(AbstractSampler):
    """A sampler's clients on a clock: wait-for-all, a deadline, over-selection.

    Args:
      sampler: who the server asks each round (S' clients for over-selection); a sampler
        whose slots are averaged (``normalised()``), e.g. the paper's.
      clock: the durations (:class:`~fedjax_abc.timing.Clock`).
      deadline: the longest the server waits in a round (None: no deadline); the work of
        clients finishing later is lost.
      keep: over-selection, the first ``keep`` finishers are kept (None: all asked).
      steps: the local steps K of a client's round, the factor of its compute time
        (D_i = K s_i c_i + m_i); 1 makes the compute law the time of a whole round's work.
        With ``partial``, the run's Q.
      partial: partial work at the deadline: client i completes
        K_i = min(steps, floor((deadline - m_i) / (s_i c_i))) local steps and sends them
        (``step_limits``); one that completes none drops out.

    The state carries the trial's clock, its speed factors (drawn in the first round
    when the clock's speed is a law) and the wrapped sampler's state; runs record the
    clock as the metric ``time``.

    Example:
      >>> import fedjax_abc as fa
      >>> clock = fa.timing.Clock(fa.timing.Exponential(1.0))
      >>> s = fa.timing.Timed(fa.UniformWithoutReplacement(4), clock, deadline=2.0)
      >>> float(fa.theory.inclusion_probabilities(s, 8).first[0])  # 4/8 (1 - exp(-2))
      0.43233235838169365
    """

    sampler: AbstractSampler
    clock: Clock
    deadline: Float[Array, ""]
    keep: Optional[int] = eqx.field(static=True)
    steps: int = eqx.field(static=True)
    partial: bool = eqx.field(static=True)

    def __init__(self, sampler: AbstractSampler, clock: Clock, *, deadline=None,
                 keep: Optional[int] = None, steps: int = 1, partial: bool = False):
        if not isinstance(sampler, AbstractSampler):
            raise ValueError(f"Timed's sampler must be a fedjax_abc.AbstractSampler, got "
                             f"{type(sampler).__name__}")
        if not isinstance(clock, Clock):
            raise ValueError(f"Timed's clock must be a fedjax_abc.timing.Clock, got "
                             f"{type(clock).__name__}")
        if not sampler.normalised():
            raise ValueError(f"Timed keeps a subset of the asked clients and averages them: "
                             f"{type(sampler).__name__}'s unbiased weights would lose their "
                             "expectation; use a sampler whose slots are averaged")
        self.sampler, self.clock = sampler, clock
        self.deadline = _deadline(deadline)
        self.keep = None if keep is None else check_count("Timed's keep", keep)
        self.steps = check_count("Timed's steps", steps)
        self.partial = check_flag("Timed's partial", partial)

    def __check_init__(self):  # also for a deadline put in by eqx.tree_at (a sweep's axis)
        d = _value(self.deadline)
        if d is not None and (math.isnan(d) or d <= 0):
            raise ValueError(f"Timed's deadline ({d!r}) must be > 0 (None or inf for none)")
        if self.partial and (self.keep is not None or (d is not None and math.isinf(d))):
            raise ValueError("Timed's partial work needs a deadline and no keep: clients send "
                             "what they completed by the deadline")
        least = self._least_duration()
        if least is not None and d is not None and least > d:  # a client on time is kept
            raise ValueError(f"Timed's deadline ({d:g}) is below the least duration any client "
                             f"can take ({least:g}): every round would be empty")

    def check_local_steps(self, local_steps) -> None:
        """With ``partial``, the run's Q must be ``steps``: a client's steps are capped at
        ``steps`` and its clock counts them (a client silently cut short, or a clock for
        steps never taken, otherwise)."""
        if not self.partial or local_steps == self.steps:
            return
        if not isinstance(local_steps, int):
            raise ValueError("Timed's partial work needs local_steps = Timed's steps (an "
                             "integer), not a law of local steps")
        raise ValueError(f"Timed's partial work caps a client's round at its steps "
                         f"({self.steps}): run it with local_steps={self.steps}, or give "
                         f"Timed steps={local_steps}")

    def _least_duration(self) -> Optional[float]:
        """The least duration the clock allows (the bottom of its laws' supports)."""
        c = self.clock
        parts = [c.compute.least(), c.communication.least()]
        speed = c.speed.least() if isinstance(c.speed, AbstractLaw) else float(np.min(c.speed))
        if None in parts or speed is None:
            return None
        return (1 if self.partial else self.steps) * speed * parts[0] + parts[1]

    @property
    def distinct_slots(self):
        return self.sampler.distinct_slots

    @property
    def num_sampled(self):
        return self.keep if self.keep is not None else self.sampler.num_sampled

    def validate(self, n):
        self.sampler.validate(n)
        self.clock.validate(n)
        asked = self.sampler.num_sampled
        if self.keep is not None and asked is not None and not isinstance(
                asked, jax.core.Tracer) and self.keep > asked:
            raise ValueError(f"Timed's keep ({self.keep}) is more than the clients asked (S'="
                             f"{asked}): over-selection asks S' >= keep")

    def unit_weights(self):
        return self.sampler.unit_weights()

    def num_slots(self, n):
        return self.sampler.num_slots(n)

    def capacity(self, n):  # keeping fewer leaves the wrapped sampler's bound
        return self.sampler.capacity(n)

    def num_words(self, n):
        return self.sampler.num_words(n) + self.clock.num_words(n)

    def init_state(self, n):
        zero = jnp.zeros((), float)
        state = {"inner": self.sampler.init_state(n), "time": zero,
                 "speed": jnp.zeros((n,), float), "drawn": jnp.zeros((), bool)}
        if self.partial:
            state["limits"] = jnp.zeros((n,), jnp.int32)
        return state

    def step_limits(self, state):
        return state["limits"] if self.partial else self.sampler.step_limits(state["inner"])

    def record_names(self):
        return ("time",) + tuple(self.sampler.record_names())

    def records(self, state):
        return (state["time"],) + tuple(self.sampler.records(state["inner"]))

    def sample(self, words, n, state):
        used = self.sampler.num_words(n)  # the wrapped sampler's words, then the clock's
        idx, w, inner = self.sampler.sample(words[:used], n, state["inner"])
        clock_words = words[used:]
        dtype = state["time"].dtype
        speed = jnp.where(state["drawn"], state["speed"],
                          self.clock.speeds(clock_words[:n], dtype))
        step, m = self.clock.step_and_communication(clock_words[n:].reshape(2, n), speed)
        deadline = self.deadline.astype(dtype)
        kept, duration = round_time((self.steps * step + m)[idx], w > 0, deadline, self.keep)
        state = {"inner": inner, "time": state["time"] + duration, "speed": speed,
                 "drawn": jnp.ones((), bool)}
        if self.partial:  # the steps done by the deadline, less the communication's time
            done = jnp.floor((deadline - m) / step)
            kept = (w > 0) & (done[idx] >= 1)
            # a client that completes none drops out (weight 0); its slot still computes
            # (gather's slots, mask's clients), with one step so that nothing divides by 0
            state["limits"] = jnp.clip(done, 1, self.steps).astype(jnp.int32)
        return idx, jnp.where(kept, w, 0).astype(w.dtype), state

    def finish_probabilities(self, n: int) -> Optional[np.ndarray]:
        """P(client i finishes by the deadline) (with partial work: one step and its
        communication), shape (n,), in closed form where the clock allows
        (:meth:`~fedjax_abc.timing.Clock.finish_probability`), else None."""
        d = _value(self.deadline)
        steps = 1 if self.partial else self.steps  # partial work: one step is enough
        return None if d is None else self.clock.finish_probability(d, steps, n)

    def participation_moments(self, n, round=None):
        """Closed form for a deadline without over-selection over a sampler where every
        available client takes part (full participation, Bernoulli): client i takes part
        when available and on time, independently; pi_i and pi_ij alone over the paper's
        sampler (``fa.theory.inclusion_probabilities``); None otherwise (estimate them
        with ``fa.theory.monte_carlo_moments``)."""
        if self.keep is not None:
            return None
        p = self.finish_probabilities(n)
        if p is None:
            return None
        available = self.sampler.available_probabilities(n)
        if available is not None:
            return available_set(available * p, n)
        return None

    def inclusion(self, n, round=None):
        """pi_i = pi_i' p_i and pi_ij = pi_ij' p_i p_j of a deadline over any sampler with
        a closed form (pi' its own; each asked client finishes independently with
        probability p_i); None with over-selection or without closed forms."""
        if self.keep is not None:
            return None
        p, inner = self.finish_probabilities(n), self.sampler.inclusion(n, round)
        if p is None or inner is None:
            return None
        pi, pi2 = inner
        pi2 = pi2 * np.outer(p, p)
        np.fill_diagonal(pi2, pi * p)
        return pi * p, pi2

