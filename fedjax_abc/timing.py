"""Time-aware federated training: a simulated clock, deadlines, over-selection, FedBuff and
FedAsync, every trial in one compiled program.

- Durations: a client's work takes D_i = K_i s_i c_i + m_i (:class:`Clock`): speed factors
  s_i fixed per trial (a law, or given per client, :func:`speeds_from_file`), the time of
  a step c_i and of communication m_i drawn per round, from the laws :class:`Constant`,
  :class:`Exponential`, :class:`ShiftedExponential`, :class:`LogNormal`, :class:`Pareto`.
- Synchronous rounds on the clock (:class:`Timed`, a sampler for ``fa.simulate``):
  wait-for-all, a deadline, over-selection; the run records the clock as the metric
  ``time``; inclusion probabilities in closed form where the laws allow
  (``fa.theory.inclusion_probabilities``), by Monte Carlo otherwise
  (``fa.theory.monte_carlo_moments``).
- Asynchronous aggregation (the :class:`Buffered` schedule, :func:`simulate_async`):
  :class:`FedBuff` (Nguyen et al. 2022) and :class:`FedAsync` (Xie et al. 2019) with
  staleness functions :class:`ConstantStaleness`, :class:`PolynomialStaleness`,
  :class:`HingeStaleness`; the staleness counts (:func:`staleness`,
  :func:`staleness_distribution`, :func:`plot_staleness`); :func:`sweep_async` over the
  laws' and the rule's parameters, C and K.
- Against time: ``SimResult.on_time_grid`` and ``SimResult.plot(x="time")`` put the
  trials on a common time grid for means and bands.
"""

from fedjax_abc._algorithms._buffered import (
    AbstractAsyncRule,
    AbstractStaleness,
    ConstantStaleness,
    FedAsync,
    FedBuff,
    HingeStaleness,
    PolynomialStaleness,
)
from fedjax_abc._engine._async import (AsyncState, Buffered, plot_staleness, simulate_async,
                                       staleness, staleness_distribution)
from fedjax_abc._engine._async_sweep import sweep_async
from fedjax_abc._engine._timegrid import OnTimeGrid, on_time_grid
from fedjax_abc._problems._time import (
    AbstractLaw,
    Clock,
    Constant,
    Exponential,
    LogNormal,
    Pareto,
    ShiftedExponential,
    speeds_from_file,
)
from fedjax_abc._problems._timed import Timed

__all__ = [
    "AbstractAsyncRule",
    "AbstractLaw",
    "AbstractStaleness",
    "AsyncState",
    "Buffered",
    "Clock",
    "Constant",
    "ConstantStaleness",
    "Exponential",
    "FedAsync",
    "FedBuff",
    "HingeStaleness",
    "LogNormal",
    "OnTimeGrid",
    "Pareto",
    "PolynomialStaleness",
    "ShiftedExponential",
    "Timed",
    "on_time_grid",
    "plot_staleness",
    "simulate_async",
    "speeds_from_file",
    "staleness",
    "staleness_distribution",
    "sweep_async",
]
