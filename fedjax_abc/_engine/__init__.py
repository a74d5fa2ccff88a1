"""The engine: the driver of every schedule, the synchronous round, results, sweeps, grid files.

The names below are what the layers above the engine (the theory, the statistics, the
reproduction and the command line) use; they import them from here, never from the
engine's private modules. The public modules (``fedjax_abc``, ``fedjax_abc.timing``,
``fedjax_abc.decentral``) re-export the engine's public names.
"""

from fedjax_abc._engine._checkpoint import check_writable
from fedjax_abc._engine._environment import environment, library_digest
from fedjax_abc._engine._grid import SAVE_WAITS, part_count, ranges, run_parts, task_share
from fedjax_abc._engine._grid_spec import GridSpec, check_name, load_spec
from fedjax_abc._engine._labelled import attributes as result_attributes
from fedjax_abc._engine._labelled import save as save_result
from fedjax_abc._engine._memory import check_points
from fedjax_abc._engine._plan import default_record_every, num_records, stepsize_array
from fedjax_abc._engine._plot import plot_band
from fedjax_abc._engine._progress import AbstractProgressMeter
from fedjax_abc._engine._result import Z95, SimResult, Summary, SweepResult, summarize
from fedjax_abc._engine._simulate import Simulation, simulate
from fedjax_abc._engine._sweep import GRID_NAMES, sweep

__all__ = ["AbstractProgressMeter", "GRID_NAMES", "GridSpec", "SAVE_WAITS", "SimResult",
           "Simulation", "Summary", "SweepResult", "Z95", "check_name", "check_points",
           "check_writable", "default_record_every", "environment", "library_digest",
           "load_spec", "num_records", "part_count", "plot_band", "ranges", "result_attributes",
           "run_parts", "save_result", "simulate", "stepsize_array", "summarize", "sweep",
           "task_share"]
