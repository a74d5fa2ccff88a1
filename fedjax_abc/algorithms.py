"""Federated algorithms as values: pass one to ``simulate(..., algorithm=...)``.

- :class:`FedAvg`: Algorithm 1, with an optional server stepsize eta_g [10].
- :class:`FedProx`: proximal local objectives [24].
- :class:`Scaffold`: control variates, client state (option II of [11]).
- :class:`FedOpt`: any optax optimizer on the server; :func:`FedAvgM`, :func:`FedAdam`,
  :func:`FedYogi`, :func:`FedAdagrad` name four of them.
- :class:`FedNova`: normalised averaging against objective inconsistency.
- :class:`FedDyn`: dynamic regularisation, client state.
- :class:`FedExP`: an extrapolated server step.
- :class:`Scaffnew`: ProxSkip's control variates, communication with probability p.
- :class:`Mime`: local steps with the server's frozen momentum and an SVRG correction
  from the participants' full gradients (two communications a round).
- :class:`MimeLite`: local steps with the server's frozen momentum.
- :class:`AbstractAlgorithm`: subclass it for your own (six pure functions, two more for a
  first communication; the engine owns the loops over rounds and local steps); its server
  state subclasses
  :class:`AbstractServerState`; :class:`AbstractLocalSGD` gives plain local SGD clients,
  leaving ``init`` and ``server_update``.

Example:
  >>> import fedjax_abc as fa
  >>> fa.algorithms.FedProx(mu=-1.0)
  Traceback (most recent call last):
  ...
  ValueError: mu must be >= 0, got -1.0
"""

from fedjax_abc._algorithms._base import (AbstractAlgorithm, AbstractServerState, LocalInfo,
                                          LocalObjective, RoundInfo)
from fedjax_abc._algorithms._fedavg import (AbstractLocalSGD, FedAvg, ServerState, local_run,
                                            sgd_step)
from fedjax_abc._algorithms._feddyn import FedDyn, FedDynState
from fedjax_abc._algorithms._fedexp import FedExP, fedexp_stepsize
from fedjax_abc._algorithms._fednova import FedNova, momentum_norm
from fedjax_abc._algorithms._fedopt import (FedAdagrad, FedAdam, FedAvgM, FedOpt, FedOptState,
                                            FedYogi)
from fedjax_abc._algorithms._fedprox import FedProx
from fedjax_abc._algorithms._mime import Mime, MimeState
from fedjax_abc._algorithms._mimelite import MimeLite, MimeLiteState
from fedjax_abc._algorithms._scaffnew import Scaffnew, ScaffnewClient
from fedjax_abc._algorithms._scaffold import Scaffold, ScaffoldState

__all__ = [
    "AbstractAlgorithm",
    "AbstractLocalSGD",
    "AbstractServerState",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedDyn",
    "FedDynState",
    "FedExP",
    "FedNova",
    "FedOpt",
    "FedOptState",
    "FedProx",
    "FedYogi",
    "LocalInfo",
    "LocalObjective",
    "Mime",
    "MimeLite",
    "MimeLiteState",
    "MimeState",
    "RoundInfo",
    "Scaffnew",
    "ScaffnewClient",
    "Scaffold",
    "ScaffoldState",
    "ServerState",
    "fedexp_stepsize",
    "local_run",
    "momentum_norm",
    "sgd_step",
]
