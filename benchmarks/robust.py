"""Byzantine-robust aggregation: a robustness grid run by the package, ByzFL's loop and NumPy.

Run from the repository root::

    python benchmarks/robust.py                        # the grid, 3 repeats
    python benchmarks/robust.py --quick                # tiny sizes, one rule and attack
    python benchmarks/robust.py --json benchmarks/results/robust.json

Workload: heterogeneous diagonal quadratics (``fa.problems.quadratics(key(0), n=20,
d=10)``, the Gaussian oracle of variance C (f_i - f_i*) + D, C = 1, D = 0.1), full
participation, Q = 1 local step of stepsize 0.05 (robust D-SGD), T = 200 rounds, 64 trials
per point, float64, x_0 = x* + 1. The grid: the rules Median, TrimmedMean(6) and Krum(6)
(the server tolerates f = 6) x the attacks SignFlip, InnerProductManipulation(2) and
ALittleIsEnough(1.5) x f = 1, 2, 4, 6 Byzantine clients, drawn per trial: 36 points.

Rows, timed one after the other in this process, each repeat in the same order:

- ``package loop``: one ``fa.simulate(problem, aggregator=rule,
  byzantine=fa.robust.Byzantine(attack, f=f), trials=64, ...)`` a point (f is an array
  leaf: the 36 calls compile 9 programs, one per rule and attack);
- ``package sweep``: one ``fa.sweep(problem, grid={"aggregator": rules, "byzantine":
  [Byzantine(attack, f=f) ...]})``, the grid's points of one rule and attack one program;
- ``numpy``: :func:`benchmarks.baselines.robust.numpy_robust`, a point at a time, its 64
  trials vectorised, Python loops over rounds;
- ``byzfl``: :func:`benchmarks.baselines.robust.byzfl_robust`, ByzFL's ``RobustAggregator``
  and ``ByzantineClient`` in a training loop written after ByzFL's DSGD loop, one trajectory
  at a time (as ByzFL's benchmark runs one configuration per process); timed on a few
  trajectories a point (its time grows linearly with them). ByzFL's ``Server`` and
  ``Client`` train torch models from data loaders and are not used.

The package's first call (or sweep) compiles: its extra time over the fastest later call is
``compile_s``, apart from ``run_s``. Before timing, the baselines are checked against the
package: exactly (exact gradients, the same fixed Byzantine clients: the same x_T to
rounding, every rule and attack) and in distribution (the Gaussian oracle, sets drawn per
trial: the mean of every coordinate of x_T and of f(x_T) within ``Z`` standard errors).

Throughput is trajectories per second per core: points x trials / run s / cores, with the
cores a row may use (the package: every usable core, its trials sharded over one CPU device
a core; NumPy and ByzFL: one, single-threaded). ``cpu/wall`` is the process's CPU seconds
over the wall seconds of the row (the cores it kept busy). The ratio is the package's
figure over the baseline's. On a shared machine the package's threads lose more to other
work than a single-threaded loop does; trajectories per CPU second (``x_numpy_cpu``,
``x_byzfl_cpu``) are reported beside the wall-clock figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from typing import NamedTuple

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAU = {"sign_flip": 0.0, "ipm": 2.0, "alie": 1.5}
Z = 4.0  # the distribution check's bound, in standard errors
EXACT_TOL = 1e-10  # the exact check's bound on max |x_T - x_T'|, relative to max(1, |x_T|)


class Workload(NamedTuple):
    n: int = 20
    d: int = 10
    local_steps: int = 1
    rounds: int = 200
    trials: int = 64
    stepsize: float = 0.05
    fs: tuple = (1, 2, 4, 6)
    declared_f: int = 6
    rules: tuple = ("median", "trimmed_mean", "krum")
    attacks: tuple = ("sign_flip", "ipm", "alie")

    def points(self) -> list:
        """(rule, attack, f) of every point, rules outermost (the sweep's order)."""
        return [(r, a, f) for r in self.rules for a in self.attacks for f in self.fs]


FULL = Workload()
QUICK = Workload(n=7, d=3, rounds=10, trials=8, fs=(1, 2), declared_f=2, rules=("median",),
                 attacks=("alie",))


def load() -> list:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else [float("nan")] * 3


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# ------------------------------------------------------------------------------- the set-up


def setup(w: Workload):
    """(problem, base, x0): the package's problem, its arrays for the baselines, x* + 1."""
    import jax
    import numpy as np

    import fedjax_abc as fa
    from benchmarks.baselines.problems import Quadratics

    problem = fa.problems.quadratics(jax.random.key(0), n=w.n, d=w.d)
    a, c = problem.params
    base = Quadratics(np.asarray(a), np.asarray(c), C=float(problem.oracle.C),
                      D=float(problem.oracle.D))
    return problem, base, np.asarray(problem.x_star) + 1.0


def rule(name: str, declared_f: int):
    import fedjax_abc as fa

    return {"median": lambda: fa.robust.Median(),
            "trimmed_mean": lambda: fa.robust.TrimmedMean(declared_f),
            "krum": lambda: fa.robust.Krum(declared_f)}[name]()


def attack(name: str):
    import fedjax_abc as fa

    return {"sign_flip": lambda: fa.robust.SignFlip(),
            "ipm": lambda: fa.robust.InnerProductManipulation(TAU["ipm"]),
            "alie": lambda: fa.robust.ALittleIsEnough(TAU["alie"])}[name]()


def common_kwargs(w: Workload, x0, exact: bool = False) -> dict:
    import fedjax_abc as fa

    kw = dict(num_sampled=None, local_steps=w.local_steps, stepsize=w.stepsize,
              rounds=w.rounds, x0=x0, record_every=w.rounds)
    if exact:
        kw["oracle"] = fa.ExactOracle()
    return kw


def baseline_kwargs(w: Workload, x0, rule_name, attack_name, f, trials, seed, **extra) -> dict:
    return dict(rule=rule_name, attack=attack_name, f=f, declared_f=w.declared_f,
                tau=TAU[attack_name], local_steps=w.local_steps, stepsize=w.stepsize,
                rounds=w.rounds, x0=x0, trials=trials, seed=seed, **extra)


# ------------------------------------------------------------------------ the grid, each way


def package_loop(problem, w: Workload, x0, seed: int) -> list:
    """x_T (trials, d) of every point: one ``fa.simulate`` call a point."""
    import jax
    import numpy as np

    import fedjax_abc as fa

    kw = common_kwargs(w, x0)
    out = []
    for r, a, f in w.points():
        res = fa.simulate(problem, aggregator=rule(r, w.declared_f),
                          byzantine=fa.robust.Byzantine(attack(a), f=f), trials=w.trials,
                          key=jax.random.key(seed), **kw)
        out.append(np.asarray(res.x_final))
    return out


def package_sweep(problem, w: Workload, x0, seed: int) -> list:
    """x_T (trials, d) of every point: one ``fa.sweep`` over the grid."""
    import jax
    import numpy as np

    import fedjax_abc as fa

    grid = {"aggregator": [rule(r, w.declared_f) for r in w.rules],
            "byzantine": [fa.robust.Byzantine(attack(a), f=f) for a in w.attacks
                          for f in w.fs]}
    res = fa.sweep(problem, grid=grid, trials=w.trials, key=jax.random.key(seed),
                   **common_kwargs(w, x0))
    return [np.asarray(r.x_final) for r in res.results]


def numpy_grid(base, w: Workload, x0, seed: int) -> list:
    from benchmarks.baselines.robust import numpy_robust

    return [numpy_robust(base, **baseline_kwargs(w, x0, r, a, f, w.trials, seed + i))
            for i, (r, a, f) in enumerate(w.points())]


def byzfl_grid(base, w: Workload, x0, seed: int, trials: int) -> list:
    from benchmarks.baselines.robust import byzfl_robust

    return [byzfl_robust(base, **baseline_kwargs(w, x0, r, a, f, trials, seed + i))
            for i, (r, a, f) in enumerate(w.points())]


# ----------------------------------------------------------------------------------- checks


def check_exact(problem, base, w: Workload, x0, with_byzfl: bool) -> list:
    """Exact gradients, the same fixed Byzantine clients (max(fs) of them, spread over the
    clients): every rule and attack's x_T by the package, NumPy and ByzFL, and their
    largest differences. Raises AssertionError beyond ``EXACT_TOL``."""
    import jax
    import numpy as np

    import fedjax_abc as fa
    from benchmarks.baselines.robust import byzfl_robust, numpy_robust

    f = max(w.fs)
    clients = [int(i) for i in np.linspace(0, w.n - 1, f).round()]
    rows = []
    for r in w.rules:
        for a in w.attacks:
            res = fa.simulate(problem, aggregator=rule(r, w.declared_f),
                              byzantine=fa.robust.Byzantine(attack(a), clients=clients),
                              trials=1, key=jax.random.key(0), **common_kwargs(w, x0, exact=True))
            ref = np.asarray(res.x_final)[0]
            kw = baseline_kwargs(w, x0, r, a, f, 1, 0, exact=True, clients=clients)
            scale = max(1.0, float(np.max(np.abs(ref))))
            row = {"rule": r, "attack": a, "f": f, "clients": clients,
                   "numpy_max_abs_diff": float(np.max(np.abs(numpy_robust(base, **kw)[0] - ref))),
                   "moved": float(np.max(np.abs(ref - x0)))}
            if with_byzfl:
                row["byzfl_max_abs_diff"] = float(np.max(np.abs(
                    byzfl_robust(base, **kw)[0] - ref)))
            for key in ("numpy_max_abs_diff", "byzfl_max_abs_diff"):
                assert row.get(key, 0.0) <= EXACT_TOL * scale, f"exact check failed: {row}"
            rows.append(row)
    return rows


def _stats(base, x):
    """The statistics compared: every coordinate of x_T and f(x_T), shape (R, d + 1)."""
    import numpy as np

    from benchmarks.baselines.robust import objective

    return np.concatenate([x, objective(base, x)[:, None]], axis=1)


def _z(a, b):
    import numpy as np

    se = np.sqrt(a.var(axis=0, ddof=1) / len(a) + b.var(axis=0, ddof=1) / len(b))
    return np.abs(a.mean(axis=0) - b.mean(axis=0)) / np.where(se > 0, se, np.inf)


def check_distribution(problem, base, w: Workload, x0, *, calls: int, byzfl_trials: int,
                       with_byzfl: bool) -> list:
    """The Gaussian oracle, Byzantine sets drawn per trial, f = max(fs): every rule and
    attack's x_T by the package (``calls`` calls of ``w.trials`` trials, new keys: the timed
    program), NumPy (as many trials) and ByzFL (``byzfl_trials``); the largest |z| over the
    coordinates of x_T and f(x_T). Raises AssertionError beyond ``Z``."""
    import jax
    import numpy as np

    import fedjax_abc as fa
    from benchmarks.baselines.robust import byzfl_robust, numpy_robust

    f = max(w.fs)
    rows = []
    for i, (r, a) in enumerate((r, a) for r in w.rules for a in w.attacks):
        runs = [fa.simulate(problem, aggregator=rule(r, w.declared_f),
                            byzantine=fa.robust.Byzantine(attack(a), f=f), trials=w.trials,
                            key=jax.random.key(1000 + k), **common_kwargs(w, x0)).x_final
                for k in range(calls)]
        ref = _stats(base, np.concatenate([np.asarray(x) for x in runs]))
        ours = _stats(base, numpy_robust(base, **baseline_kwargs(
            w, x0, r, a, f, len(ref), 2000 + i)))
        row = {"rule": r, "attack": a, "f": f, "package_trials": len(ref),
               "numpy_trials": len(ours), "numpy_max_z": float(np.max(_z(ref, ours)))}
        if with_byzfl:
            theirs = _stats(base, byzfl_robust(base, **baseline_kwargs(
                w, x0, r, a, f, byzfl_trials, 3000 + i)))
            row.update(byzfl_trials=len(theirs), byzfl_max_z=float(np.max(_z(ref, theirs))))
        # the runs must move: the mean of f(x_T) differs from f(x_0) by many standard errors
        f0 = float(_stats(base, np.asarray(x0)[None])[0, -1])
        row["moved_z"] = float(abs(ref[:, -1].mean() - f0) / (ref[:, -1].std(ddof=1)
                                                              / np.sqrt(len(ref)) + 1e-300))
        for key in ("numpy_max_z", "byzfl_max_z"):
            assert row.get(key, 0.0) < Z, f"distribution check failed: {row}"
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------- timing


def _timed(fn) -> tuple:
    """(wall s, CPU s of the process's threads) of one call."""
    c, t = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def _sides(problem, base, w: Workload, x0, byzfl_trials: int) -> dict:
    return {"package loop": lambda s: package_loop(problem, w, x0, s),
            "package sweep": lambda s: package_sweep(problem, w, x0, s),
            "numpy": lambda s: numpy_grid(base, w, x0, 10_000 * s),
            "byzfl": lambda s: byzfl_grid(base, w, x0, 10_000 * s, byzfl_trials)}


def first_calls(problem, w: Workload, x0, sides=("package loop", "package sweep"),
                log=print) -> dict:
    """The wall seconds of the package's first call of each side (key 1): compilation and
    one run. Call it before anything else runs the same programs."""
    go = _sides(problem, None, w, x0, 0)
    first = {}
    for side in sides:
        if side.startswith("package"):
            first[side] = _timed(lambda: go[side](1))[0]
            log(f"{side}: first call {first[side]:.2f} s (compiles)")
    return first


def measure(problem, base, w: Workload, x0, *, repeats: int, byzfl_trials: int,
            sides=("package loop", "package sweep", "numpy", "byzfl"), first=None,
            log=print) -> dict:
    """Times every side on the grid ``repeats`` times, in the same order each time (keys
    and seeds new each time); ``first``: the package's first calls (:func:`first_calls`,
    made here when None). Returns the rows (the fastest repeat of each side) and each
    repeat's times and load average."""
    points = len(w.points())
    go = _sides(problem, base, w, x0, byzfl_trials)
    if first is None:
        first = first_calls(problem, w, x0, sides, log)
    repeat_rows = []
    for k in range(repeats):
        entry = {"load_before": load(), "times": {}}
        for side in sides:
            wall, cpu = _timed(lambda: go[side](2 + k))
            entry["times"][side] = {"run_s": wall, "cpu_s": cpu}
        entry["load_after"] = load()
        repeat_rows.append(entry)
        log(f"repeat {k + 1}: " + ", ".join(f"{s} {v['run_s']:.3f} s"
                                           for s, v in entry["times"].items())
            + f" (load {entry['load_before'][0]:.2f} -> {entry['load_after'][0]:.2f})")
    rows = []
    for side in sides:
        best = min((e["times"][side] for e in repeat_rows), key=lambda v: v["run_s"])
        trials = byzfl_trials if side == "byzfl" else w.trials
        cores = usable_cores() if side.startswith("package") else 1
        rate = points * trials / best["run_s"]
        row = {"side": side, "points": points, "trials": trials, "run_s": best["run_s"],
               "cpu_s": best["cpu_s"], "cpu_per_wall": best["cpu_s"] / best["run_s"],
               "cores": cores, "trajectories_per_s": rate,
               "trajectories_per_s_per_core": rate / cores,
               "trajectories_per_cpu_s": points * trials / best["cpu_s"],
               "run_s_repeats": [e["times"][side]["run_s"] for e in repeat_rows]}
        if side in first:
            row["compile_s"] = max(first[side] - best["run_s"], 0.0)
            row["first_call_s"] = first[side]
        rows.append(row)
    per_core = {r["side"]: r["trajectories_per_s_per_core"] for r in rows}
    per_cpu = {r["side"]: r["trajectories_per_cpu_s"] for r in rows}
    for r in rows:
        if r["side"].startswith("package"):
            for base_side in ("numpy", "byzfl"):
                if base_side in per_core:
                    r[f"x_{base_side}"] = r["trajectories_per_s_per_core"] / per_core[base_side]
                    r[f"x_{base_side}_cpu"] = r["trajectories_per_cpu_s"] / per_cpu[base_side]
    for e in repeat_rows:  # the ratios within each repeat (the sides timed side by side)
        t = e["times"]
        e["ratios"] = {f"{side} x {b}": (t[b]["run_s"] / (byzfl_trials if b == "byzfl" else
                                                          w.trials))
                       / (t[side]["run_s"] / w.trials) / usable_cores()
                       for side in t if side.startswith("package") for b in ("numpy", "byzfl")
                       if b in t}
    return {"rows": rows, "repeats": repeat_rows}


def parts(problem, w: Workload, x0, *, repeats: int, log=print) -> list:
    """Where a round's time goes: one point of each rule (the sign flip, f = max(fs)) and
    the plain mean without Byzantine clients, each with the Gaussian oracle and with exact
    gradients, ``w.trials`` trials, the fastest of ``repeats`` calls after a first one."""
    import jax
    import numpy as np

    import fedjax_abc as fa

    f = max(w.fs)
    rows = []
    for name in w.rules + ("mean",):
        for exact in (False, True):
            extra = {} if name == "mean" else dict(
                aggregator=rule(name, w.declared_f),
                byzantine=fa.robust.Byzantine(attack("sign_flip"), f=f))

            def go(seed):
                res = fa.simulate(problem, trials=w.trials, key=jax.random.key(seed),
                                  **common_kwargs(w, x0, exact), **extra)
                np.asarray(res.x_final)

            first = _timed(lambda: go(1))[0]
            run = min(_timed(lambda: go(2 + k))[0] for k in range(repeats))
            us = run / (w.trials * w.rounds) * 1e6
            rows.append({"rule": name, "attack": None if name == "mean" else "sign_flip",
                         "f": 0 if name == "mean" else f,
                         "oracle": "exact" if exact else "gaussian", "run_s": run,
                         "compile_s": max(first - run, 0.0), "us_per_trial_round": us})
            log(f"parts: {name:12s} {rows[-1]['oracle']:8s} {run * 1e3:8.1f} ms, "
                f"{us:6.2f} us a trial-round (wall, {usable_cores()} cores)")
    return rows


def machine() -> dict:
    from benchmarks.run import machine_info

    info = machine_info()
    from benchmarks.baselines.robust import load_byzfl

    byzfl, reason = load_byzfl()
    info["byzfl"] = byzfl.version if byzfl is not None else None
    info["byzfl_fed_framework"] = bool(byzfl is not None and byzfl.fed_framework is not None)
    info["byzfl_reason"] = reason or None
    try:
        import torch

        info["torch"] = torch.__version__
    except Exception:
        info["torch"] = None
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: one rule and attack")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--byzfl-trials", type=int, default=4,
                    help="ByzFL's trajectories a point (one at a time)")
    ap.add_argument("--check-calls", type=int, default=8,
                    help="the package's calls of 64 trials in the distribution check")
    ap.add_argument("--check-byzfl-trials", type=int, default=128)
    ap.add_argument("--no-checks", action="store_true")
    ap.add_argument("--parts", action="store_true",
                    help="also time each rule with exact gradients and the plain mean")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    import jax

    import fedjax_abc as fa
    from benchmarks.baselines.robust import load_byzfl

    jax.config.update("jax_enable_x64", True)
    fa.use_cpu_cores()
    w = QUICK if args.quick else FULL
    byzfl, reason = load_byzfl()
    if byzfl is None:
        print(f"ByzFL: not run ({reason})")
    elif byzfl.fed_framework is None:
        print("ByzFL: its fed_framework cannot be imported; its aggregator and attack classes")
    sides = ("package loop", "package sweep", "numpy") + (("byzfl",) if byzfl else ())
    problem, base, x0 = setup(w)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_start = load()
    first = first_calls(problem, w, x0, [s for s in sides if s.startswith("package")])
    checks = {}
    if not args.no_checks:
        t = time.perf_counter()
        checks["exact"] = check_exact(problem, base, w, x0, byzfl is not None)
        worst = max(max(r["numpy_max_abs_diff"], r.get("byzfl_max_abs_diff", 0.0))
                    for r in checks["exact"])
        print(f"exact check: {len(checks['exact'])} rule x attack, largest |x_T difference| "
              f"{worst:.1e} ({time.perf_counter() - t:.1f} s)")
        t = time.perf_counter()
        checks["distribution"] = check_distribution(
            problem, base, w, x0, calls=2 if args.quick else args.check_calls,
            byzfl_trials=16 if args.quick else args.check_byzfl_trials,
            with_byzfl=byzfl is not None)
        worst = max(max(r["numpy_max_z"], r.get("byzfl_max_z", 0.0))
                    for r in checks["distribution"])
        print(f"distribution check: largest |z| {worst:.2f} < {Z} "
              f"({time.perf_counter() - t:.1f} s)")
    out = measure(problem, base, w, x0, repeats=args.repeats,
                  byzfl_trials=2 if args.quick else args.byzfl_trials, sides=sides, first=first)
    for r in out["rows"]:
        ratios = ", ".join(f"{r[k]:.2f}x {k[2:]}" for k in ("x_numpy", "x_byzfl") if k in r)
        comp = f", compile {r['compile_s']:.1f} s" if "compile_s" in r else ""
        print(f"{r['side']:14s} {r['trajectories_per_s_per_core']:10.1f} trajectories/s/core "
              f"({r['points']} points x {r['trials']} trials in {r['run_s']:.3f} s on "
              f"{r['cores']} core(s), cpu/wall {r['cpu_per_wall']:.2f}{comp})"
              + (f": {ratios}" if ratios else ""))
    if args.parts:
        out["parts"] = parts(problem, w, x0, repeats=args.repeats)
    if args.json:
        info = machine()
        info.update(started=started, load_start=load_start, load_end=load())
        doc = {"machine": info, "workload": dict(w._asdict(), tau=TAU, dtype="float64",
                                                 oracle="gaussian C=1 D=0.1"),
               "quick": args.quick, "checks": checks, **out}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        print("wrote", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
