"""fedjax_abc: Monte Carlo simulation of FedAvg with partial participation under the ABC condition.

Reference: "On Federated Averaging with Partial Participation under a General Variance
Condition" (Wang, Huang, Johansson, Pu). Importing the package switches on JAX's float64
support (``jax_enable_x64``): results compared with the paper are computed in float64 by
default; ``simulate(..., dtype="float32")`` is the faster, less precise option. It also
makes JAX's CPU backend one device per core, where JAX still allows it and the user has not
chosen otherwise (``FEDJAX_ABC_CPU_CORES``; see ``fedjax_abc._engine._cores``), so that
``simulate`` shards its trials over every core with the same numbers.
"""

import jax

jax.config.update("jax_enable_x64", True)

from fedjax_abc._engine._cores import default_cpu_cores  # noqa: E402

default_cpu_cores()  # every core a CPU device while JAX allows it (see _engine._cores)

from fedjax_abc import algorithms, data, problems, theory, transforms  # noqa: E402
from fedjax_abc._algorithms._fedavg import local_run  # noqa: E402
from fedjax_abc._engine._random import client_noise  # noqa: E402
from fedjax_abc._engine._round import fedavg_round  # noqa: E402
from fedjax_abc._problems._oracles import (  # noqa: E402
    AbstractOracle,
    ExactOracle,
    GaussianOracle,
    RademacherOracle,
)
from fedjax_abc._problems._minibatch import MinibatchOracle  # noqa: E402
from fedjax_abc._problems._local_work import (  # noqa: E402
    AbstractLocalSteps,
    GeometricSteps,
    PerClientSteps,
    PmfSteps,
    UniformSteps,
)
from fedjax_abc._problems._problem import Client, Problem, make_problem  # noqa: E402
from fedjax_abc._engine._result import (  # noqa: E402
    DivergenceWarning,
    SimResult,
    Summary,
    SweepResult,
    summarize,
)
from fedjax_abc._engine._labelled import load  # noqa: E402
from fedjax_abc._problems._samplers import (  # noqa: E402
    AbstractSampler,
    Bernoulli,
    FullParticipation,
    UniformWithoutReplacement,
    WithReplacement,
    sample_mask,
)
from fedjax_abc._problems._participation import (  # noqa: E402
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
from fedjax_abc._engine._cores import use_cpu_cores  # noqa: E402
from fedjax_abc._engine._progress import (  # noqa: E402
    AbstractProgressMeter,
    CallbackProgressMeter,
    NoProgressMeter,
    TextProgressMeter,
    TqdmProgressMeter,
)
from fedjax_abc._engine._plan import stepsize_array  # noqa: E402
from fedjax_abc._engine._simulate import Simulation, simulate  # noqa: E402
from fedjax_abc._engine._sweep import sweep  # noqa: E402
from fedjax_abc._engine._tune import TuneResult, Tuned, tune  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "AbstractProgressMeter",
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
    "Bernoulli",
    "Client",
    "client_noise",
    "DivergenceWarning",
    "data",
    "ExactOracle",
    "FullParticipation",
    "GaussianOracle",
    "GeometricSteps",
    "MinibatchOracle",
    "PerClientSteps",
    "PmfSteps",
    "Problem",
    "RademacherOracle",
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
    "simulate",
    "stepsize_array",
    "sweep",
    "theory",
    "transforms",
    "tune",
    "Tuned",
    "TuneResult",
    "summarize",
    "uniform_among",
    "use_cpu_cores",
]
