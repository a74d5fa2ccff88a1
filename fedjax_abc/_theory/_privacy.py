"""The privacy budget of DP-FedAvg (central DP), from dp-accounting's RDP and PLD accountants.

DP-FedAvg (McMahan et al. 2018) releases, every round, the sum of the participants' updates
clipped to norm c plus N(0, z^2 c^2 I). One client changes the sum by at most c (added or
removed) or 2c (replaced), so the noise multiplier z = std / c and the sampler of the
participants fix the guarantee; c does not enter. Per sampler:

- :class:`~fedjax_abc.FullParticipation`: the Gaussian mechanism, T times (add/remove one
  client, sensitivity c);
- :class:`~fedjax_abc.Bernoulli` ``(q)``, :class:`~fedjax_abc.Poisson` with one q for all:
  the Poisson-subsampled Gaussian mechanism (add/remove one client);
- :class:`~fedjax_abc.UniformWithoutReplacement` ``(S)`` (the paper's sampler): S of n
  without replacement (Wang, Balle, Kasiviswanathan 2019, Theorem 27), replace-one client,
  n public. The replace-one sensitivity of the sum is 2c, and dp-accounting's formula takes
  the noise relative to the sensitivity, so the event carries ``GaussianDpEvent(z / 2)``
  (google/differential-privacy issue #378: ``GaussianDpEvent(z)`` there would understate
  the RDP fourfold). Only the RDP accountant has this event.

No amplification-by-sampling result is used for any other sampler (cyclic, availability,
importance or with-replacement sampling, dropout, ...): they are refused.

The release accounted for is the noisy sum; dividing it by a fixed number (S, or n q:
McMahan et al.'s estimator) is post-processing. Averaging over the random number of a
round's participants would also release that number, which is not accounted for here.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, Sequence, Union

from typing import TYPE_CHECKING

import numpy as np

from fedjax_abc._problems._participation import Poisson
from fedjax_abc._problems._samplers import (
    AbstractSampler,
    Bernoulli,
    FullParticipation,
    UniformWithoutReplacement,
)

if TYPE_CHECKING:
    import dp_accounting as dpa

__all__ = ["dp_epsilon", "dp_event", "dp_noise_multiplier"]

PLD_DISCRETIZATION = 1e-4
"""The PLD accountant's value_discretization_interval: the privacy loss is rounded up to
multiples of it (a pessimistic estimate, so epsilon stays an upper bound; the excess is of
the order of this interval per composition's discretization, ~1e-4 relative here)."""

Z_RELATIVE_TOLERANCE = 1e-6
"""The relative tolerance on z of :func:`dp_noise_multiplier`."""

_Z_MIN, _Z_MAX = 1e-3, 1e8  # the search range of dp_noise_multiplier
_ACCOUNTANTS = ("rdp", "pld")
Rounds = Union[int, Sequence[int], np.ndarray]


def _check_noise_multiplier(z) -> float:
    if isinstance(z, bool) or not isinstance(z, numbers.Real) or not math.isfinite(z) or \
            not z > 0:
        raise ValueError(f"noise_multiplier (z={z!r}) must be a finite number > 0")
    return float(z)


def _check_delta(delta) -> float:
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or \
            not 0.0 < delta < 1.0:
        raise ValueError(f"delta ({delta!r}) must be a number in (0, 1)")
    return float(delta)


def _check_count(name: str, value, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or \
            value < low:
        raise ValueError(f"{name} ({value!r}) must be an integer >= {low}")
    return int(value)


def _check_rounds(rounds) -> tuple[np.ndarray, bool]:
    """(round counts as an int array, whether ``rounds`` was one number)."""
    if np.ndim(rounds) == 0:
        return np.array([_check_count("rounds", rounds, 0)]), True
    r = np.asarray(rounds)
    if r.ndim != 1 or not (r.size == 0 or np.issubdtype(r.dtype, np.integer)) or \
            (r.size and r.min() < 0):
        raise ValueError(f"rounds must be an integer >= 0 or a 1-d sequence of them, got "
                         f"{rounds!r}"[:200])
    return r.astype(np.int64), False


def _check_accountant(accountant) -> str:
    if accountant not in _ACCOUNTANTS:
        raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    return accountant


def _dpa():
    """``dp_accounting``, imported when a privacy budget is first asked for (its import,
    with SciPy's signal processing, takes about a second, which a run without privacy does
    not pay)."""
    import dp_accounting
    import dp_accounting.pld  # noqa: F401  (the accountants' modules, as used below)
    import dp_accounting.rdp  # noqa: F401
    import dp_accounting.rdp.rdp_privacy_accountant  # noqa: F401

    return dp_accounting


def _round_event(z: float, sampler, num_clients) -> tuple[dpa.DpEvent, dpa.NeighboringRelation]:
    """One round's DpEvent and the neighbouring relation it is stated for."""
    n = _check_count("num_clients", num_clients, 1)
    kind = type(sampler)
    if kind is FullParticipation:
        return _dpa().GaussianDpEvent(z), _dpa().NeighboringRelation.ADD_OR_REMOVE_ONE
    if kind is Bernoulli:
        return _dpa().PoissonSampledDpEvent(float(sampler.p), _dpa().GaussianDpEvent(z)), \
            _dpa().NeighboringRelation.ADD_OR_REMOVE_ONE
    if kind is Poisson:
        p = np.asarray(sampler.probs, np.float64)
        if p.ndim == 1 and p.size != n:
            raise ValueError(f"Poisson probs has {p.size} entries, num_clients is {n}")
        if p.size and np.ptp(p) > 1e-12 * p.max():
            raise ValueError("Poisson sampling: no amplification result for unequal "
                             "probabilities; use one probability for all clients")
        return _dpa().PoissonSampledDpEvent(float(p.max()), _dpa().GaussianDpEvent(z)), \
            _dpa().NeighboringRelation.ADD_OR_REMOVE_ONE
    if kind is UniformWithoutReplacement:
        S = sampler.num_sampled
        if n < S:
            raise ValueError(f"num_clients ({n}) must be >= num_sampled (S={S})")
        return _dpa().SampledWithoutReplacementDpEvent(n, S, _dpa().GaussianDpEvent(z / 2)), \
            _dpa().NeighboringRelation.REPLACE_ONE
    if not isinstance(sampler, AbstractSampler):
        raise ValueError(f"sampler must be a fedjax_abc sampler, got {kind.__name__}")
    raise ValueError(f"{kind.__name__}: no amplification-by-sampling result applies to this "
                     f"sampler (supported: FullParticipation, Bernoulli, Poisson with equal "
                     f"probabilities, UniformWithoutReplacement)")


def _accountant(name: str, relation) -> dpa.PrivacyAccountant:
    if name == "rdp":
        return _dpa().rdp.RdpAccountant(neighboring_relation=relation)
    return _dpa().pld.PLDAccountant(relation, value_discretization_interval=PLD_DISCRETIZATION)


def _check_supported(name: str, event: dpa.DpEvent, relation, sampler) -> None:
    if _accountant(name, relation).supports(event):
        return
    hint = ' (use accountant="rdp")' if name == "pld" else ""
    what = ("sampling without replacement"
            if isinstance(event, _dpa().SampledWithoutReplacementDpEvent)
            else type(event).__name__)
    raise ValueError(f"the {name.upper()} accountant does not support {what} "
                     f"({type(sampler).__name__}){hint}")


def _epsilons(name: str, event: dpa.DpEvent, relation, counts: np.ndarray,
              delta: float) -> np.ndarray:
    """Epsilon at delta after each count of rounds of ``event``."""
    out = np.zeros(counts.shape, np.float64)
    if name == "rdp":  # one round's RDP, scaled: what the accountant does for T rounds
        acc = _accountant(name, relation).compose(event)
        orders, rdp = acc.orders, acc.rdp
        for i, t in enumerate(counts):
            if t > 0:
                rdp_epsilon = _dpa().rdp.rdp_privacy_accountant.compute_epsilon
                out[i] = rdp_epsilon(orders, t * rdp, delta)[0]
        return out
    done: dict[int, float] = {}
    for i, t in enumerate(counts):
        t = int(t)
        if t > 0 and t not in done:
            acc = _accountant(name, relation).compose(_dpa().SelfComposedDpEvent(event, t))
            done[t] = float(acc.get_epsilon(delta))
        out[i] = done.get(t, 0.0)
    return out


def dp_event(noise_multiplier: float, sampler: AbstractSampler, rounds: int,
             num_clients: int) -> dpa.DpEvent:
    """dp-accounting's DpEvent of ``rounds`` rounds of DP-FedAvg with this sampler.

    Each round releases sum_i clip_c(Delta_i) + N(0, z^2 c^2 I) over the participants; the
    event is the Gaussian mechanism of noise multiplier z amplified by the sampler, composed
    ``rounds`` times (``NoOpDpEvent`` for 0 rounds):

    - FullParticipation: ``GaussianDpEvent(z)`` (add/remove one client);
    - Bernoulli(q), Poisson with all probabilities q: ``PoissonSampledDpEvent(q,
      GaussianDpEvent(z))`` (add/remove one client);
    - UniformWithoutReplacement(S): ``SampledWithoutReplacementDpEvent(n, S,
      GaussianDpEvent(z / 2))`` (replace one client: sensitivity 2c; dp-accounting's
      formula for this event takes z relative to the sensitivity).

    Any other sampler raises ValueError.

    Example:
      >>> import fedjax_abc as fa
      >>> e = fa.theory.dp_event(1.1, fa.Bernoulli(0.01), rounds=1000, num_clients=10_000)
      >>> e.count, e.event.sampling_probability, e.event.event.noise_multiplier
      (1000, 0.01, 1.1)
    """
    z = _check_noise_multiplier(noise_multiplier)
    T = _check_count("rounds", rounds, 0)
    event, _ = _round_event(z, sampler, num_clients)
    return _dpa().SelfComposedDpEvent(event, T) if T else _dpa().NoOpDpEvent()


def dp_epsilon(noise_multiplier: float, sampler: AbstractSampler, rounds: Rounds,
               delta: float, num_clients: int, accountant: str = "pld"):
    """Epsilon at ``delta`` of ``rounds`` rounds of DP-FedAvg (see :func:`dp_event`).

    The release of each round: the sum of the participants' updates clipped to norm c plus
    N(0, z^2 c^2 I); only z and the sampler matter. ``accountant``: "pld" (privacy loss
    distributions, discretization interval ``PLD_DISCRETIZATION`` = 1e-4, pessimistic:
    tight, an upper bound) or "rdp" (Renyi DP, a looser upper bound; the only one for
    UniformWithoutReplacement). ``rounds``: a number (returns a float) or a 1-d sequence
    of numbers (returns an array: epsilon(t) along a run); 0 rounds cost 0. The PLD
    accountant's time grows with the privacy loss (large T / z^2 takes seconds); the RDP
    one's does not.

    Example:
      >>> import fedjax_abc as fa
      >>> q = fa.Bernoulli(0.01)
      >>> round(fa.theory.dp_epsilon(1.1, q, 1000, 1e-5, 10_000, accountant="rdp"), 3)
      1.712
      >>> round(fa.theory.dp_epsilon(1.1, q, 1000, 1e-5, 10_000), 3)
      1.515
      >>> fa.theory.dp_epsilon(1.1, q, [0, 10, 100], 1e-5, 10_000, "rdp").round(3)
      array([0.   , 0.833, 0.956])
    """
    z = _check_noise_multiplier(noise_multiplier)
    d = _check_delta(delta)
    name = _check_accountant(accountant)
    counts, scalar = _check_rounds(rounds)
    event, relation = _round_event(z, sampler, num_clients)
    _check_supported(name, event, relation, sampler)
    eps = _epsilons(name, event, relation, counts, d)
    return float(eps[0]) if scalar else eps


def _bracket(eps_of: Callable[[float], float], target: float, start: float
             ) -> tuple[float, float]:
    """(lo, hi) with eps_of(lo) > target >= eps_of(hi), by doubling or halving start."""
    z = start
    if eps_of(z) > target:
        while True:
            lo, z = z, 2 * z
            if z > _Z_MAX:
                raise ValueError(f"epsilon ({target}) is not reached with a noise multiplier "
                                 f"up to {_Z_MAX:g}")
            if eps_of(z) <= target:
                return lo, z
    while True:
        hi, z = z, z / 2
        if z < _Z_MIN:
            raise ValueError(f"epsilon ({target}) is reached with every noise multiplier "
                             f"down to {_Z_MIN:g}; no smallest one")
        if eps_of(z) > target:
            return z, hi


def dp_noise_multiplier(epsilon: float, sampler: AbstractSampler, rounds: int, delta: float,
                        num_clients: int, accountant: str = "pld") -> float:
    """The smallest noise multiplier z whose ``rounds`` rounds cost at most ``epsilon``.

    The inverse of :func:`dp_epsilon` in z (same release, adjacency and accountants) by
    ``dp_accounting.calibrate_dp_mechanism``: the z returned has epsilon <= the target and
    is within ``Z_RELATIVE_TOLERANCE`` = 1e-6 (relative) of the smallest such z. The
    search brackets z with the RDP accountant (cheap) before the PLD one.

    Example:
      >>> import fedjax_abc as fa
      >>> z = fa.theory.dp_noise_multiplier(2.0, fa.Bernoulli(0.01), 100, 1e-5, 10_000, "rdp")
      >>> round(z, 4), round(fa.theory.dp_epsilon(z, fa.Bernoulli(0.01), 100, 1e-5, 10_000,
      ...                                          "rdp"), 4)
      (0.8269, 2.0)
    """
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or \
            not 0 < epsilon < math.inf:
        raise ValueError(f"epsilon ({epsilon!r}) must be a finite number > 0")
    target = float(epsilon)
    d = _check_delta(delta)
    name = _check_accountant(accountant)
    T = _check_count("rounds", rounds, 1)
    event, relation = _round_event(1.0, sampler, num_clients)
    _check_supported(name, event, relation, sampler)

    def make_event(z):
        return _dpa().SelfComposedDpEvent(_round_event(z, sampler, num_clients)[0], T)

    def eps_of(acc_name):
        def eps(z):
            acc = _accountant(acc_name, relation).compose(make_event(z))
            return float(acc.get_epsilon(d))
        return eps

    lo, hi = _bracket(eps_of("rdp"), target, 1.0)
    if name == "pld":
        lo, hi = _bracket(eps_of("pld"), target, hi)
    return float(_dpa().calibrate_dp_mechanism(
        lambda: _accountant(name, relation), make_event, target, d,
        bracket_interval=_dpa().ExplicitBracketInterval(lo, hi),
        tol=Z_RELATIVE_TOLERANCE * lo))
