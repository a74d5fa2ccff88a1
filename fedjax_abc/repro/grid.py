"""``fedjax-abc run GRID.toml``: a grid of simulations described in a file.

The file (TOML) names the problem, sampler, oracle, algorithm, the fixed settings and the
grid axes; see ``examples/grids/`` for two complete files. Keys::

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

Output folder: ``result.nc`` (the labelled :class:`~fedjax_abc.SweepResult`,
``fa.load``), ``summary.csv`` (final gap and ||grad f||^2 per grid point with 95%
intervals), ``curves.png`` (mean gap and ||grad f||^2 against rounds with 95% bands, one
curve per grid point) and ``final_<axis>.png`` (the final gap against each axis).

Resuming: the grid runs in parts, one per combination of the axes that change shapes
(num_sampled, local_steps, mode, algorithm, sampler, problem sizes); each part is one
``fa.sweep`` over the data axes, saved to ``parts/<i>.nc`` when done. Rerunning the same
command skips the saved parts: an interrupted grid resumes at the part where it stopped.
Each part stores a fingerprint (SHA-256 of the grid's settings, the fedjax_abc version and
the part's place in the grid): a part written by another grid file, other settings or
another version is refused, never reported under this grid's labels.

Several processes or machines: ``fedjax-abc run GRID.toml --out DIR --part I --of N`` runs
the parts c with c mod N = I (inside a Slurm job array, ``--part`` and ``--of`` default to
the task's index and the array's size); whichever task saves the last part joins them all,
and ``fedjax-abc merge GRID.toml --out DIR`` joins them later (naming the parts not saved
yet, writing nothing then). Every part is computed as in one process, so the joined
result.nc is that process's, bit for bit. A Slurm array over a shared folder::

    #SBATCH --array=0-3 --cpus-per-task=2
    fedjax-abc run GRID.toml --out results/grid --quiet
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import sys
import time
from typing import Any, Optional

import numpy as np

__all__ = ["GridSpec", "load_spec", "part_count", "ranges", "run_grid", "task_share"]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# grid axes whose values change the compiled program's shapes: one part per combination
SHAPE_AXES = ("num_sampled", "local_steps", "mode", "algorithm", "sampler", "oracle")
_TOP = {"name", "seed", "trials", "rounds", "record_every", "local_steps", "stepsize",
        "num_sampled", "mode", "dtype", "x0_offset", "x0", "problem", "algorithm", "oracle",
        "sampler", "grid", "slurm"}
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
    missing = [k for k in _REQUIRED if k not in doc]
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


def default_out(spec: GridSpec, results: str = "results") -> str:
    """``results/<name>``, refused (ValueError, one line) where it resolves outside
    ``results`` (a link to another folder): a grid's outputs stay in the folder chosen."""
    out = os.path.join(results, check_name("the grid file", spec.name))
    base, real = os.path.realpath(results), os.path.realpath(out)
    if os.path.commonpath([base, real]) != base or real == base:
        raise ValueError(f"the grid's output folder {out} resolves to {real}, outside "
                         f"{base}: refused; pass --out to write elsewhere")
    return out


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
    from fedjax_abc._engine import GRID_NAMES

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
    import inspect

    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(args) - set(params))
        if unknown:
            known = ", ".join(name for name in params if name != "key") or "none"
            raise ValueError(f"{where}: {fn.__name__} takes no argument "
                             f"{', '.join(map(repr, unknown))} (its arguments: {known})")
    return fn(**args)


# ------------------------------------------------------------------------ building values


def _problem(table: dict):
    import jax

    import fedjax_abc as fa

    args = dict(table)
    name = args.pop("name")
    fn = getattr(fa.problems, name, None)
    if fn is None or name.startswith("_") or name == "huber":
        raise ValueError(f"unknown problem {name!r}; use one of huber_offsets, softplus_huber, "
                         "quadratics, bgd_counterexample")
    if "seed" in args:
        seed = args.pop("seed")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
            raise ValueError(f"[problem] seed must be an integer in [0, 2^32), got {seed!r}")
        args["key"] = jax.random.key(seed)
    return _call("[problem]", fn, args)


def _component(kind: str, table: Optional[dict]):
    import fedjax_abc as fa

    if table is None:
        return None
    args = dict(table)
    name = args.pop("name", None)
    where = {"algorithm": fa.algorithms, "oracle": fa, "sampler": fa}[kind]
    allowed = {"algorithm": ("FedAvg", "FedProx", "Scaffold"),
               "oracle": ("RademacherOracle", "GaussianOracle", "ExactOracle"),
               "sampler": ("UniformWithoutReplacement", "FullParticipation", "WithReplacement",
                           "Bernoulli")}[kind]
    if name not in allowed:
        raise ValueError(f"[{kind}] name must be one of {', '.join(allowed)}, got {name!r}")
    return _call(f"[{kind}]", getattr(where, name), args)


def _x0(doc: dict, problem, offset=None):
    if offset is None and "x0" in doc:
        return np.asarray(doc["x0"], dtype=np.float64)
    off = doc.get("x0_offset", 0.0) if offset is None else offset
    return np.asarray(problem.x_star) + float(off)


def _grid_values(doc: dict, axis: str, values: list):
    """The grid's values in the form ``fa.sweep`` takes them."""
    if axis in ("algorithm", "oracle", "sampler"):
        return [_component(axis, v if isinstance(v, dict) else {"name": v}) for v in values]
    return values


# ---------------------------------------------------------------------------- the parts


def _parts(doc: dict):
    """(shape axes, data axes, the list of shape points), in the grid's axis order."""
    grid = doc["grid"]
    shape_axes = [a for a in grid if a in SHAPE_AXES]
    data_axes = [a for a in grid if a not in SHAPE_AXES]
    combos = list(itertools.product(*(range(len(grid[a])) for a in shape_axes)))
    return shape_axes, data_axes, combos


def part_count(spec: GridSpec) -> int:
    """How many parts the grid runs in (one per combination of its shape axes)."""
    return len(_parts(spec.doc)[2])


def _check_size(doc: dict) -> None:
    """The results of the whole grid (every part is kept until they are joined) against the
    memory, before the first part runs: one line (ValueError) if they cannot fit. d is the
    [problem] table's ``d`` (1 without one), the largest of a ``problem.d`` axis."""
    from fedjax_abc._engine import check_points

    trials, rounds, k = doc.get("trials"), doc.get("rounds"), doc.get("record_every")
    numbers = (trials, rounds) + (() if k is None else (k,))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in numbers):
        return  # fa.sweep refuses them, naming the setting
    dims = [doc["problem"].get("d", 1)] + list(doc["grid"].get("problem.d", ()))
    dims = [v for v in dims if isinstance(v, int) and not isinstance(v, bool)] or [1]
    check_points([len(v) for v in doc["grid"].values()], trials=trials, rounds=rounds,
                         record_every=k, dim=max(dims),
                         itemsize=4 if doc.get("dtype") == "float32" else 8, record_x=False)


def _run_part(doc: dict, shape_point: dict, data_axes: list, progress) -> Any:
    """``fa.sweep`` over the data axes at one combination of the shape axes."""
    import jax

    import fedjax_abc as fa

    grid = doc["grid"]
    base_problem = _problem(doc["problem"])
    kw = dict(key=jax.random.key(int(doc.get("seed", 0))), trials=int(doc["trials"]),
              rounds=int(doc["rounds"]), local_steps=doc.get("local_steps"),
              mode=doc.get("mode", "mask"), dtype=doc.get("dtype", "float64"),
              record_every=doc.get("record_every"), record_x=False,
              algorithm=_component("algorithm", doc.get("algorithm")),
              oracle=_component("oracle", doc.get("oracle")),
              sampler=_component("sampler", doc.get("sampler")))
    if "stepsize" in doc:
        kw["stepsize"] = doc["stepsize"]
    if "num_sampled" in doc and kw["sampler"] is None:
        kw["num_sampled"] = doc["num_sampled"]
    for axis, i in shape_point.items():
        value = _grid_values(doc, axis, grid[axis])[i]
        kw[axis] = value
        if axis == "sampler":
            kw.pop("num_sampled", None)
        if axis == "num_sampled":
            kw["sampler"] = None
    sweep_grid, problems = {}, None
    for axis in data_axes:
        values = grid[axis]
        if axis.startswith("problem."):
            arg = axis.split(".", 1)[1]
            problems = [_problem({**doc["problem"], arg: v}) for v in values]
            sweep_grid["problem"] = problems
        elif axis == "x0_offset":
            sweep_grid["x0"] = [_x0(doc, base_problem, v) for v in values]
        else:
            sweep_grid[axis] = _grid_values(doc, axis, values)
    if "x0" not in sweep_grid:
        kw["x0"] = _x0(doc, base_problem)
    if not sweep_grid:  # every axis changes shapes: a grid of one point
        sweep_grid["stepsize"] = [kw.pop("stepsize")]
    kw = {k: v for k, v in kw.items() if v is not None or k in ("record_every",)}
    if problems is not None and "x0" not in doc:
        res = _sweep_offsets_per_problem(doc, problems, sweep_grid, progress, kw)
    else:
        res = fa.sweep(base_problem, grid=sweep_grid, progress=progress, **kw)
    # the file's axis names and values as labels (x0_offset, problem.<arg>)
    axes = {}
    for axis, name in zip(data_axes, res.axes):
        axes[axis] = tuple(grid[axis]) if axis.startswith("problem.") or axis == "x0_offset" \
            else res.axes[name]
    return fa.SweepResult(axes=axes, results=res.results)


def _sweep_offsets_per_problem(doc: dict, problems: list, sweep_grid: dict, progress, kw: dict):
    """``fa.sweep`` over ``sweep_grid`` with x0 = x* + offset, x* of each grid problem's own.

    One sweep per problem (the same shapes: one compilation), its results put back in the
    C order of ``sweep_grid``'s axes."""
    import fedjax_abc as fa

    names = list(sweep_grid)
    rest = [a for a in names if a != "problem"]
    per = []
    for problem in problems:
        grid, own = {a: sweep_grid[a] for a in rest}, dict(kw)
        if "x0" in grid:  # an x0_offset axis
            grid["x0"] = [_x0(doc, problem, v) for v in doc["grid"]["x0_offset"]]
        else:
            own["x0"] = _x0(doc, problem)
        if not grid:
            grid["stepsize"] = [own.pop("stepsize")]
        shifted = progress
        if callable(progress):  # the P sweeps counted as one: sweep k's rounds after k others'
            def shifted(done, total, seconds, k=len(per)):
                progress(k * total + done, len(problems) * total, seconds)
        per.append(fa.sweep(problem, grid=grid, progress=shifted, **own))
    sizes = [len(sweep_grid[a]) for a in rest]
    results = []
    for index in itertools.product(*(range(len(sweep_grid[a])) for a in names)):
        at = dict(zip(names, index))
        flat = int(np.ravel_multi_index([at[a] for a in rest], sizes)) if rest else 0
        results.append(per[at["problem"]].results[flat])
    axes = {a: (tuple(range(len(problems))) if a == "problem" else per[0].axes[a])
            for a in names}
    return fa.SweepResult(axes=axes, results=tuple(results))


def _label(value, axis: str, i: int):
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, dict):
        args = ", ".join(f"{k}={v}" for k, v in value.items() if k != "name")
        return f"{value.get('name', axis)}({args})" if args else str(value.get("name", axis))
    return f"{axis}[{i}]"


def environment() -> dict:
    """What a part's numbers depend on besides the grid: the engine's environment record."""
    from fedjax_abc._engine import environment as engine_environment

    return engine_environment()


def part_fingerprint(doc: dict, point: dict, environment: dict) -> str:
    """SHA-256 of what a part's numbers depend on: the grid's settings (``doc``), the
    part's combination of the shape axes (``point``) and the :func:`environment`: a part
    of another grid, or computed in another environment, is not this grid's."""
    text = json.dumps({"grid": doc, "part": point, **environment}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _saved_part(path: str, fingerprint: str, parts: str, load: bool = True):
    """The part saved at ``path`` if this grid wrote it (``load``: else only checked);
    ValueError (one line) if not."""
    import fedjax_abc as fa
    from fedjax_abc._engine import result_attributes, save_result

    if result_attributes(path).get("grid_part") != fingerprint:
        raise ValueError(f"{path} was not written by this grid (another grid file, other "
                         f"settings, other fedjax_abc code, another JAX or jaxlib version or "
                         f"device kind): use another --out or delete {parts}")
    return fa.load(path) if load else None


def task_share(part: Optional[int], of: Optional[int], environ=os.environ) -> tuple:
    """(I, N): this task's share of a grid's parts, from ``--part I --of N`` or, where both
    are None, from a Slurm job array (task I = (``SLURM_ARRAY_TASK_ID`` -
    ``SLURM_ARRAY_TASK_MIN``) / ``SLURM_ARRAY_TASK_STEP`` of ``SLURM_ARRAY_TASK_COUNT``, so
    ``--array=0-6:2`` is tasks 0-3 of 4); (None, None) for the whole grid. ValueError (one
    line) on a bad share."""
    if part is None and of is None and "SLURM_ARRAY_TASK_ID" in environ:
        try:
            offset = int(environ["SLURM_ARRAY_TASK_ID"]) - int(environ.get("SLURM_ARRAY_TASK_MIN", 0))
            step = int(environ.get("SLURM_ARRAY_TASK_STEP", 1))
            of = int(environ["SLURM_ARRAY_TASK_COUNT"])
        except (KeyError, ValueError):
            raise ValueError("a Slurm job array needs SLURM_ARRAY_TASK_ID and "
                             "SLURM_ARRAY_TASK_COUNT as integers; or pass --part I --of N") \
                from None
        if step < 1 or offset % step or not 0 <= offset // step < of:
            raise ValueError(f"Slurm array task {environ['SLURM_ARRAY_TASK_ID']} is not one of "
                             f"the {of} tasks from SLURM_ARRAY_TASK_MIN in steps of {step}; "
                             "use --array=A-B or --array=A-B:STEP, or pass --part I --of N")
        part = offset // step
    if (part is None) != (of is None):
        raise ValueError("give --part I and --of N together")
    if part is not None and not 0 <= part < of:
        raise ValueError(f"--part ({part}) must be in [0, --of) = [0, {of})")
    return part, of


# seconds between the tries of a part's save that failed (a full disk, a folder gone);
# the part is kept in memory meanwhile
SAVE_WAITS = (10.0, 30.0, 60.0)


def _part_bytes(doc: dict, points: int) -> int:
    """About the bytes of a saved part of ``points`` grid points: each point's records
    (gap, ||grad f||^2 and the trials' flags), x_T and its config."""
    from fedjax_abc._engine import default_record_every, num_records

    trials, rounds, k = int(doc["trials"]), int(doc["rounds"]), doc.get("record_every")
    if not k or rounds % k:
        k = default_record_every(rounds)
    dims = [doc["problem"].get("d", 1)] + list(doc["grid"].get("problem.d", ()))
    d = max([v for v in dims if isinstance(v, int) and not isinstance(v, bool)] or [1])
    each = 8 * trials * (2 * num_records(rounds, k) + d + 2) + 16_384
    return points * each + 65_536


def _check_room(path: str, size: int, what: str) -> None:
    """OSError (one line, naming ``path``) where ``what`` cannot be written there or its
    disk has less free space than it takes (as a checkpoint's is checked)."""
    from fedjax_abc._engine import check_writable

    check_writable(path, size, what=what, copies=1)


def _save_part(result, path: str, attrs: dict, label: str, say) -> None:
    """Saves a computed part; where the save fails (a full disk), says so naming the file,
    keeps the part in memory and tries again after each of ``SAVE_WAITS``; OSError naming
    the file after the last try."""
    from fedjax_abc._engine import result_attributes, save_result

    for tries, wait in enumerate(SAVE_WAITS + (None,), start=1):
        try:
            save_result(result, path, attrs=attrs)
            return
        except OSError as err:
            reason = err.strerror or str(err)
            if wait is None:
                raise OSError(f"{label} was computed but could not be saved to {path}: "
                              f"{reason} (tried {tries} times); free some space on "
                              f"{os.path.dirname(os.path.abspath(path))} and rerun the same "
                              "command (the parts saved are kept)") from None
            say(f"{label} was computed but could not be saved to {path}: {reason}; it is kept "
                f"in memory and saved again in {wait:g} s (free some space on "
                f"{os.path.dirname(os.path.abspath(path))})")
            time.sleep(wait)


def _read_spec(spec_path: str):
    """The settings a grid run saved (grid.json); ValueError (one line, naming the file)
    where the file is damaged."""
    try:
        with open(spec_path, encoding="utf-8") as f:
            saved = json.loads(f.read())
    except OSError as err:
        raise ValueError(f"cannot read {spec_path}: {err.strerror or err}") from None
    except ValueError as err:  # not UTF-8, not JSON
        raise ValueError(f"{spec_path} is damaged ({' '.join(str(err).split())[:120]}): it holds "
                         "the settings of the grid run in its folder; delete it to run this "
                         "grid there (the saved parts are checked on their own)") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{spec_path} is damaged (not a grid's settings): delete it to run this "
                         "grid there (the saved parts are checked on their own)")
    return saved


def _joined_digest(prints: list) -> str:
    """What a joined result.nc records of the parts it holds: their fingerprints."""
    return hashlib.sha256(" ".join(prints).encode()).hexdigest()


def _already_joined(out: str, digest: str, outputs: list):
    """The joined result in ``out`` where it holds exactly these parts and every output is
    there (a merge after a task joined them rewrites nothing); else None."""
    import fedjax_abc as fa
    from fedjax_abc._engine import result_attributes, save_result

    path = os.path.join(out, "result.nc")
    if not all(os.path.exists(os.path.join(out, name)) for name in outputs):
        return None
    try:
        if result_attributes(path).get("grid_result") != digest:
            return None
        return fa.load(path)
    except (OSError, ValueError):  # damaged or of another grid: joined again
        return None


def run_grid(spec: GridSpec, out: str, progress=None, part: Optional[int] = None,
             of: Optional[int] = None, merge: bool = False, say=None) -> dict:
    """Runs (or resumes) a grid and writes its outputs into ``out``.

    ``part``, ``of``: run only the parts c with c mod N = I (one task of a job array; the
    others' saved parts are read where present), and join them all once every part is
    saved. ``merge``: run nothing, join the saved parts (ValueError naming the missing
    ones). The joined result is the one a single process writes, bit for bit.

    Args:
      spec: from :func:`load_spec`.
      out: output folder (created).
      progress: a :class:`fedjax_abc.repro.common.Progress` or None.
      say: where a message goes while the run waits to save a part again (default:
        stderr).

    Each part's file is checked against the free space of its disk before the part runs
    (OSError naming the file); a part computed and then not saved (a full disk) is kept in
    memory and saved again after each of ``SAVE_WAITS`` seconds. Once every part is saved,
    they are joined, unless ``result.nc`` and the other outputs already hold exactly these
    parts (then nothing is written: ``joined`` is False).

    Returns:
      dict: ``result`` (the SweepResult, None while parts are missing), ``paths`` (files
      written), ``resumed`` (parts loaded from an earlier run or another task), ``parts``
      (how many the grid has), ``ran`` (this call's), ``missing`` (those not saved yet) and
      ``joined`` (whether this call wrote the joined outputs).
    """
    import fedjax_abc as fa
    from fedjax_abc._engine import result_attributes, save_result
    from fedjax_abc.repro import common

    doc = spec.doc
    if say is None:
        def say(text):
            print(text, file=sys.stderr, flush=True)
    spec_path = os.path.join(out, "grid.json")
    if merge and not os.path.isdir(os.path.join(out, "parts")):  # and write nothing
        raise ValueError(f"{out} holds no parts of a grid run: give the tasks' --out "
                         "(and the --trials and --rounds they were given)")
    os.makedirs(os.path.join(out, "parts"), exist_ok=True)
    text = json.dumps(doc, sort_keys=True)
    if os.path.exists(spec_path):
        saved, ours = _read_spec(spec_path), json.loads(text)
        if saved != ours:
            differ = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
            raise ValueError(f"{out} holds a grid run with other settings ({', '.join(differ)} "
                             f"differ from {spec_path}): give the same grid file, --trials and "
                             "--rounds as its tasks, or another --out")
    else:
        with common.atomic_open(spec_path) as f:
            f.write(text)
    _check_size(doc)
    shape_axes, data_axes, combos = _parts(doc)
    grid = doc["grid"]
    n_data = math.prod(len(grid[a]) for a in data_axes)
    def work(point):  # client-steps of a part, for the progress line's share of the grid
        take = {a: grid[a][i] for a, i in point.items()}
        steps = take.get("local_steps", doc.get("local_steps", 1))
        clients = take.get("num_sampled", doc.get("num_sampled", doc["problem"].get("n", 1)))
        return float(n_data * doc["trials"] * doc["rounds"] * steps * clients)

    points = [dict(zip(shape_axes, combo)) for combo in combos]
    paths = [os.path.join(out, "parts", f"{c}.nc") for c in range(len(combos))]
    here = environment()
    prints = [part_fingerprint(doc, point, here) for point in points]
    mine = [c for c in range(len(combos)) if not merge and (of is None or c % of == part)]
    if progress is not None:
        progress.plan(sum(work(points[c]) for c in mine))
    ran, written = {}, []
    for c in mine:  # this task's parts first, then all of them: another task's saved meanwhile
        path, point = paths[c], points[c]  # are joined too, by whichever task ends last
        if os.path.exists(path):
            continue
        desc = ", ".join(f"{a}={_label(grid[a][i], a, i)}" for a, i in point.items()) or "all"
        label = f"part {c + 1}/{len(combos)}"
        _check_room(path, _part_bytes(doc, n_data), f"{label} of the grid")  # before it runs
        callback = None
        if progress is not None:
            callback = progress.task(f"{label}: {desc}", work(point), unit="rounds")
        ran[c] = _run_part(doc, point, data_axes, callback)
        _save_part(ran[c], path, {"grid_part": prints[c]}, label, say)
        written.append(path)
        if progress is not None:
            progress.finish_task()
    missing = [c for c, path in enumerate(paths) if c not in ran and not os.path.exists(path)]
    done = dict(result=None, paths=written, resumed=len(paths) - len(ran) - len(missing),
                parts=len(combos), ran=len(written), missing=missing, joined=False)
    if missing:  # another task's, not saved yet
        for c, path in enumerate(paths):  # the others' saved parts are this grid's
            if c not in ran and c not in missing:
                _saved_part(path, prints[c], os.path.join(out, "parts"), load=False)
        if merge:
            raise ValueError(f"{out}: parts {ranges(missing)} of {len(combos)} are not saved "
                             f"yet (parts/<i>.nc); run their tasks, then merge again")
        return done
    digest = _joined_digest(prints)
    outputs = ["result.nc", "summary.csv", "curves.png"] + [
        _final_name(a) for a in grid]
    if not ran:  # joined before, by another task or an earlier call: nothing to rewrite
        for c, path in enumerate(paths):  # the parts there are still this grid's
            _saved_part(path, prints[c], os.path.join(out, "parts"), load=False)
        joined = _already_joined(out, digest, outputs)
        if joined is not None:
            return dict(done, result=joined)
    parts = [ran[c] if c in ran else _saved_part(path, prints[c], os.path.join(out, "parts"))
             for c, path in enumerate(paths)]
    axes = {a: tuple(_label(v, a, i) for i, v in enumerate(grid[a])) for a in shape_axes}
    axes.update(parts[0].axes)
    axes = {a: axes[a] for a in grid}  # the file's order
    results = _ordered(parts, shape_axes, data_axes, grid)
    result = fa.SweepResult(axes=axes, results=tuple(results))
    target = os.path.join(out, "result.nc")
    _check_room(target, sum(os.path.getsize(p) for p in paths) + 4_000_000,
                "the grid's joined result")
    paths = [save_result(result, target, attrs={"grid_result": digest})]
    paths.append(_summary_csv(result, os.path.join(out, "summary.csv")))
    paths += plots(result, out, spec.name)
    return dict(done, result=result, paths=paths, joined=True)


def _final_name(axis: str) -> str:
    """The file of the final gap against a grid axis: ``final_<axis>.png``, the axis's
    name made a plain file name (dots and anything but letters, digits, ``_-=`` as ``_``)."""
    import re

    return "final_" + re.sub(r"[^A-Za-z0-9_=-]", "_", axis) + ".png"


def ranges(numbers: list) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    spans, start = [], None
    for i, c in enumerate(numbers):
        if start is None:
            start = c
        if i + 1 == len(numbers) or numbers[i + 1] != c + 1:
            spans.append(f"{start}-{c}" if c > start else f"{c}")
            start = None
    return ", ".join(spans)


def _ordered(parts, shape_axes, data_axes, grid):
    """The parts' results in C order over the grid's axes (the file's order)."""
    order = list(grid)
    sizes = [len(grid[a]) for a in order]
    out = []
    for idx in itertools.product(*(range(s) for s in sizes)):
        pos = dict(zip(order, idx))
        c = int(np.ravel_multi_index([pos[a] for a in shape_axes],
                                     [len(grid[a]) for a in shape_axes])) if shape_axes else 0
        g = int(np.ravel_multi_index([pos[a] for a in data_axes],
                                     [len(grid[a]) for a in data_axes])) if data_axes else 0
        out.append(parts[c].results[g])
    return out


def _summary_csv(result, path: str) -> str:
    from fedjax_abc.repro import common

    rows = []
    for point, res in zip(result.points, result.results):
        row = list(point.values())
        for name in ("gap", "grad_norm_sq"):
            s = res.final(name) if res.num_diverged < res.trials else None
            row += ([float(s.mean), float(s.ci_low), float(s.ci_high)] if s is not None
                    else [float("nan")] * 3)
        row.append(res.num_diverged)
        rows.append(row)
    header = list(result.axes) + ["gap_T", "gap_T_ci_low", "gap_T_ci_high", "grad_norm_sq_T",
                                  "grad_norm_sq_T_ci_low", "grad_norm_sq_T_ci_high", "diverged"]
    return common.write_csv(path, header, rows)


def _point_text(point: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())


# colour x line style: 8 colours and 3 styles (coprime), so that 24 series are all distinct
# and neighbours differ in both; beyond 24 the curves are not labelled
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
            "tab:pink", "tab:gray")
_STYLES = [(_COLOURS[i % 8], ("-", "--", ":")[i % 3]) for i in range(24)]


def plots(result, out: str, name: str) -> list:
    """``curves.png`` (gap and ||grad f||^2 with 95% bands) and ``final_<axis>.png``."""
    from fedjax_abc.repro import common

    plt = common.pyplot()
    fig, axs = plt.subplots(1, 2, figsize=(13, 4.2))
    many = len(result.results) > len(_STYLES)
    labelled = False
    for k, (point, res) in enumerate(zip(result.points, result.results)):
        if res.num_diverged == res.trials:
            continue
        colour, dashes = _STYLES[k % len(_STYLES)]
        for ax, q in zip(axs, ("gap", "grad_norm_sq")):
            s = res.summary(q)
            line = common.band(ax, res.rounds, s.mean, s.ci95,
                               None if many else _point_text(point), color=colour)
            line.set_linestyle(dashes)
        labelled = labelled or not many
    for ax, q in zip(axs, ("f(x_t) - f*", "||grad f(x_t)||^2")):
        ax.set_yscale("log")
        ax.set_xlabel("round t")
        ax.set_ylabel(f"{q}, mean and 95% band")
        ax.set_title(f"{name}: {q}")
    if labelled:  # one legend for both panels, outside the data, right of the second
        axs[1].legend(*axs[0].get_legend_handles_labels(), loc="center left",
                      bbox_to_anchor=(1.02, 0.5), fontsize=7, frameon=False)
    paths = [common.save_figure(fig, out, "curves.png")]
    final = result.final("gap") if all(r.num_diverged < r.trials for r in result.results) \
        else None
    if final is None:
        return paths
    for k, axis in enumerate(result.axes):
        fig, ax = plt.subplots(figsize=(5.5, 4.0))
        labels = result.axes[axis]
        numeric = all(isinstance(v, (int, float)) for v in labels)
        xs = np.asarray(labels, dtype=float) if numeric else np.arange(len(labels))
        mean = np.moveaxis(final.mean, k, -1).reshape(-1, len(labels))
        half = np.moveaxis(final.ci95, k, -1).reshape(-1, len(labels))
        others = [a for a in result.axes if a != axis]
        combos = list(itertools.product(*(result.axes[a] for a in others)))
        for m, h, combo in zip(mean, half, combos):
            label = _point_text(dict(zip(others, combo))) or None
            ax.errorbar(xs, m, yerr=h, marker="o", capsize=3, label=label)
        from matplotlib.ticker import NullFormatter

        if numeric and np.all(xs > 0) and xs.max() / xs.min() > 20:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        if not numeric:
            ax.set_xticks(xs, [str(v) for v in labels], rotation=20, fontsize=7)
        positive = final.mean[final.mean > 0]
        if positive.size and positive.max() / positive.min() > 20:
            ax.set_yscale("log")
        ax.set_xlabel(axis)
        ax.set_ylabel("f(x_T) - f*, mean and 95% interval")
        if 1 < len(combos) <= 12:
            ax.legend(fontsize=7)
        paths.append(common.save_figure(fig, out, _final_name(axis)))
    return paths
