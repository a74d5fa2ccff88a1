"""Federated algorithms as values: pass one to ``simulate(..., algorithm=...)``.

- :class:`FedAvg`: Algorithm 1, with an optional server stepsize eta_g [10].
- :class:`FedProx`: proximal local objectives [24].
- :class:`Scaffold`: control variates, client state (option II of [11]).
- :class:`FedOpt`: any optax optimizer on the server (FedAvgM, FedAdam, FedYogi, FedAdagrad).
- :class:`AbstractAlgorithm`: subclass it for your own (four pure functions).

Example:
  >>> import fedjax_abc as fa
  >>> fa.algorithms.FedProx(mu=-1.0)
  Traceback (most recent call last):
  ...
  ValueError: mu must be >= 0, got -1.0
"""

from fedjax_abc._algorithms._base import AbstractAlgorithm, RoundInfo
from fedjax_abc._algorithms._fedavg import FedAvg, ServerState, local_run
from fedjax_abc._algorithms._fedopt import FedOpt, FedOptState
from fedjax_abc._algorithms._fedprox import FedProx
from fedjax_abc._algorithms._scaffold import Scaffold, ScaffoldState

__all__ = [
    "AbstractAlgorithm",
    "FedAvg",
    "FedOpt",
    "FedOptState",
    "FedProx",
    "RoundInfo",
    "Scaffold",
    "ScaffoldState",
    "ServerState",
    "local_run",
]
