"""A grid file run in parts: saved, resumed, shared among tasks and joined bit for bit.

The grid (``_grid_spec``) runs in parts, one per combination of the axes that change shapes
(num_sampled, local_steps, mode, algorithm, sampler, oracle): each part is one ``sweep`` of
the part's :class:`Simulation` over the other axes, saved to ``<out>/parts/<i>.nc`` when
done. A part is saved with a fingerprint, the engine's :func:`digest` of the grid's
settings, the part's place in the grid and the :func:`environment` (the fedjax_abc version
and code, JAX, jaxlib, the device kind, 64-bit mode): a part written by another grid file,
other settings, other code or software is refused, never reported under this grid's
labels. Rerunning skips the saved parts, so an interrupted grid resumes where it stopped.

Several processes or machines: task I of N runs the parts c with c mod N = I (:func:`task_share`
reads a Slurm job array's); whichever task saves the last part joins them all into
``<out>/result.nc``, and a merge joins them later. Every part is computed as in one
process, so the joined result is that process's, bit for bit. Every axis is labelled as
``sweep`` labels it (:func:`~fedjax_abc._engine._names.coordinate_labels` of the file's
values).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
import uuid
from typing import Optional

import numpy as np

from fedjax_abc._engine._checkpoint import check_writable, digest
from fedjax_abc._engine._environment import environment
from fedjax_abc._engine._grid_spec import (SHAPE_AXES, GridSpec, build_problem, simulation,
                                           start, sweep_grid)
from fedjax_abc._engine._labelled import attributes, save
from fedjax_abc._engine._memory import check_points
from fedjax_abc._engine._names import coordinate_labels
from fedjax_abc._engine._plan import default_record_every, num_records
from fedjax_abc._engine._result import SweepResult, load
from fedjax_abc._engine._sweep import sweep

__all__ = ["SAVE_WAITS", "part_count", "part_fingerprint", "ranges", "run_parts", "run_part",
           "task_share"]

# seconds between the tries of a part's save that failed (a full disk, a folder gone);
# the part is kept in memory meanwhile
SAVE_WAITS = (10.0, 30.0, 60.0)


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


def run_part(doc: dict, point: dict, data_axes: list, progress) -> SweepResult:
    """``sweep`` of the Simulation at one combination of the shape axes (``point``: axis ->
    index) over the data axes, labelled with the file's axes and values."""
    grid = doc["grid"]
    problem = build_problem(doc["problem"])
    axes = sweep_grid(doc, data_axes, problem)
    if "problem" in axes and "x0" not in doc:  # x0 = x* + offset of each problem's own
        results = _sweep_per_problem(doc, point, axes, progress)
    else:  # on a problem axis, every point's problem is the axis's
        sim, call = simulation(doc, point, axes["problem"][0] if "problem" in axes else problem)
        if "x0" not in axes:
            call["x0"] = start(doc, problem)
        if not axes:  # every axis changes shapes: a grid of one point
            axes["stepsize"] = [call.pop("stepsize")]
        results = sweep(sim, grid=axes, progress=progress, **call).results
    labels = {axis: coordinate_labels(axis, grid[axis]) for axis in data_axes}
    return SweepResult(axes=labels, results=results)


def _sweep_per_problem(doc: dict, point: dict, axes: dict, progress) -> tuple:
    """The results of ``sweep`` over ``axes`` with x0 = x* + offset, x* of each problem of
    its ``problem`` axis, in the C order of ``axes``: one sweep per problem (the same
    shapes: one compilation)."""
    names = list(axes)
    rest = [a for a in names if a != "problem"]
    problems, per = axes["problem"], []
    for problem in problems:
        sim, call = simulation(doc, point, problem)
        grid = {a: axes[a] for a in rest}
        if "x0" in grid:  # an x0_offset axis
            grid["x0"] = [start(doc, problem, v) for v in doc["grid"]["x0_offset"]]
        else:
            call["x0"] = start(doc, problem)
        if not grid:
            grid["stepsize"] = [call.pop("stepsize")]
        shifted = progress
        if callable(progress):  # the P sweeps counted as one: sweep k's rounds after k others'
            def shifted(done, total, seconds, k=len(per)):
                progress(k * total + done, len(problems) * total, seconds)
        per.append(sweep(sim, grid=grid, progress=shifted, **call))
    sizes = [len(axes[a]) for a in rest]
    results = []
    for index in itertools.product(*(range(len(axes[a])) for a in names)):
        at = dict(zip(names, index))
        flat = int(np.ravel_multi_index([at[a] for a in rest], sizes)) if rest else 0
        results.append(per[at["problem"]].results[flat])
    return tuple(results)


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


def ranges(numbers: list) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    spans, first = [], None
    for i, c in enumerate(numbers):
        if first is None:
            first = c
        if i + 1 == len(numbers) or numbers[i + 1] != c + 1:
            spans.append(f"{first}-{c}" if c > first else f"{c}")
            first = None
    return ", ".join(spans)


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


# ---------------------------------------------------------------- fingerprints and files


def part_fingerprint(doc: dict, point: dict, env: dict) -> str:
    """The engine's :func:`digest` of what a part's numbers depend on: the grid's settings
    (``doc``), the part's combination of the shape axes (``point``) and the
    :func:`environment` (``env``): a part of another grid, or computed in another
    environment, is not this grid's."""
    return digest({"grid": doc, "part": point, **env})


def _saved_part(path: str, fingerprint: str, parts: str, load_it: bool = True):
    """The part saved at ``path`` if this grid wrote it (``load_it``: else only checked);
    ValueError (one line) if not."""
    if attributes(path).get("grid_part") != fingerprint:
        raise ValueError(f"{path} was not written by this grid (another grid file, other "
                         f"settings, other fedjax_abc code, another JAX or jaxlib version or "
                         f"device kind): use another --out or delete {parts}")
    return load(path) if load_it else None


def _check_size(doc: dict) -> None:
    """The results of the whole grid (every part is kept until they are joined) against the
    memory, before the first part runs: one line (ValueError) if they cannot fit. d is the
    [problem] table's ``d`` (1 without one), the largest of a ``problem.d`` axis."""
    trials, rounds, k = doc.get("trials"), doc.get("rounds"), doc.get("record_every")
    numbers = (trials, rounds) + (() if k is None else (k,))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in numbers):
        return  # sweep refuses them, naming the setting
    check_points([len(v) for v in doc["grid"].values()], trials=trials, rounds=rounds,
                 record_every=k, dim=_largest_dim(doc),
                 itemsize=4 if doc.get("dtype") == "float32" else 8, record_x=False)


def _largest_dim(doc: dict) -> int:
    dims = [doc["problem"].get("d", 1)] + list(doc["grid"].get("problem.d", ()))
    return max([v for v in dims if isinstance(v, int) and not isinstance(v, bool)] or [1])


def _part_bytes(doc: dict, points: int) -> int:
    """About the bytes of a saved part of ``points`` grid points: each point's records
    (gap, ||grad f||^2 and the trials' flags), x_T and its config."""
    trials, rounds, k = int(doc["trials"]), int(doc["rounds"]), doc.get("record_every")
    if not k or rounds % k:
        k = default_record_every(rounds)
    each = 8 * trials * (2 * num_records(rounds, k) + _largest_dim(doc) + 2) + 16_384
    return points * each + 65_536


def _check_room(path: str, size: int, what: str) -> None:
    """OSError (one line, naming ``path``) where ``what`` cannot be written there or its
    disk has less free space than it takes (as a checkpoint's is checked)."""
    check_writable(path, size, what=what, copies=1)


def _save_part(result, path: str, attrs: dict, label: str, say, waits: tuple) -> None:
    """Saves a computed part; where the save fails (a full disk), says so naming the file,
    keeps the part in memory and tries again after each of ``waits``; OSError naming the
    file after the last try."""
    for tries, wait in enumerate(tuple(waits) + (None,), start=1):
        try:
            save(result, path, attrs=attrs)
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


def _write_spec(spec_path: str, text: str) -> None:
    """Writes grid.json whole or not at all (a temporary file moved into place)."""
    folder, name = os.path.split(spec_path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, spec_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _check_folder(doc: dict, out: str, merge: bool) -> None:
    """The parts' folder made, and ``out`` checked to hold this grid's run (grid.json, the
    settings, written by the first run there)."""
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
        _write_spec(spec_path, text)


def _already_joined(out: str, joined: str, outputs: list):
    """The joined result in ``out`` where it holds exactly these parts (``joined``, the
    digest of their fingerprints) and every output is there (a merge after a task joined
    them rewrites nothing); else None."""
    path = os.path.join(out, "result.nc")
    if not all(os.path.exists(os.path.join(out, name)) for name in outputs):
        return None
    try:
        if attributes(path).get("grid_result") != joined:
            return None
        return load(path)
    except (OSError, ValueError):  # damaged or of another grid: joined again
        return None


# ---------------------------------------------------------------------------- the run


def run_parts(spec: GridSpec, out: str, *, progress=None, part: Optional[int] = None,
              of: Optional[int] = None, merge: bool = False, say=None,
              waits: tuple = SAVE_WAITS, outputs: tuple = ()) -> dict:
    """Runs (or resumes) a grid's parts in ``out`` and joins them into ``out/result.nc``.

    Args:
      spec: from :func:`~fedjax_abc._engine._grid_spec.load_spec`.
      out: output folder (created): ``grid.json`` (the settings), ``parts/<i>.nc``.
      progress: None, or what reports a grid's progress (``repro.common.Progress``):
        ``plan(work)`` once, then ``task(label, work, unit="rounds")`` before each part
        runs, its answer the part's ``sweep`` progress callback, and ``finish_task()``
        once the part is saved. ``work`` counts client-steps.
      part, of: run only the parts c with c mod ``of`` = ``part`` (one task of a job array;
        the others' saved parts are read where present), and join them all once every part
        is saved.
      merge: run nothing, join the saved parts (ValueError naming the missing ones).
      say: where a message goes while the run waits to save a part again (default:
        stderr).
      waits: seconds between the tries of a part's save that failed.
      outputs: the files the caller writes beside ``result.nc`` once joined: a joined
        result counts as done only with them there.

    Each part's file is checked against the free space of its disk before the part runs
    (OSError naming the file); a part computed and then not saved (a full disk) is kept in
    memory and saved again after each of ``waits``. Once every part is saved, they are
    joined, unless ``result.nc`` and ``outputs`` already hold exactly these parts (then
    nothing is written: ``joined`` is False). The joined result is the one a single process
    writes, bit for bit.

    Returns:
      dict: ``result`` (the SweepResult, None while parts are missing), ``paths`` (files
      written: result.nc once joined, else the parts this call saved), ``resumed`` (parts
      loaded from an earlier run or another task), ``parts`` (how many the grid has),
      ``ran`` (this call's), ``missing`` (those not saved yet) and ``joined`` (whether this
      call wrote ``result.nc``).
    """
    doc = spec.doc
    if say is None:
        def say(text):
            print(text, file=sys.stderr, flush=True)
    _check_folder(doc, out, merge)
    _check_size(doc)
    shape_axes, data_axes, combos = _parts(doc)
    grid = doc["grid"]
    labels = {a: coordinate_labels(a, grid[a]) for a in grid}
    n_data = math.prod(len(grid[a]) for a in data_axes)

    def work(point):  # client-steps of a part, for the progress line's share of the grid
        take = {a: grid[a][i] for a, i in point.items()}
        steps = take.get("local_steps", doc.get("local_steps", 1))
        clients = take.get("num_sampled", doc.get("num_sampled", doc["problem"].get("n", 1)))
        return float(n_data * doc["trials"] * doc["rounds"] * steps * clients)

    points = [dict(zip(shape_axes, combo)) for combo in combos]
    folder = os.path.join(out, "parts")
    paths = [os.path.join(folder, f"{c}.nc") for c in range(len(combos))]
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
        desc = ", ".join(f"{a}={labels[a][i]}" for a, i in point.items()) or "all"
        label = f"part {c + 1}/{len(combos)}"
        _check_room(path, _part_bytes(doc, n_data), f"{label} of the grid")  # before it runs
        callback = None
        if progress is not None:
            callback = progress.task(f"{label}: {desc}", work(point), unit="rounds")
        ran[c] = run_part(doc, point, data_axes, callback)
        _save_part(ran[c], path, {"grid_part": prints[c]}, label, say, waits)
        written.append(path)
        if progress is not None:
            progress.finish_task()
    missing = [c for c, path in enumerate(paths) if c not in ran and not os.path.exists(path)]
    done = dict(result=None, paths=written, resumed=len(paths) - len(ran) - len(missing),
                parts=len(combos), ran=len(written), missing=missing, joined=False)
    if missing:  # another task's, not saved yet
        for c, path in enumerate(paths):  # the others' saved parts are this grid's
            if c not in ran and c not in missing:
                _saved_part(path, prints[c], folder, load_it=False)
        if merge:
            raise ValueError(f"{out}: parts {ranges(missing)} of {len(combos)} are not saved "
                             f"yet (parts/<i>.nc); run their tasks, then merge again")
        return done
    joined = digest(prints)
    if not ran:  # joined before, by another task or an earlier call: nothing to rewrite
        for c, path in enumerate(paths):  # the parts there are still this grid's
            _saved_part(path, prints[c], folder, load_it=False)
        before = _already_joined(out, joined, ["result.nc", *outputs])
        if before is not None:
            return dict(done, result=before)
    parts = [ran[c] if c in ran else _saved_part(path, prints[c], folder)
             for c, path in enumerate(paths)]
    result = SweepResult(axes=labels, results=tuple(_ordered(parts, shape_axes, data_axes,
                                                              grid)))
    target = os.path.join(out, "result.nc")
    _check_room(target, sum(os.path.getsize(p) for p in paths) + 4_000_000,
                "the grid's joined result")
    return dict(done, result=result, paths=[save(result, target, attrs={"grid_result": joined})],
                joined=True)
