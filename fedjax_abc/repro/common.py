"""Shared pieces of ``fedjax-abc reproduce`` and ``compare``: settings, keys, progress,
simulation, output.

Every experiment of Section IV is a function ``run(settings, progress) -> dict`` (see
``fig1``, ``table2``, ``fig3``, ``theorems``; ``compare`` goes beyond the paper) returning
the JSON document it writes; this module holds what they share.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import platform
import re
import secrets
import sys
import threading
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from fedjax_abc._engine import Z95, AbstractProgressMeter  # noqa: F401  (common.Z95: the engine's)

# Experiment identifiers folded into the seed key, so that experiments never share a key.
EXPERIMENT_IDS = {"fig1": 1, "table2": 2, "fig3": 3, "table2_hypotheses": 4, "remark4": 5, "lemmas": 6, "thm1": 11, "thm2": 12, "thm3": 13, "faults": 14,
                  "compare": 21, "participation": 22,
                  "tuned": 23, "tradeoffs": 24}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the command line sets for every experiment.

    Attributes:
      trials: R, or None for the experiment's default (the paper's R = 100, or the quick one).
      rounds: T, or None for the experiment's default.
      seed: the base seed K; run keys are ``fold_in`` of ``jax.random.key(K)``.
      out: the output folder.
      quick: reduced scale (each experiment under a minute on 2 cores).
      precision: "float64" or "float32".
      argv: the command line, recorded in each result's config.
      checkpoint: a folder for the runs' checkpoints (``<folder>/<experiment>/<run>.npz``),
        or None for none.
      overrides: ``(key, text)`` pairs from ``--set KEY=VALUE``, applied by
        :func:`experiment_settings` to the experiments that have the key.
    """

    trials: Optional[int] = None
    rounds: Optional[int] = None
    seed: int = 0
    out: str = "results"
    quick: bool = False
    precision: str = "float64"
    argv: tuple = ()
    checkpoint: Optional[str] = None
    overrides: tuple = ()

    def checkpoint_file(self, experiment: str, run: str) -> Optional[str]:
        """The checkpoint file of one run of an experiment (None without a folder)."""
        if self.checkpoint is None:
            return None
        name = re.sub(r"[^A-Za-z0-9=.,_-]+", "_", run).strip("_") or "run"
        return os.path.join(self.checkpoint, experiment, name + ".npz")

    def scale(self, paper_trials: int, paper_rounds: int, quick_trials: int, quick_rounds: int):
        """(R, T, label): the paper's values, the quick ones, or the user's overrides."""
        base_r, base_t = (quick_trials, quick_rounds) if self.quick else (paper_trials, paper_rounds)
        r = base_r if self.trials is None else self.trials
        t = base_t if self.rounds is None else self.rounds
        label = "paper" if (r, t) == (paper_trials, paper_rounds) and not self.quick else (
            "quick" if self.quick and self.trials is None and self.rounds is None else "custom")
        return r, t, label


# ------------------------------------------------------------------------ --set overrides

# Keys of ``--set`` that are other names of a setting (T and R go to --rounds / --trials).
ALIASES = {"Dmax": "d_max", "dmax": "d_max", "x0_offset": "x0_offset"}
# Settings that may be zero or negative (a starting point); every other number is > 0.
SIGNED = ("x0", "x0_offset")


def defaults(experiment: str) -> dict:
    """The settings of ``experiment`` that ``--set`` may change (from :mod:`paper`)."""
    from fedjax_abc.repro import paper

    table = {"fig1": paper.FIG1, "table2": paper.TABLE2,
             # the hypotheses vary alpha, Q, T and x0 themselves
             "table2_hypotheses": {k: paper.TABLE2[k] for k in ("n", "d_max", "S")},
             "fig3": paper.FIG3, "thm3": {"p": paper.THM3_P},
             "lemmas": {k: v for k, v in paper.LEMMAS.items() if k not in ("M", "fractions")}}
    return {k: v for k, v in table.get(experiment, {}).items() if k not in ("T", "R")}


def canonical_key(experiment: str, key: str) -> Optional[str]:
    """The setting a ``--set`` key names in ``experiment`` (None if it has no such setting).

    ``x0`` names ``x0_offset`` (x0 = x* + offset) in the experiments on problem (27).
    """
    names = defaults(experiment)
    key = ALIASES.get(key, key)
    if key == "x0" and "x0_offset" in names:
        key = "x0_offset"
    return key if key in names else None


def _parse_value(key: str, text: str, default):
    def number(kind, item):
        try:
            v = kind(item)
        except ValueError:
            raise ValueError(f"--set {key}: expected {'an integer' if kind is int else 'a number'}"
                             f", got {item!r}") from None
        if not math.isfinite(v) or (key not in SIGNED and v <= 0):
            raise ValueError(f"--set {key}: expected a positive finite number, got {item!r}")
        return v

    if isinstance(default, list):
        kind = int if all(isinstance(v, int) for v in default) else float
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise ValueError(f"--set {key}: expected a comma-separated list, got {text!r}")
        return [number(kind, t) for t in items]
    kind = int if isinstance(default, int) and not isinstance(default, bool) else float
    return number(kind, text.strip())


def parse_overrides(texts: Sequence[str]) -> tuple:
    """``KEY=VALUE`` strings to ``(key, value text)`` pairs (a later key wins)."""
    pairs = {}
    for text in texts:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {text!r}")
        pairs[key] = value.strip()
    return tuple(pairs.items())


def experiment_settings(settings: Settings, experiment: str, strict: bool = False) -> dict:
    """The settings of ``experiment``: the paper's (:mod:`paper`) with ``settings.overrides``.

    Keys that ``experiment`` does not have are skipped, or refused with ``strict=True``.
    Values are parsed by the type of the paper's value (a list: comma-separated), numbers
    must be finite and (but for x0) positive, each S must lie in [1, n].

    Example:
      >>> s = Settings(overrides=(("alpha", "1e-3"), ("S", "4,40")))
      >>> cfg = experiment_settings(s, "table2")
      >>> cfg["alpha"], cfg["S"], cfg["Q"]
      (0.001, [4, 40], 10)
    """
    cfg = dict(defaults(experiment))
    for key, text in settings.overrides:
        name = canonical_key(experiment, key)
        if name is None:
            if strict:
                known = ", ".join(sorted(defaults(experiment))) or "none"
                raise ValueError(f"--set {key}: {experiment} has no such setting "
                                 f"(its settings: {known}; T and R: --rounds, --trials)")
            continue
        cfg[name] = _parse_value(key, text, cfg[name])
    n = cfg.get("n")
    for S in cfg.get("S", []) if n is not None else []:
        if not 1 <= S <= n:
            raise ValueError(f"--set S: each S must be in [1, n={n}], got {S}")
    if experiment == "thm3" and not 0.5 < cfg["p"] <= 1.0:
        raise ValueError(f"--set p: Theorem 3's decay exponent must be in (1/2, 1], got "
                         f"{cfg['p']:g}")
    return cfg


def applied_overrides(settings: Settings, experiment: str) -> dict:
    """The ``--set`` values that ``experiment`` used, by setting name (for its config)."""
    cfg = experiment_settings(settings, experiment)
    return {name: cfg[name] for name in (canonical_key(experiment, k) for k, _ in settings.overrides)
            if name is not None}


def run_key(seed: int, experiment: str, *tags: int):
    """``jax.random.key(seed)`` folded with the experiment id and integer tags (S, Q, ...)."""
    import jax

    key = jax.random.fold_in(jax.random.key(seed), EXPERIMENT_IDS[experiment])
    for tag in tags:
        key = jax.random.fold_in(key, int(tag))
    return key


KEY_RULE = "fold_in(fold_in(jax.random.key(seed), experiment_id), tag) for each tag in order"


def record_every(rounds: int, target: int = 500) -> Optional[int]:
    """k for the records t = 0, k, 2k, ..., T of an experiment's curves: at most ``target``
    records and at least a fifth of them (or every round where T < target / 5).

    The smallest divisor k of T with T / k <= target when it leaves at least
    min(T, target / 5) records; otherwise (a prime T, or T = 2p, whose divisors jump from
    T / 2 records to 2) None: ``fa.simulate``'s default, about 1000 records every
    ceil(T / 1000) rounds with a shorter last interval, so that no T gives a curve of a few
    points.
    """
    least = min(rounds, max(2, target // 5))
    for k in range(max(1, rounds // target), rounds + 1):
        if rounds % k == 0 and rounds // k <= target:
            return k if rounds // k >= least else None
    return None


def environment() -> dict:
    """The config block's record of the software and the machine: the engine's
    :func:`~fedjax_abc._engine.environment` (the fedjax_abc, JAX and jaxlib versions, the
    backend) with the versions of the libraries the reports use and the devices."""
    import jax
    import matplotlib
    import scipy

    from fedjax_abc._engine import environment as engine_environment

    env = engine_environment()
    devices = jax.devices()
    return {
        "versions": {
            "fedjax_abc": env["fedjax_abc"],
            "jax": env["jax"],
            "jaxlib": env["jaxlib"],
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "matplotlib": matplotlib.__version__,
            "python": platform.python_version(),
        },
        "device": {
            "backend": env["platform"],
            "devices": [str(d) for d in devices],
            "device_kind": devices[0].device_kind if devices else None,
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
        },
    }


def base_config(settings: Settings, experiment: str, trials: int, rounds, scale: str) -> dict:
    """The config block's common part; experiments add their parameters."""
    overrides = applied_overrides(settings, experiment)
    if overrides:
        scale = "custom"
    return {
        "experiment": experiment,
        "scale": scale,
        "trials": trials,
        "rounds": rounds,
        "seed": settings.seed,
        "key_rule": KEY_RULE,
        "experiment_id": EXPERIMENT_IDS[experiment],
        "precision": settings.precision,
        "command": "fedjax-abc " + " ".join(settings.argv) if settings.argv else None,
        "overrides": overrides,
        "rerun": rerun_command(settings, experiment),
        **environment(),
    }


# the experiments of ``fedjax-abc compare``, each with its option (always float64)
COMPARE_OPTIONS = {"tuned": [], "compare": ["--fixed"], "participation": ["--participation"],
                   "tradeoffs": ["--tradeoffs"]}


def rerun_command(settings: Settings, experiment: str) -> str:
    if experiment in COMPARE_OPTIONS:
        parts = ["fedjax-abc", "compare", *COMPARE_OPTIONS[experiment], "--seed",
                 str(settings.seed)]
    else:
        parts = ["fedjax-abc", "reproduce", experiment, "--seed", str(settings.seed),
                 "--precision", settings.precision]
    if settings.quick:
        parts.append("--quick")
    if settings.trials is not None:
        parts += ["--trials", str(settings.trials)]
    if settings.rounds is not None:
        parts += ["--rounds", str(settings.rounds)]
    for key, text in settings.overrides:
        if canonical_key(experiment, key) is not None:
            parts += ["--set", f"{key}={text}"]
    return " ".join(parts)


# ------------------------------------------------------------------------------ progress


def clock(seconds: float) -> str:
    """Seconds as m:ss (h:mm:ss from an hour), "?" when not finite."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


CACHE_VARIABLE = "FEDJAX_ABC_JIT_CACHE"


def jit_cache_folder(environ=os.environ) -> Optional[str]:
    """The folder of JAX's persistent compilation cache for the command: JAX's own
    ``JAX_COMPILATION_CACHE_DIR`` where set (JAX reads it itself: None here), else
    ``FEDJAX_ABC_JIT_CACHE`` (``off``: no cache), else ``~/.cache/fedjax_abc/jit``."""
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    folder = environ.get(CACHE_VARIABLE) or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "fedjax_abc", "jit")
    return None if folder == "off" else folder


def start_up() -> None:
    """JAX as the package's results assume it, as the README's first block sets it up, for
    the ``fedjax-abc`` command and each task it submits: 64-bit mode, and one CPU device per
    core (or what ``FEDJAX_ABC_CPU_CORES`` says), over which simulate shards the trials
    (same numbers); compiled programs kept across runs in JAX's persistent cache
    (:func:`jit_cache_folder`: a second run of a command compiles what took a second or
    more to compile only once; the same numbers)."""
    import jax

    import fedjax_abc

    jax.config.update("jax_enable_x64", True)
    fedjax_abc.use_cpu_cores()
    folder = jit_cache_folder()
    if folder is not None:
        jax.config.update("jax_compilation_cache_dir", folder)


class Overall:
    """Several experiments run one after another (``reproduce all``): how many are done and
    the time left for all of them, from the work of this run alone.

    ``names``: the experiments in the order they run; ``expected``: experiment -> its
    seconds in a reference run (``runtime.MEASURED_SECONDS``; one without counts 0). This
    run's pace is the seconds it spent over the reference seconds of the work it computed:
    work read back from checkpoints (a resumed run) costs no time and counts for nothing,
    so it neither speeds nor slows the estimate. Until an experiment has finished with work
    computed (or the running one has computed a quarter of its work and run a minute) no
    pace is measured, and the line says ``estimating...``. The time left is the pace times
    the reference seconds still to come: the experiments not begun, and the running one's
    share not read back less the time it has run, or, once it overruns, its work still to
    do.
    """

    # the running experiment's share computed, and its seconds, before its own pace counts
    LEAST_SHARE, LEAST_SECONDS = 0.25, 60.0

    def __init__(self, names: Sequence[str], expected: dict,
                 timer: Callable[[], float] = time.perf_counter):
        self.expected = {name: float(expected.get(name, 0.0)) for name in names}
        self.timer = timer
        self.start = timer()
        self.finished = {}  # experiment -> (its seconds, its share of work computed here)
        self.current = None
        self.began = self.start

    def begin(self, name: str) -> None:
        self.current, self.began = name, self.timer()

    def finish(self, name: str, computed: float = 1.0) -> None:
        """``computed``: the share of the experiment's work computed in this run (the rest
        read back from checkpoints)."""
        self.finished[name] = (self.timer() - self.began, min(max(float(computed), 0.0), 1.0))
        self.current = None

    def reference(self) -> float:
        """The reference seconds of every experiment (the stated duration)."""
        return sum(self.expected.values())

    def status(self, done: float, computed: Optional[float] = None) -> str:
        """``all k/N, ~m:ss left`` with the running experiment ``done`` of its work done,
        ``computed`` of it in this run (default: all of what is done)."""
        computed = done if computed is None else computed
        head = f"all {len(self.finished)}/{len(self.expected)}"
        running = self.timer() - self.began if self.current is not None else 0.0
        expected = self.expected.get(self.current, 0.0)
        work = sum(self.expected[n] * c for n, (_, c) in self.finished.items())
        took = sum(t for n, (t, c) in self.finished.items() if c > 0 and self.expected[n] > 0)
        if expected > 0 and computed >= self.LEAST_SHARE and running >= self.LEAST_SECONDS:
            work, took = work + expected * computed, took + running
        if work <= 0 or took <= 0:
            return f"{head}, estimating..." if self.reference() > 0 else head
        pace = took / work
        later = sum(v for n, v in self.expected.items()
                    if n not in self.finished and n != self.current)
        read_back = max(done - computed, 0.0)  # the running one's share read back
        by_time = pace * expected * (1.0 - read_back) - running
        by_work = pace * expected * max(1.0 - done, 0.0)
        return f"{head}, ~{clock(pace * later + max(by_time, by_work))} left"


def _per_second(rate: float) -> str:
    """A rate as a person reads it: 12,345 / 123 / 12.3 / 0.12."""
    if rate >= 100:
        return f"{rate:,.0f}"
    return f"{rate:.1f}" if rate >= 10 else f"{rate:.2g}"


class Progress:
    """One progress line per experiment on stderr: run, rounds done, rate, time left.

    ``plan(work)`` sets the total work (client-steps: a run's share of the experiment);
    ``task(desc, work)`` returns the progress meter of one run (``simulate(progress=...)``;
    also a callback ``(rounds_done, total, secs)``). The line shows the running run's
    rounds (or the task's ``unit``) done and per second, and the time left: the work still
    to do over the rate of the work computed in this process (rounds read back from a
    checkpoint are done, but no rate: ``estimating...`` until one is measured). A background
    thread rewrites the line every ``interval`` seconds (also while a run compiles), so
    nothing is silent for long. ``overall``: the :class:`Overall` of a run of several
    experiments (its status ends every line), or None.
    """

    def __init__(self, label: str, enabled: bool = True, stream=None, interval: Optional[float] = None,
                 overall: Optional[Overall] = None):
        self.overall = overall
        self.label = label
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (1.0 if self.tty else 3.0)
        self.total = 0.0
        self.done = 0.0  # work of the finished runs, computed or read back
        self.computed = 0.0  # work of the finished runs computed in this process
        self.current = ("starting", 0.0, 0, 0)  # desc, work, rounds done, rounds total
        self.resumed = 0.0  # the running run's share read back from a checkpoint
        self.runs = 0
        self.timings = []  # per run: work (client-steps), seconds, steady rate (after compile)
        self.diverged = {}  # run -> {"trials", "of", "first_round"}, runs with diverged trials
        self.timing = None
        self.start = time.perf_counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = None
        self.width = 0
        self.smooth_rate = None  # work/s computed here, smoothed over the progress lines
        self.unit, self.work_unit = "rounds", "client-steps"

    def plan(self, total_work: float):
        self.total = float(total_work)
        if self.enabled and self.thread is None:
            self.thread = threading.Thread(target=self._beat, daemon=True)
            self.thread.start()

    def task(self, desc: str, work: float, unit: str = "rounds",
             work_unit: str = "client-steps"):
        """The progress meter of one run. ``unit``: what the run's counts count (the line
        shows them done and per second); ``work_unit``: what ``work`` counts (its share of
        the experiment, as ``plan``'s total)."""
        now = time.perf_counter()
        with self.lock:
            self.unit, self.work_unit = unit, work_unit
            self.runs += 1
            self.current = (desc, float(work), 0, 0)
            self.resumed = 0.0
            self.timing = {"run": desc, "work": float(work), "start": now, "first": None,
                           "last": None}
        return _RunMeter(self, desc, float(work))

    def _started(self, desc: str, work: float, done: int, total: int) -> None:
        """A run's meter begins: ``done`` of its ``total`` rounds read back (a resumed run)."""
        with self.lock:
            self.current = (desc, work, int(done), int(total))
            self.resumed = done / total if total else 0.0

    def _reached(self, desc: str, work: float, done: int, total: int) -> None:
        t = time.perf_counter()
        with self.lock:
            self.current = (desc, work, int(done), int(total))
            frac = done / total if total else 0.0
            if self.timing["first"] is None:
                self.timing["first"] = (t, frac)
            self.timing["last"] = (t, frac)

    def _shares(self) -> tuple:
        """(work done, work computed in this process), the running run's share included."""
        desc, work, r_done, r_total = self.current
        frac = r_done / r_total if r_total else 0.0
        return (self.done + work * frac,
                self.computed + work * max(frac - self.resumed, 0.0))

    def computed_share(self) -> float:
        """The share of the planned work computed in this process (not read back)."""
        with self.lock:
            return min(self._shares()[1] / self.total, 1.0) if self.total else 1.0

    def finish_task(self):
        """Ends the current run; its time and steady rate go to ``timings``."""
        now = time.perf_counter()
        with self.lock:
            desc, work, r_done, r_total = self.current
            reported = self.timing["last"] is not None
            frac = r_done / r_total if r_total else 0.0
            self.done += work
            # a run that reported nothing was read back whole (or computed outside a run)
            self.computed += work * max(frac - self.resumed, 0.0) if reported else 0.0
            self.current = (desc + ", done", 0.0, 0, 0)
            self.resumed = 0.0
            tm = self.timing
            rate = None
            if tm["first"] is not None and tm["last"][1] > tm["first"][1]:
                (t0, f0), (t1, f1) = tm["first"], tm["last"]
                rate = tm["work"] * (f1 - f0) / max(t1 - t0, 1e-9)
            self.timings.append({"run": tm["run"], "work": tm["work"],
                                 "seconds": now - tm["start"], "steady_rate": rate})

    def note_diverged(self, desc: str, count: int, of: int, first_round) -> None:
        """Records that ``count`` of ``of`` trials of run ``desc`` diverged (none: nothing)."""
        if count:
            self.diverged[desc] = {"trials": int(count), "of": int(of),
                                   "first_round": None if first_round is None else int(first_round)}

    def line(self) -> str:
        with self.lock:
            desc, work, r_done, r_total = self.current
            done, computed = self._shares()
            tm = self.timing
            pace = None  # the running run's rounds per second, after its first report
            if tm is not None and tm["first"] is not None and tm["last"][0] > tm["first"][0]:
                (t0, f0), (t1, f1) = tm["first"], tm["last"]
                pace = (f1 - f0) * r_total / (t1 - t0)
        elapsed = time.perf_counter() - self.start
        frac = min(done / self.total, 1.0) if self.total else 0.0
        if r_total:
            rounds = f"{self.unit} {r_done:,}/{r_total:,}"
        else:
            rounds = "between runs" if desc.endswith(", done") else "compiling or running"
        whole = ""
        if self.overall is not None:
            share = computed / self.total if self.total else 0.0
            whole = f" | {self.overall.status(frac, min(share, 1.0))}"
        speed = f" | {_per_second(pace)} {self.unit.split()[0]}/s" if pace else ""
        if computed <= 0:  # nothing computed here yet: compiling, or all read back so far
            state = "compiling" if done <= 0 else "estimating..."
            return (f"{self.label} [{desc}] {rounds} | {100 * frac:5.1f}% | {state}"
                    f" | {clock(elapsed)} elapsed{whole}")
        rate = computed / elapsed
        # exponential smoothing: one slow or fast interval moves the estimate by a third
        self.smooth_rate = rate if self.smooth_rate is None else (
            self.smooth_rate + (rate - self.smooth_rate) / 3)
        left = (self.total - done) / self.smooth_rate if self.total else float("inf")
        return (f"{self.label} [{desc}] {rounds} | {100 * frac:5.1f}%{speed}"
                f" | {clock(elapsed)} elapsed, ~{clock(max(left, 0.0))} left{whole}")

    def _write(self, text: str, final: bool = False):
        if self.tty:
            pad = max(0, self.width - len(text))
            self.stream.write("\r" + text + " " * pad + ("\n" if final else ""))
            self.width = 0 if final else len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _beat(self):
        while not self.stop.wait(self.interval):
            self._write(self.line())

    def close(self, message: str = ""):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        if self.enabled:
            elapsed = time.perf_counter() - self.start
            stopped = sys.exc_info()[0] is not None  # closed by a finally: the run was stopped
            word = "stopped after" if stopped else "done in"
            text = f"{self.label}: {word} {clock(elapsed)}" + (f" ({message})" if message else "")
            self._write(text, final=True)


class _RunMeter(AbstractProgressMeter):
    """One run's meter in a :class:`Progress`: told at ``init`` the rounds read back from a
    checkpoint, after each segment the rounds done. Also a callback ``(rounds_done, total,
    secs)`` for work that is not a ``simulate`` run."""

    progress: Any
    desc: str
    work: float

    def init(self, total: int, label: str, done: int = 0):
        self.progress._started(self.desc, self.work, done, total)
        return total

    def step(self, state, done: int):
        self.progress._reached(self.desc, self.work, done, state)
        return state

    def close(self, state) -> None:
        return None

    def __call__(self, rounds_done, total, seconds=0.0):
        self.progress._reached(self.desc, self.work, rounds_done, total)


# ------------------------------------------------------------------------- earlier runs

ELAPSED_FILE = "elapsed.json"  # in an experiment's checkpoint folder


def earlier_runs(folder: Optional[str], experiment: str) -> dict:
    """What the earlier runs of an experiment resumed from ``folder`` (its checkpoints) took:
    ``{"seconds", "runs", "timings"}``, zeros where there were none, or where no checkpoint
    is left to resume from (the run starts afresh)."""
    empty = {"seconds": 0.0, "runs": 0, "timings": []}
    if folder is None:
        return empty
    sub = os.path.join(folder, experiment)
    path = os.path.join(sub, ELAPSED_FILE)
    try:
        if not any(name.endswith(".npz") for name in os.listdir(sub)):
            return empty
    except OSError:
        return empty
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        return {"seconds": float(doc["seconds"]), "runs": int(doc["runs"]),
                "timings": list(doc.get("timings") or [])}
    except (OSError, ValueError, KeyError, TypeError):  # none, or damaged: counted as none
        return empty


def note_run(folder: Optional[str], experiment: str, earlier: dict, seconds: float,
             timings: list) -> dict:
    """Adds this run's ``seconds`` and ``timings`` to the ``earlier`` runs' and keeps them
    beside the experiment's checkpoints (for a run that resumes it); returns the sums."""
    total = {"seconds": earlier["seconds"] + seconds, "runs": earlier["runs"] + 1,
             "timings": merged_timings(earlier["timings"], timings)}
    if folder is not None:
        with contextlib.suppress(OSError):  # a note for the next run: never the run's failure
            write_json(os.path.join(folder, experiment, ELAPSED_FILE), total)
    return total


def merged_timings(earlier: list, now: list) -> list:
    """This run's timings, a run read back whole (no rate measured now) taking its rate from
    the earlier run that computed it, the seconds of both added."""
    before = {t["run"]: t for t in earlier if t.get("steady_rate")}
    out = []
    for t in now:
        e = before.get(t["run"])
        if not t.get("steady_rate") and e is not None:
            t = dict(e, seconds=e["seconds"] + t["seconds"])
        out.append(t)
    return out


# ---------------------------------------------------------------------------- simulation


def simulate(problem, *, num_sampled: int, local_steps: int, stepsize: float, rounds: int, x0,
             trials: int, key, precision: str, record: int, progress: Progress, desc: str,
             algorithm=None, checkpoint: Optional[str] = None):
    """``fa.simulate`` the way every experiment calls it: gather for S < n, no iterates kept.

    ``algorithm``: a ``fa.algorithms`` value, or None for Algorithm 1. Diverged trials (if
    any) are noted in ``progress.diverged[desc]``; ``checkpoint``: the run's checkpoint file
    (see ``fa.simulate``), or None.
    """
    import warnings

    import fedjax_abc as fa

    n = problem.num_clients
    work = work_units(n, num_sampled, local_steps, rounds, trials)
    callback = progress.task(desc, work)
    with warnings.catch_warnings():  # counted in the results and the report instead
        warnings.simplefilter("ignore", fa.DivergenceWarning)
        result = fa.simulate(problem, num_sampled=num_sampled, local_steps=local_steps,
                             stepsize=stepsize, rounds=rounds, x0=x0, trials=trials, key=key,
                             record_every=record, mode="gather" if num_sampled < n else "mask",
                             dtype=precision, record_x=False, progress=callback,
                             algorithm=algorithm, checkpoint=checkpoint)
    progress.finish_task()
    note_result(progress, desc, result)
    return result


def note_result(progress: Progress, desc: str, result) -> None:
    """Notes a SimResult's diverged trials (if any) in ``progress.diverged``."""
    first = int(result.diverged_at[result.diverged].min()) if result.num_diverged else None
    progress.note_diverged(desc, result.num_diverged, result.trials, first)


def final_stats(result, name: str) -> dict:
    """{"mean", "stderr"} at t = T over the trials that did not diverge (as :func:`mean_se`
    on them; how many diverged goes to ``Progress.diverged``)."""
    s = result.final(name)
    return {"mean": s.mean, "stderr": s.stderr}


def work_units(n: int, num_sampled: int, local_steps: int, rounds: int, trials: int) -> float:
    """Client-steps a run computes: trials x S x Q x T."""
    return float(trials) * min(num_sampled, n) * local_steps * rounds


# -------------------------------------------------------------------------------- output


def jsonable(value: Any) -> Any:
    """NumPy scalars/arrays to Python; NaN and infinities to None (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # a jax array
        return jsonable(np.asarray(value))
    return value


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", **kwargs):
    """A file to write that replaces ``path`` only when the ``with`` block succeeds.

    The data go to a hidden temporary file in the same folder (created if needed), which is
    flushed, synced and then renamed over ``path`` (``os.replace``, atomic): a write that
    fails or is interrupted half way leaves the previous file intact and no temporary file
    behind. The new file gets the usual permissions (0o666 less the umask).

    Args:
      path: the file to write.
      mode: "w" (text) or "wb" (bytes).
      **kwargs: passed to ``open`` (e.g. ``newline=""`` for CSV).

    Example:
      >>> import os, tempfile
      >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
      >>> with atomic_open(path) as fh:
      ...     _ = fh.write("done")
      >>> open(path).read(), os.listdir(os.path.dirname(path))
      ('done', ['a.txt'])
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode ({mode!r}) must be 'w' or 'wb'")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tag = f"{os.getpid()}.{secrets.token_hex(4)}"
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{tag}.tmp")
    try:
        with open(tmp, "x" + mode[1:], **kwargs) as fh:  # "x": a new file, never another's
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: str, doc: dict) -> str:
    """Writes ``jsonable(doc)`` as strict JSON to ``path`` (atomically); returns the path."""
    with atomic_open(path) as fh:
        json.dump(jsonable(doc), fh, indent=1, allow_nan=False)
        fh.write("\n")
    return path


def write_csv(path: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Writes a header and rows as CSV to ``path`` (atomically); returns the path."""
    with atomic_open(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for row in rows:
            writer.writerow(["" if v is None else (f"{v:.10g}" if isinstance(v, float) else v)
                             for v in jsonable(list(row))])
    return path


def mean_se(values) -> dict:
    """{"mean", "stderr"} over the first axis (stderr = sample sd / sqrt(R))."""
    values = np.asarray(values, dtype=float)
    m = values.shape[0]
    se = values.std(axis=0, ddof=1) / np.sqrt(m) if m > 1 else np.nan
    return {"mean": values.mean(axis=0), "stderr": se}


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out: str, name: str) -> str:
    """Lays out, writes ``<out>/<name>`` (PNG, 120 dpi, atomically) and closes a figure.

    Returns:
      The path written.
    """
    path = os.path.join(out, name)
    try:
        fig.tight_layout()
        with atomic_open(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=120)
    finally:
        pyplot().close(fig)
    return path


def band(ax, rounds, mean, half, label, color=None):
    """A mean curve with its 95% band on a log axis (the band clipped to positive values)."""
    from fedjax_abc._engine import plot_band

    return plot_band(ax, rounds, mean, half, label, color=color, lw=1.4)
