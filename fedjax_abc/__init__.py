"""fedjax_abc: Monte Carlo simulation of FedAvg with partial participation under the ABC condition.

Reference: "On Federated Averaging with Partial Participation under a General Variance
Condition" (Wang, Huang, Johansson, Pu). Importing the package changes no JAX setting. Two
lines right after the imports make the set-up its results assume, as in the JAX ecosystem's
own libraries::

    import jax
    import fedjax_abc as fa

    jax.config.update("jax_enable_x64", True)  # float64: results compared with the paper
    fa.use_cpu_cores()  # one CPU device per core, over which simulate shards its trials

A float64 run (the default dtype) without ``jax_enable_x64`` is refused in one line that
names the fix, as is a problem built without it; a run on one CPU device of a machine with
several cores warns once (see :func:`use_cpu_cores`).
"""

from fedjax_abc import (algorithms, data, decentral, problems, robust, theory, timing,
                        transforms)
from fedjax_abc._algorithms._fedavg import local_run
from fedjax_abc._engine._random import client_noise
from fedjax_abc._engine._round import fedavg_round
from fedjax_abc._problems._oracles import (
    AbstractOracle,
    ExactOracle,
    GaussianOracle,
    RademacherOracle,
)
from fedjax_abc._problems._minibatch import MinibatchOracle
from fedjax_abc._problems._local_work import (
    AbstractLocalSteps,
    GeometricSteps,
    PerClientSteps,
    PmfSteps,
    UniformSteps,
)
from fedjax_abc._problems._problem import Client, Problem, make_problem
from fedjax_abc._engine._result import (
    DivergenceWarning,
    SimResult,
    Summary,
    SweepResult,
    load,
    summarize,
)
from fedjax_abc._problems._moments import ParticipationMoments
from fedjax_abc._problems._samplers import (
    AbstractSampler,
    AbstractStatelessSampler,
    Bernoulli,
    FullParticipation,
    UniformWithoutReplacement,
    WithReplacement,
    sample_mask,
    tail_capacity,
)
from fedjax_abc._problems._participation import (
    AbstractAvailability,
    Cyclic,
    Dropout,
    ImportanceSampler,
    MarkovAvailability,
    Poisson,
    SizeWeighted,
    TraceAvailability,
    uniform_among,
)
from fedjax_abc._engine._cores import use_cpu_cores
from fedjax_abc._engine._environment import __version__
from fedjax_abc._engine._progress import (
    AbstractProgressMeter,
    CallbackProgressMeter,
    NoProgressMeter,
    TextProgressMeter,
    TqdmProgressMeter,
)
from fedjax_abc._engine._plan import stepsize_array
from fedjax_abc._engine._schedule import AbstractSchedule, Rounds
from fedjax_abc._engine._simulate import Simulation, simulate
from fedjax_abc._engine._sweep import sweep
from fedjax_abc._engine._tune import TuneResult, Tuned, tune
from fedjax_abc import stats

__all__ = [
    "AbstractProgressMeter",
    "AbstractSchedule",
    "CallbackProgressMeter",
    "NoProgressMeter",
    "TextProgressMeter",
    "TqdmProgressMeter",
    "AbstractAvailability",
    "TraceAvailability",
    "SizeWeighted",
    "Poisson",
    "MarkovAvailability",
    "ImportanceSampler",
    "Dropout",
    "Cyclic",
    "AbstractLocalSteps",
    "AbstractOracle",
    "algorithms",
    "AbstractSampler",
    "AbstractStatelessSampler",
    "Bernoulli",
    "Client",
    "client_noise",
    "DivergenceWarning",
    "data",
    "decentral",
    "ExactOracle",
    "FullParticipation",
    "GaussianOracle",
    "GeometricSteps",
    "MinibatchOracle",
    "ParticipationMoments",
    "PerClientSteps",
    "PmfSteps",
    "Problem",
    "RademacherOracle",
    "Rounds",
    "robust",
    "SimResult",
    "Simulation",
    "Summary",
    "SweepResult",
    "UniformSteps",
    "UniformWithoutReplacement",
    "WithReplacement",
    "fedavg_round",
    "load",
    "local_run",
    "make_problem",
    "problems",
    "sample_mask",
    "tail_capacity",
    "simulate",
    "stats",
    "stepsize_array",
    "sweep",
    "theory",
    "timing",
    "transforms",
    "tune",
    "Tuned",
    "TuneResult",
    "summarize",
    "uniform_among",
    "use_cpu_cores",
]
