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
- fairness: :class:`QFFL` (q-FedAvg's loss-weighted step), :class:`AFL` (agnostic FL's
  minimax over the clients' weights, :func:`project_simplex`).
- personalisation: :class:`IFCA` (k cluster models), :class:`FedRep` and :class:`FedPer`
  (a shared body and personal heads, :class:`AbstractBodyHead`; :func:`head_mask` and
  :func:`parameter_paths` for a ``from_model`` problem); :class:`Ditto` (a regularised
  personal model beside FedAvg's), :class:`PFedMe` (Moreau envelopes), :class:`PerFedAvg`
  (federated MAML, Hessian-free or first-order), :class:`APFL` (a mixed personal model,
  fixed or learned mixing); :class:`FineTuned` evaluates any algorithm's clients after
  local fine-tuning.
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
from fedjax_abc._algorithms._afl import AFL, AFLState, project_simplex
from fedjax_abc._algorithms._apfl import APFL, APFLClient
from fedjax_abc._algorithms._body_head import AbstractBodyHead, head_mask, parameter_paths
from fedjax_abc._algorithms._ditto import Ditto
from fedjax_abc._algorithms._fedavg import (AbstractLocalSGD, FedAvg, ServerState, local_run,
                                            sgd_step)
from fedjax_abc._algorithms._feddyn import FedDyn, FedDynState
from fedjax_abc._algorithms._fedexp import FedExP, fedexp_stepsize
from fedjax_abc._algorithms._fednova import FedNova, momentum_norm
from fedjax_abc._algorithms._fedopt import (FedAdagrad, FedAdam, FedAvgM, FedOpt, FedOptState,
                                            FedYogi)
from fedjax_abc._algorithms._fedper import FedPer
from fedjax_abc._algorithms._fedprox import FedProx
from fedjax_abc._algorithms._fedrep import FedRep
from fedjax_abc._algorithms._finetune import FineTuned
from fedjax_abc._algorithms._ifca import IFCA, IFCAState
from fedjax_abc._algorithms._mime import Mime, MimeState
from fedjax_abc._algorithms._mimelite import MimeLite, MimeLiteState
from fedjax_abc._algorithms._perfedavg import PerFedAvg
from fedjax_abc._algorithms._pfedme import PFedMe
from fedjax_abc._algorithms._qffl import QFFL
from fedjax_abc._algorithms._scaffnew import Scaffnew, ScaffnewClient
from fedjax_abc._algorithms._scaffold import Scaffold, ScaffoldState

__all__ = [
    "AFL",
    "AFLState",
    "APFL",
    "APFLClient",
    "AbstractAlgorithm",
    "AbstractBodyHead",
    "AbstractLocalSGD",
    "AbstractServerState",
    "Ditto",
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
    "FedPer",
    "FedProx",
    "FedRep",
    "FedYogi",
    "FineTuned",
    "IFCA",
    "IFCAState",
    "LocalInfo",
    "LocalObjective",
    "Mime",
    "MimeLite",
    "MimeLiteState",
    "MimeState",
    "PFedMe",
    "PerFedAvg",
    "QFFL",
    "RoundInfo",
    "Scaffnew",
    "ScaffnewClient",
    "Scaffold",
    "ScaffoldState",
    "ServerState",
    "fedexp_stepsize",
    "head_mask",
    "local_run",
    "momentum_norm",
    "parameter_paths",
    "project_simplex",
    "sgd_step",
]
