"""A grid file: a TOML document of simulations, checked, and the values it describes.

The file names the problem, sampler, oracle, algorithm, the fixed settings and the grid
axes; see ``examples/grids/`` for two complete files. Keys::

    name = "table2_stepsizes"      # label of the run; without --out the outputs go to
                                   # results/<name> (a plain folder name: no '/', '..')
    seed = 0                       # key = jax.random.key(seed)
    trials = 100
    rounds = 2000
    record_every = 20              # optional (default: about 1000 records)
    local_steps = 10
    stepsize = 1e-4                # unless a grid axis
    num_sampled = 4                # unless a grid axis, or [sampler] is given
    mode = "gather"                # optional, default "mask"
    dtype = "float64"              # optional
    x0_offset = 10.0               # x0 = x* + x0_offset, x* of the run's problem (each grid
                                   # problem's own where the grid varies it); or x0 = [...]

    [problem]                      # a function of fedjax_abc.problems and its arguments;
    name = "huber_offsets"         # seed = K passes jax.random.key(K) as its key
    n = 40
    d_max = 200.0
    seed = 0

    [algorithm]                    # optional: FedAvg (default), FedProx, Scaffold
    name = "FedProx"
    mu = 0.1

    [oracle]                       # optional: the problem's own by default
    name = "GaussianOracle"
    C = 1.0

    [sampler]                      # optional: UniformWithoutReplacement(num_sampled) by default
    name = "Bernoulli"
    p = 0.1

    [grid]                         # axes of fa.sweep, plus "x0_offset" and "problem.<arg>"
    stepsize = [5e-5, 1e-4, 2e-4]
    num_sampled = [4, 40]
    "algorithm.mu" = [0.0, 0.1]

    [slurm]                        # optional: where the parts run (fedjax_abc.repro.submit)

:func:`load_spec` reads and checks a file; :func:`simulation` is the :class:`Simulation` of
one combination of the axes that change shapes (a part of the grid, see ``_grid``) with the
arguments of its run, and :func:`sweep_grid` the ``sweep`` grid of the other axes.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from typing import Optional

import numpy as np

from fedjax_abc._engine._simulate import Simulation
from fedjax_abc._engine._sweep import GRID_NAMES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["GridSpec", "SHAPE_AXES", "build_component", "build_problem", "check_name",
           "load_spec", "simulation", "start", "sweep_grid"]

# grid axes whose values change the compiled program's shapes: one part per combination
SHAPE_AXES = ("num_sampled", "local_steps", "mode", "algorithm", "sampler", "oracle")
_TOP = frozenset({"name", "seed", "trials", "rounds", "record_every", "local_steps",
                  "stepsize", "num_sampled", "mode", "dtype", "x0_offset", "x0", "problem",
                  "algorithm", "oracle", "sampler", "grid", "slurm"})
_REQUIRED = ("trials", "rounds", "local_steps", "problem", "grid")


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """A grid file's contents, checked (``overrides`` applied): ``doc`` what the numbers
    depend on, ``slurm`` the file's ``[slurm]`` table (where the parts run, see
    :mod:`~fedjax_abc.repro.submit`)."""

    doc: dict
    slurm: dict = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.doc.get("name", "grid"))


def load_spec(path: str, trials: Optional[int] = None, rounds: Optional[int] = None) -> GridSpec:
    """Reads and checks a grid file; ``trials`` / ``rounds`` override the file's values.

    Raises:
      ValueError: naming the key that is missing, unknown or of the wrong kind.
    """
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as err:
        raise ValueError(f"cannot read the grid file {path!r}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not a grid file: not text (byte {err.start} is not UTF-8); "
                         "give the TOML file that describes the grid") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path} is not valid TOML: {err}") from None
    unknown = set(doc) - _TOP
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(_TOP)}")
    grid = doc.get("grid") if isinstance(doc.get("grid"), dict) else {}
    missing = [k for k in _REQUIRED if k not in doc and not (k == "local_steps" and k in grid)]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    slurm = doc.pop("slurm", {})
    if not isinstance(slurm, dict):
        raise ValueError(f"{path}: [slurm] must be a table of executor settings")
    if trials is not None:
        doc["trials"] = trials
    if rounds is not None:
        doc["rounds"] = rounds
        if doc.get("record_every") and rounds % doc["record_every"]:
            del doc["record_every"]  # the default for the new T
    if not isinstance(doc["grid"], dict) or not doc["grid"]:
        raise ValueError(f"{path}: [grid] must name at least one axis with a list of values")
    for axis, values in doc["grid"].items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path}: grid axis {axis!r} must be a non-empty list")
    _check_settings(path, doc)
    if sum(a.startswith("problem.") for a in doc["grid"]) > 1:
        raise ValueError(f"{path}: the grid may vary one argument of the problem, not several")
    if "name" not in doc.get("problem", {}):
        raise ValueError(f"{path}: [problem] needs a name (a function of fedjax_abc.problems)")
    if "name" in doc:
        check_name(path, doc["name"])
    return GridSpec(doc, slurm)


def check_name(path: str, name) -> str:
    """A grid's ``name``, which names its default output folder ``results/<name>``: one
    folder name (ValueError, one line, for a path: a separator, ``..``, an absolute path)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{path}: name must be a non-empty string, got {name!r}")
    bad = ("/" in name or "\\" in name or os.sep in name or name in (".", "..")
           or os.path.isabs(name) or any(ord(ch) < 32 for ch in name) or len(name) > 200)
    if bad:
        raise ValueError(f"{path}: name ({name!r}) must be a plain folder name (no '/', '\\', "
                         "'..' or absolute path): it names the output folder results/<name>; "
                         "give another folder with --out")
    return name


def _check_settings(path: str, doc: dict) -> None:
    """The top-level numbers and the choices that would be dropped silently, checked."""
    for key, low in (("trials", 1), ("rounds", 1), ("local_steps", 1), ("record_every", 1),
                     ("num_sampled", 1), ("seed", 0)):
        value = doc.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < low):
            raise ValueError(f"{path}: {key} must be an integer >= {low}, got {value!r}")
    if not 0 <= doc.get("seed", 0) < 2 ** 32:
        raise ValueError(f"{path}: seed must be in [0, 2^32), got {doc['seed']}")
    grid = doc["grid"]
    both = sorted(set(doc) & set(grid) & set(GRID_NAMES))
    if both:  # one place for each setting (a run read one of them and dropped the other)
        raise ValueError(f"{path}: {', '.join(both)} given both as a setting and as a grid "
                         "axis: give each in one place")
    if "stepsize" not in doc and "stepsize" not in grid:
        raise ValueError(f"{path}: give stepsize = ... or a stepsize grid axis")
    if "sampler" in doc and ("num_sampled" in doc or "num_sampled" in grid):
        raise ValueError(f"{path}: [sampler] and num_sampled both choose the clients of a "
                         "round: give one of them")
    if "x0" in doc and "x0_offset" in doc:
        raise ValueError(f"{path}: give x0 or x0_offset, not both")


def _call(where: str, fn, args: dict):
    """``fn(**args)``: an argument ``fn`` does not take is a ValueError naming it and the
    arguments it takes (not a TypeError from deep inside the run)."""
    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(args) - set(params))
        if unknown:
            known = ", ".join(name for name in params if name != "key") or "none"
            raise ValueError(f"{where}: {fn.__name__} takes no argument "
                             f"{', '.join(map(repr, unknown))} (its arguments: {known})")
    missing = [name for name, p in params.items() if p.default is p.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in args]
    if missing:
        raise ValueError(f"{where}: {fn.__name__} needs {', '.join(map(repr, missing))} "
                         f"(its arguments: {', '.join(params) or 'none'})")
    return fn(**args)


# ------------------------------------------------------------------------ building values


def build_problem(table: dict):
    """The problem of a ``[problem]`` table: a function of ``fedjax_abc.problems`` called
    with the table's arguments (``seed = K`` as ``key=jax.random.key(K)``)."""
    import jax

    from fedjax_abc import problems

    args = dict(table)
    name = args.pop("name")
    fn = getattr(problems, name, None)
    if fn is None or name.startswith("_") or name == "huber":
        raise ValueError(f"unknown problem {name!r}; use one of huber_offsets, softplus_huber, "
                         "quadratics, bgd_counterexample")
    if "seed" in args:
        seed = args.pop("seed")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
            raise ValueError(f"[problem] seed must be an integer in [0, 2^32), got {seed!r}")
        args["key"] = jax.random.key(seed)
    elif "key" in inspect.signature(fn).parameters:
        raise ValueError(f"[problem] needs seed = K: {name} draws its data from "
                         "jax.random.key(K)")
    return _call("[problem]", fn, args)


def build_component(kind: str, table: Optional[dict]):
    """The algorithm, oracle or sampler (``kind``) of a table of its class's name and
    arguments; None for None."""
    from fedjax_abc import algorithms
    from fedjax_abc._problems import _oracles, _samplers

    if table is None:
        return None
    args = dict(table)
    name = args.pop("name", None)
    where = {"algorithm": algorithms, "oracle": _oracles, "sampler": _samplers}[kind]
    allowed = {"algorithm": ("FedAvg", "FedProx", "Scaffold"),
               "oracle": ("RademacherOracle", "GaussianOracle", "ExactOracle"),
               "sampler": ("UniformWithoutReplacement", "FullParticipation", "WithReplacement",
                           "Bernoulli")}[kind]
    if name not in allowed:
        raise ValueError(f"[{kind}] name must be one of {', '.join(allowed)}, got {name!r}")
    return _call(f"[{kind}]", getattr(where, name), args)


def start(doc: dict, problem, offset=None) -> np.ndarray:
    """x0: the file's ``x0``, or x* of ``problem`` plus the offset (``offset``, else the
    file's ``x0_offset``, else 0)."""
    if offset is None and "x0" in doc:
        return np.asarray(doc["x0"], dtype=np.float64)
    off = doc.get("x0_offset", 0.0) if offset is None else offset
    return np.asarray(problem.x_star) + float(off)


def _values(axis: str, values: list) -> list:
    """A grid axis's values in the form ``sweep`` takes them (a component's table built)."""
    if axis in ("algorithm", "oracle", "sampler"):
        return [build_component(axis, v if isinstance(v, dict) else {"name": v})
                for v in values]
    return values


def simulation(doc: dict, point: dict, problem) -> tuple[Simulation, dict]:
    """The Simulation of the grid's settings on ``problem`` at one combination of its shape
    axes (``point``: axis -> index of its value), and the per-call arguments of its runs
    (key, trials, the stepsize unless it is a grid axis; x0 is the caller's)."""
    import jax

    grid = doc["grid"]
    settings = dict(rounds=int(doc["rounds"]), local_steps=doc.get("local_steps"),
                    mode=doc.get("mode", "mask"), dtype=doc.get("dtype", "float64"),
                    record_every=doc.get("record_every"), record_x=False,
                    algorithm=build_component("algorithm", doc.get("algorithm")),
                    oracle=build_component("oracle", doc.get("oracle")),
                    sampler=build_component("sampler", doc.get("sampler")))
    if "num_sampled" in doc and settings["sampler"] is None:
        settings["num_sampled"] = doc["num_sampled"]
    for axis, i in point.items():
        settings[axis] = _values(axis, grid[axis])[i]
        if axis == "sampler":
            settings.pop("num_sampled", None)
        if axis == "num_sampled":
            settings["sampler"] = None
    call = dict(key=jax.random.key(int(doc.get("seed", 0))), trials=int(doc["trials"]))
    if "stepsize" in doc:
        call["stepsize"] = doc["stepsize"]
    return Simulation(problem, **settings), call


def sweep_grid(doc: dict, axes: list, problem) -> dict:
    """The ``sweep`` grid of the file's data ``axes`` (in their order), x0 = x* + offset of
    ``problem`` on an ``x0_offset`` axis, the problems of a ``problem.<arg>`` axis as a
    ``problem`` axis."""
    grid, out = doc["grid"], {}
    for axis in axes:
        values = grid[axis]
        if axis.startswith("problem."):
            arg = axis.split(".", 1)[1]
            out["problem"] = [build_problem({**doc["problem"], arg: v}) for v in values]
        elif axis == "x0_offset":
            out["x0"] = [start(doc, problem, v) for v in values]
        else:
            out[axis] = _values(axis, values)
    return out
