"""Checkpoints of :func:`~fedjax_abc.simulate`: a run saved at a segment boundary, resumed bit for bit.

A run is cut into chunks of trials and each chunk into segments (calls of the compiled
loop, :meth:`~fedjax_abc._engine._plan.Plan.segments`). Between two segments everything
the rest of the run depends on is on the host or in the loop carry: the carry's leaves
(the :class:`~fedjax_abc._engine._round.RoundState`), the records kept so far and the
results of the finished chunks. A checkpoint is these arrays, where the run stands, and a
fingerprint of every setting that affects the numbers, the source of the component classes
defined outside the library among them (a changed oracle class is another run); resuming
reruns nothing twice and skips nothing, so the result is the uninterrupted run's, bit for
bit. The file's folder is made, and a file written in it, before the run starts: a path
where no checkpoint can be saved, or a disk without room for two of them, is an error
then, not after the run. A run claims its path when it starts and never replaces a file
holding another run's fingerprint: two runs with other settings on one path do not
overwrite each other (see :class:`Tracker`).

The file is one NumPy ``.npz`` archive at exactly the given path, written to a temporary
file in the same folder and moved into place with ``os.replace`` (a reader sees the old
file or the new one, never half of one). It holds no pickle, only arrays and a JSON header:

- ``header``: JSON with ``format``, ``fingerprint`` (setting -> value or SHA-256),
  ``chunk``, ``segment`` (where the run resumes), ``complete`` and the array names;
- ``leaf_<i>``: the carry leaves of the current chunk (none between chunks);
- ``part_<name>``: the current chunk's kept records so far (``gap``, ``grad_norm_sq``, ``x``);
- ``done_<name>``: the finished chunks' results, trials in order (``x_final`` too).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import time
import types
import uuid
import warnings
from typing import Any, NamedTuple, Optional

import jax
import numpy as np

from fedjax_abc._engine._environment import environment

__all__ = ["FORMAT", "Position", "Tracker", "check_writable", "class_code", "code_fingerprint",
           "digest", "fingerprint", "load", "restored", "resume_round", "save",
           "saved_fingerprint"]

FORMAT = 1
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Position(NamedTuple):
    """Where a run stands at a segment boundary.

    Attributes:
      chunk: c, the chunk being run (the number of chunks once the run is complete).
      segment: the next segment of chunk c to run (0 at the start of a chunk).
      state: chunk c's carry: a RoundState of device arrays, or a tuple of NumPy leaves
        when loaded from a file; None when chunk c has not started.
      records: name -> tuple of kept records of chunk c so far (joined along axis 1).
      done: the finished chunks' results (dicts of NumPy arrays), in trial order.
    """

    chunk: int
    segment: int
    state: Any
    records: dict
    done: tuple


# -------------------------------------------------------------------------- fingerprint


def _feed(h, obj, depth: int = 0, seen: Optional[set] = None) -> None:
    """Feeds a stable description of ``obj`` to the hash ``h``: arrays by their bytes,
    functions by name, bytecode, constants, defaults and closure, objects by their fields."""
    seen = set() if seen is None else seen
    if depth > 12 or id(obj) in seen:
        h.update(f"<{type(obj).__qualname__}>".encode())
        return
    if isinstance(obj, (jax.Array, np.ndarray, np.generic)):
        a = np.ascontiguousarray(np.asarray(_key_data(obj)))
        h.update(f"array{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
        return
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
        return
    seen = seen | {id(obj)}
    if isinstance(obj, (tuple, list)):
        h.update(f"{type(obj).__qualname__}[{len(obj)}](".encode())
        for v in obj:
            _feed(h, v, depth + 1, seen)
        h.update(b")")
    elif isinstance(obj, dict):
        h.update(b"dict(")
        for k in sorted(obj, key=repr):
            _feed(h, k, depth + 1, seen)
            _feed(h, obj[k], depth + 1, seen)
        h.update(b")")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # equinox modules too
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}(".encode())
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _feed(h, getattr(obj, f.name, None), depth + 1, seen)
        h.update(b")")
    elif isinstance(obj, functools.partial):
        h.update(b"partial(")
        _feed(h, (obj.func, obj.args, obj.keywords), depth + 1, seen)
        h.update(b")")
    elif isinstance(obj, types.MethodType):
        _feed(h, (obj.__func__, obj.__self__), depth + 1, seen)
    elif isinstance(obj, types.FunctionType):
        code = obj.__code__
        h.update(f"{obj.__module__}.{obj.__qualname__}".encode())
        _feed(h, _code(code), depth + 1, seen)
        _feed(h, (obj.__defaults__, obj.__kwdefaults__), depth + 1, seen)
        cells = tuple(c.cell_contents for c in (obj.__closure__ or ()) if _filled(c))
        _feed(h, cells, depth + 1, seen)
    else:
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}".encode())
        h.update(_ADDRESS.sub("", repr(obj)).encode())


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def _code(code: types.CodeType) -> tuple:
    consts = tuple(_code(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return (code.co_code, consts, code.co_names)


def digest(obj) -> str:
    """SHA-256 of a stable description of ``obj`` (arrays, modules, functions, numbers)."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


# classes whose code is the library's (its version is the environment's, not the user's)
_LIBRARIES = frozenset({"fedjax_abc", "jax", "jaxlib", "numpy", "equinox", "builtins"})


def _user_classes(obj, found: dict, depth: int = 0, seen: Optional[set] = None) -> None:
    """Adds to ``found`` (qualified name -> class) the classes of ``obj`` and of what it
    holds (fields, items, closures) that are defined outside the library, with their
    bases defined outside it."""
    seen = set() if seen is None else seen
    if depth > 12 or id(obj) in seen or obj is None or isinstance(
            obj, (bool, int, float, complex, str, bytes, jax.Array, np.ndarray, np.generic, type)):
        return
    seen.add(id(obj))
    for cls in type(obj).__mro__:
        top = cls.__module__.partition(".")[0]
        if top not in _LIBRARIES and top not in sys.stdlib_module_names:
            found.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
    if isinstance(obj, (tuple, list)):
        children = list(obj)
    elif isinstance(obj, dict):
        children = list(obj.values())
    elif dataclasses.is_dataclass(obj):
        children = [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    elif isinstance(obj, functools.partial):
        children = [obj.func, *obj.args, *obj.keywords.values()]
    elif isinstance(obj, types.MethodType):
        children = [obj.__func__, obj.__self__]
    elif isinstance(obj, types.FunctionType):
        children = [c.cell_contents for c in (obj.__closure__ or ()) if _filled(c)]
        children += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
    else:
        children = []
    for child in children:
        _user_classes(child, found, depth + 1, seen)


def class_code(cls: type) -> str:
    """SHA-256 of a class's source (``inspect.getsource``); where the source cannot be
    found (a class made in an interactive session, by ``exec``), of its methods' bytecode."""
    try:
        return hashlib.sha256(inspect.getsource(cls).encode()).hexdigest()
    except (OSError, TypeError):
        pass
    methods = {}
    for name, value in vars(cls).items():
        value = getattr(value, "__func__", getattr(value, "fget", value))  # static, class, property
        value = getattr(value, "__wrapped__", value)
        if isinstance(value, types.FunctionType):
            methods[name] = value
    return "bytecode " + digest(methods)


def code_fingerprint(*components) -> dict:
    """"code of <module>.<class>" -> :func:`class_code` for every class of ``components``
    defined outside the library: a checkpoint does not resume once such code changed."""
    found: dict = {}
    for component in components:
        _user_classes(component, found)
    return {f"code of {name}": class_code(cls) for name, cls in sorted(found.items())}


def fingerprint(run, plan) -> dict:
    """Every setting of a checked run (``_run.CheckedRun``) and its plan that affects the
    numbers: values, or SHA-256 digests of arrays, modules and functions, and of the code
    of component classes defined outside the library (:func:`code_fingerprint`). Every
    component is digested whole, by its fields (``CheckedRun.parts``: the transform and the
    law of local steps too), so a setting added to a component is in the fingerprint."""
    spec, call = run.spec, run.call
    parts = run.parts()._asdict()
    metrics = parts.pop("metrics")  # below, with their names
    return {
        "trials": str(call.trials) + (f" from trial {call.first_trial}" if call.first_trial
                                      else ""),
        "rounds (T)": str(spec.rounds),
        "local_steps (Q)": str(parts["local_steps"]),
        "record_every (k)": str(spec.record.every), "record_x": str(spec.record.x),
        **({"record_clients": "True"} if spec.record.clients else {}),
        "mode": spec.execution.mode, "dtype": np.dtype(run.dtype).name,
        "trial_chunk": str(call.chunk),
        "chunking": (f"{plan.per_call} trials per call on {plan.groups} "
                     f"{call.devices[0].platform} device(s); blocks of {plan.block} rounds, "
                     f"{plan.segment} per call, tail {plan.tail}"),
        "key": str(np.asarray(jax.random.key_data(call.key)).tolist()),
        "stepsize": digest(call.alphas), "x0": digest(call.x0),
        **{name: digest(part) for name, part in parts.items()}, **environment(),
        "metrics": f"{list(spec.metric_names)} {digest(metrics)}",
        **{name: str(value) for name, value in spec.execution.optional().items()},
        **code_fingerprint(*parts.values(), metrics),
    }


def resume_round(plan, position: Position) -> int:
    """The round chunk ``position.chunk`` resumes at."""
    if position.state is None:
        return 0
    segments = plan.segments()
    return segments[position.segment].start if position.segment < len(segments) else segments[-1].stop


# ------------------------------------------------------------------------------- files


def _key_data(a):
    """A PRNG key array's key data; any other value as it is."""
    if isinstance(a, jax.Array) and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(a)
    return a


def _joined(parts: tuple, axis: int) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)


def save(path: str, fingerprint: dict, position: Position, complete: bool = False,
         exclusive: bool = False) -> bool:
    """Writes ``position`` to ``path`` atomically (temporary file, then ``os.replace``).

    With ``exclusive`` the file is put in place only if ``path`` does not exist (a hard link,
    which fails on an existing name): returns False, writing nothing, if it does.
    """
    arrays = {f"leaf_{i}": np.asarray(_key_data(leaf))  # no leaves where state is None
              for i, leaf in enumerate(jax.tree_util.tree_leaves(position.state))}
    for name, parts in position.records.items():
        arrays[f"part_{name}"] = _joined(parts, axis=1)
    if position.done:
        for name in position.done[0]:
            arrays[f"done_{name}"] = _joined(tuple(d[name] for d in position.done), axis=0)
    header = dict(format=FORMAT, fingerprint=fingerprint, chunk=position.chunk,
                  segment=position.segment, complete=complete,
                  leaves=sum(k.startswith("leaf_") for k in arrays),
                  records=list(position.records), done=list(position.done[0]) if position.done else [])
    arrays["header"] = np.array(json.dumps(header))
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        if not exclusive:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: the name checked just before
            if os.path.exists(path):
                return False
            os.replace(tmp, path)
        return True
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _differ(saved: dict, fingerprint: dict) -> list:
    """The settings whose values in ``saved`` and ``fingerprint`` differ."""
    differ = [k for k in fingerprint if saved.get(k) != fingerprint[k]]
    return differ + [k for k in saved if k not in fingerprint]


def saved_fingerprint(path: str) -> Optional[dict]:
    """The fingerprint of the checkpoint at ``path`` (its header only); None if there is no
    file, {} if it is not a checkpoint of this format."""
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
        return header["fingerprint"] if header.get("format") == FORMAT else {}
    except Exception:  # removed meanwhile, zipfile, JSON, missing header
        return None if not os.path.exists(path) else {}


def load(path: str, fingerprint: dict) -> Optional[tuple[Position, bool]]:
    """(position, complete) saved at ``path``; None if there is no file.

    Raises:
      ValueError: if the file is not a checkpoint, or was written for a run whose settings
        differ from ``fingerprint`` (naming them).
    """
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
            arrays = {k: z[k] for k in z.files if k != "header"}
    except Exception as err:  # zipfile, OSError, JSON, missing header
        raise ValueError(f"checkpoint ({path}) is not a fedjax_abc checkpoint: "
                         f"{type(err).__name__}: {err}") from None
    if header.get("format") != FORMAT:
        raise ValueError(f"checkpoint ({path}) has format {header.get('format')}, this version "
                         f"reads {FORMAT}; delete it or pass another path")
    differ = _differ(header["fingerprint"], fingerprint)
    if differ:
        raise ValueError(f"checkpoint ({path}) was written for another run: {', '.join(differ)} "
                         "differ; delete it or pass another path")
    leaves = tuple(arrays[f"leaf_{i}"] for i in range(header["leaves"]))
    records = {name: (arrays[f"part_{name}"],) for name in header["records"]}
    done = ({name: arrays[f"done_{name}"] for name in header["done"]},) if header["done"] else ()
    position = Position(header["chunk"], header["segment"], leaves or None, records, done)
    return position, bool(header["complete"])


def check_writable(path: str, size: int, what: str = "checkpoint", copies: int = 2) -> None:
    """Creates ``path``'s folder and a file in it (removed): raises OSError, in one line
    naming the path, where a checkpoint (``what``) could not be saved there, or where its
    disk has less free space than ``copies`` files of ``size`` bytes (two for a checkpoint:
    the new one is written beside the old one before it replaces it)."""
    folder = os.path.dirname(os.path.abspath(path))
    probe = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex[:8]}.probe")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(probe, "xb"):
            pass
        os.remove(probe)
        free = shutil.disk_usage(folder).free
    except OSError as err:
        raise OSError(f"{what} ({path}) cannot be written: {err.strerror or err} "
                      f"({err.filename or folder})") from None
    old = os.path.getsize(path) if os.path.isfile(path) else 0
    need = copies * size - old
    if need > free:
        from fedjax_abc._engine._memory import format_bytes

        twice = ", twice that while a save replaces the last one," if copies == 2 else ""
        raise OSError(f"{what} ({path}) cannot be written: it takes about "
                      f"{format_bytes(size)}{twice} and its disk has {format_bytes(free)} free "
                      f"({folder})")


class Tracker:
    """Keeps the last segment boundary of a run and saves it every ``every`` seconds (at the
    first segment boundary after; 0: at every one).

    ``commit`` replaces the position in one assignment, so whatever interrupts the run
    (Ctrl-C included) finds a consistent one to :meth:`save`.

    The path is claimed when the run starts: a new file holding the starting position is
    put there only if no file is there (:func:`save` with ``exclusive``), so a second run
    with other settings started on the same path meanwhile is refused then, naming the
    settings that differ. A save never replaces a file holding another run's fingerprint
    (one put there while this run went on): it warns once, naming the path and the
    settings, and this run saves no more checkpoints there; the other run's file is kept.
    A save that fails (a full disk, a folder removed) warns once, naming the path, and the
    run goes on: the work done is never lost to a checkpoint, and the result is returned.
    """

    def __init__(self, path: str, fingerprint: dict, position: Position, size: int,
                 every: float):
        check_writable(path, size)  # before the run, not after it
        self.path = path
        self.every = every
        self.fingerprint = fingerprint
        self.position = position
        self.saved = position
        self.last = time.perf_counter()
        self.taken = False  # another run's checkpoint is at the path: save nothing more
        self.claimed = False  # the file at the path is this run's claim, nothing saved since
        self.failed = False  # a save failed (warned once; later saves try again)
        if position.chunk == 0 and position.state is None and not position.done:
            self.claimed = save(path, fingerprint, position, exclusive=True)
            if not self.claimed:
                load(path, fingerprint)  # another run's: ValueError naming what differs

    def commit(self, position: Position) -> None:
        self.position = position
        if time.perf_counter() - self.last >= self.every:
            self.save()

    def save(self, complete: bool = False) -> None:
        """Writes the last committed position (if it changed since the last save), unless
        the file at the path is now another run's."""
        position = self.position
        if self.taken:
            return
        if self.claimed and position is self.saved and not complete:
            # stopped before anything was done: the claim goes, as if never started (a
            # rerun after fixing what stopped it is not refused as another run)
            self.claimed = False
            if saved_fingerprint(self.path) == self.fingerprint:
                os.remove(self.path)
            return
        if position is not self.saved or complete:
            saved = saved_fingerprint(self.path)
            if saved is not None and saved != self.fingerprint:
                self.taken = True
                what = (f"{', '.join(_differ(saved, self.fingerprint))} differ" if saved
                        else "it is not a checkpoint of this format")
                warnings.warn(f"checkpoint ({self.path}) now holds another run's ({what}): "
                              "it is kept, and this run saves no checkpoint there",
                              RuntimeWarning, stacklevel=3)
                return
            try:
                save(self.path, self.fingerprint, position, complete)
            except OSError as err:  # a full disk, a folder gone: the work is kept, not lost
                if not self.failed:
                    warnings.warn(f"checkpoint ({self.path}) could not be saved ({err}); the run "
                                  + ("is complete and its result is returned" if complete else
                                     "goes on, trying again at its next save"),
                                  RuntimeWarning, stacklevel=3)
                self.failed = True
                self.last = time.perf_counter()
                return
            self.saved = position
            self.claimed = False
        self.last = time.perf_counter()


# -------------------------------------------------------------------------- resuming


def restored(fresh, leaves) -> Any:
    """The carry ``fresh`` with its leaves replaced by saved ones (same shapes and placement)."""
    fresh_leaves, treedef = jax.tree_util.tree_flatten(fresh)
    if len(leaves) != len(fresh_leaves):
        raise ValueError(f"checkpoint holds {len(leaves)} state arrays, the run has {len(fresh_leaves)}")
    out = []
    for saved, leaf in zip(leaves, fresh_leaves):
        is_key = jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        want = jax.random.key_data(leaf) if is_key else leaf
        if saved.shape != want.shape or saved.dtype != want.dtype:
            raise ValueError(f"checkpoint state array {saved.shape} {saved.dtype} does not fit the "
                             f"run's {want.shape} {want.dtype}")
        value = jax.device_put(saved, want.sharding)
        out.append(jax.random.wrap_key_data(value, impl=jax.random.key_impl(leaf)) if is_key else value)
    return jax.tree_util.tree_unflatten(treedef, out)
