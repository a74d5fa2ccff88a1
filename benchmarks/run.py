"""Throughput of ``fedjax_abc.simulate`` against independent baselines.

Run from the repository root::

    python benchmarks/run.py                     # everything, 2 passes (about 10 minutes)
    python benchmarks/run.py --quick             # a tiny configuration (under a minute)
    python -m benchmarks.run --only table2       # one workload
    python benchmarks/run.py --only table2 --num-sampled 4 --impl fedjax_abc --impl numba
    python benchmarks/run.py --json benchmarks/results/latest.json
    python benchmarks/report.py benchmarks/results/latest.json -o docs/performance.md
    python benchmarks/merge.py partial.json --why "..."   # a partial run into latest.json

Every case runs in its own subprocess (``benchmarks/_worker.py``), so its peak memory is
its own: the first call with key 1 compiles and runs, the next ones with new keys are timed
(until they add up to 1.5 s; the fastest counts). Each case runs once per pass (two by
default, the second in reverse order) and its fastest pass is kept. "compile s" is the first
call's time minus the second's. Throughput is counted in
client-steps: virtual = trials * n * Q * T / run s (all n clients, as in the mask
formulation, whatever a mode computes), sampled = trials * S * Q * T / run s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import report  # noqa: E402
from benchmarks._worker import RESULT_MARK  # noqa: E402
from benchmarks.workloads import (  # noqa: E402
    BASELINE_MODE, BASELINE_ROUNDS, NUMBA_CORES, WORKLOADS, cases)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The targets of the issue "Throughput: benchmarks against baselines".
TABLE2 = dict(workload="table2", problem="huber27", n=40, Q=10, S=4, T=2000, trials=1000)
COMPILE_LIMIT_S = 5.0
MEMORY_TOLERANCE = 0.25  # peak at 4T may exceed the peak at T by 25% of the working set ...
MEMORY_SLACK_MB = 16.0   # ... plus this much (allocator and thread-pool noise, ~20 MB seen)


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    for pkg in ("jax", "jaxlib", "numpy", "equinox", "fedjax_abc", "numba"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu_model"] = fields.get("Model name")
        info["cores_per_socket"] = fields.get("Core(s) per socket")
        info["threads_per_core"] = fields.get("Thread(s) per core")
        info["sockets"] = fields.get("Socket(s)")
        # the widest vector instructions: a SIMD kernel's speed (Numba's, XLA's) depends on them
        flags = set(fields.get("Flags", "").split())
        info["simd"] = next((f for f in ("avx512f", "avx2", "avx", "sse2", "asimd")
                             if f in flags), None)
    except (OSError, subprocess.SubprocessError):
        info["cpu_model"] = platform.processor() or None
    info["git"] = git_state()
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def git_state() -> dict | None:
    """The checked-out commit and whether fedjax_abc/ differs from it (read-only git calls)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--",
                                "fedjax_abc"], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "package_modified": bool(dirty.stdout.strip())}


def pythonpath(repo: str) -> str:
    """PYTHONPATH for a worker of the checkout ``repo``: its root before any other entry."""
    rest = os.environ.get("PYTHONPATH")
    return repo + (os.pathsep + rest if rest else "")


def run_case(case: dict, timeout: float, repo: str = REPO) -> dict:
    """Runs one case in a subprocess with the worker and package of the checkout ``repo``;
    returns the case with its measurements (or an error)."""
    env = dict(os.environ, PYTHONPATH=pythonpath(repo))
    t = time.perf_counter()
    row = dict(case)
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks._worker", json.dumps(case)],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        row["error"] = f"timed out after {timeout:.0f} s"
        return row
    row["wall_s"] = time.perf_counter() - t
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        row["error"] = f"exit {proc.returncode}: " + " | ".join(tail)
        return row
    row.update(json.loads(lines[-1][len(RESULT_MARK):]))
    steps = case["trials"] * case.get("grid", 1) * case["Q"] * case["T"]
    row["virtual_rate"] = steps * case["n"] / row["run_s"]
    row["sampled_rate"] = steps * case["S"] / row["run_s"]
    return row


def _same_shape(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in ("workload", "problem", "n", "d", "S", "Q", "trials"))


def _find(rows, **want):
    for r in rows:
        if "error" not in r and all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def learning_targets(rows):
    """The learning workload: the package >= 5x NumPy and ahead of PyTorch, both modes and
    dtypes, on one CPU device per core where those rows ran (as ``fa.use_cpu_cores()`` and
    the CLI run), else on the default device."""
    if not any(r["workload"] == "learning" for r in rows):
        return []
    ncores = max([r["cpu_devices"] for r in rows
                  if r["workload"] == "learning" and r.get("cpu_devices")] + [0]) or None
    where = f"{ncores} CPU devices" if ncores else "one device"
    out = []
    for dtype in ("float64", "float32"):
        for mode in ("mask", "gather"):
            row = _find(rows, workload="learning", impl="fedjax_abc", mode=mode, dtype=dtype,
                        cpu_devices=ncores, native_loops=None)
            for base, limit, key in (("NumPy", 5, "ratio_numpy"), ("PyTorch", 1, "ratio_torch")):
                v = row.get(key) if row else None
                if base == "PyTorch" and v is None:
                    continue
                out.append(_target(f"learning (Synthetic(1,1) softmax, d = 610), {where}: {mode} "
                                   f"{dtype} >= {limit}x {base} {dtype}", [row], v, limit,
                                   None if v is None else v >= limit, "x"))
    return out


def add_ratios(rows):
    """Ratio of virtual client-steps/s to the matching baselines (same workload and shape).

    Package mask matches numpy_all / jax_naive "all" / numba_all, gather matches
    numpy_sampled / jax_naive "sampled" / numba_sampled; numpy is float64 only; jax_naive and
    numba must have the same dtype (on the learning workload ``jax_softmax`` gives
    ``ratio_jax_naive``). Every package row (pinned or not) gets one ratio per
    Numba core count (``ratio_numba_1``, ``ratio_numba_2``). On the learning workload the
    NumPy and PyTorch baselines come in both dtypes and must match.
    """
    for r in rows:
        r["ratio_numpy"] = r["ratio_jax_naive"] = r["ratio_torch"] = None
        for c in NUMBA_CORES:
            r[f"ratio_numba_{c}"] = None
        if "error" in r or r["impl"] in ("numpy_all", "numpy_sampled", "numpy_softmax",
                                         "torch_softmax", "jax_softmax"):
            continue
        bmode = BASELINE_MODE.get(r["mode"], r["mode"])
        for b in rows:
            if "error" in b or not _same_shape(r, b):
                continue
            if b["impl"] == f"numpy_{bmode}" or (b["impl"] == "numpy_softmax" and
                                                 b["mode"] == bmode and b["dtype"] == r["dtype"]):
                r["ratio_numpy"] = r["virtual_rate"] / b["virtual_rate"]
            if b["impl"] == "torch_softmax" and b["mode"] == bmode and b["dtype"] == r["dtype"]:
                r["ratio_torch"] = r["virtual_rate"] / b["virtual_rate"]
            if r["impl"] != "fedjax_abc" or b["dtype"] != r["dtype"]:
                continue
            if b["impl"] in ("jax_naive", "jax_softmax") and b["mode"] == bmode:
                r["ratio_jax_naive"] = r["virtual_rate"] / b["virtual_rate"]
            if b["impl"] == f"numba_{bmode}" and b.get("cores") in NUMBA_CORES:
                r[f"ratio_numba_{b['cores']}"] = r["virtual_rate"] / b["virtual_rate"]


def _target(name, rows_used, value, limit, passed, unit=""):
    """A target's record; ``runs``: which run measured each row used (see ``merge.py``)."""
    return dict(name=name, value=value, limit=limit, unit=unit,
                status="not measured" if passed is None else ("PASS" if passed else "FAIL"),
                rows=[None if r is None else r["id"] for r in rows_used],
                runs=[None if r is None else r.get("run") for r in rows_used])


def evaluate_targets(rows):
    """The issue's targets, each PASS / FAIL / not measured, and each row's own status."""
    targets = []
    # the package as a user runs it by default: every core to XLA, one device, Threefry
    pkg = dict(impl="fedjax_abc", cores=None, cpu_devices=None, generator=None, **TABLE2)
    mask64 = _find(rows, mode="mask", dtype="float64", **pkg)
    gath64 = _find(rows, mode="gather", dtype="float64", **pkg)
    mask32 = _find(rows, mode="mask", dtype="float32", **pkg)
    base_shape = {k: v for k, v in TABLE2.items() if k != "T"}
    np_all = _find(rows, impl="numpy_all", **base_shape)
    np_smp = _find(rows, impl="numpy_sampled", **base_shape)

    for row, base, mode, bname, factor in ((mask64, np_all, "mask", "numpy_all", 8),
                                           (gath64, np_smp, "gather", "numpy_sampled", 5)):
        name = f"Table II: {mode} float64 >= {factor}x {bname}"
        v = row["virtual_rate"] / base["virtual_rate"] if row and base else None
        targets.append(_target(name, [row, base], v, factor,
                               None if v is None else v >= factor, "x"))
    for row, mode, dtype, floor in ((mask64, "mask", "float64", 4e8),
                                    (gath64, "gather", "float64", 1.5e9),
                                    (mask32, "mask", "float32", 1e9)):
        v = row["virtual_rate"] if row else None
        targets.append(_target(f"Table II: {mode} {dtype} >= {floor:.1e} virtual client-steps/s",
                               [row], v, floor, None if row is None else v >= floor, "steps/s"))
    # stateful algorithms in mask mode: at least half of FedAvg's rate on the same workload
    alg = dict(workload="algorithms", impl="fedjax_abc", mode="mask", dtype="float64")
    fedavg = _find(rows, algorithm="FedAvg", **alg)
    for name in ("Scaffold", "FedAdam"):
        row = _find(rows, algorithm=name, **alg)
        v = row["virtual_rate"] / fedavg["virtual_rate"] if row and fedavg else None
        targets.append(_target(f"Table II workload, mask: {name} >= 0.5x FedAvg", [row, fedavg],
                               v, 0.5, None if v is None else v >= 0.5, "x"))
    # measured with 100 trials (the scaling series) and, in the full run, with 1000 trials
    counts = sorted({r["trials"] for r in rows if r["workload"] == "clients" and r["n"] == 1000})
    for trials in counts or [100]:
        shape = dict(workload="clients", impl="fedjax_abc", dtype="float64", n=1000, S=10,
                     trials=trials)
        cm, cg = _find(rows, mode="mask", **shape), _find(rows, mode="gather", **shape)
        v = cg["virtual_rate"] / cm["virtual_rate"] if cm and cg else None
        targets.append(_target(f"n = 1000, S = 10, {trials} trials: gather >= 20x mask (float64)",
                               [cg, cm], v, 20, None if v is None else v >= 20, "x"))
    targets += numba_targets(rows)
    targets += sweep_targets(rows)
    targets += learning_targets(rows)
    compiled = [r for r in rows if r["impl"] == "fedjax_abc" and r.get("compile_s") is not None]
    worst = max(compiled, key=lambda r: r["compile_s"], default=None)
    targets.append(_target(f"compile time < {COMPILE_LIMIT_S:g} s for every package configuration",
                           [worst], worst and worst["compile_s"], COMPILE_LIMIT_S,
                           None if worst is None else worst["compile_s"] < COMPILE_LIMIT_S, "s"))
    mem = memory_check(rows)
    targets.append(_target("peak memory does not grow with T (T vs 4T, recording every k rounds)",
                           mem.get("rows_used", []), mem.get("growth_mb"), mem.get("allowed_mb"),
                           mem.get("passed"), "MB"))
    # each row: FAIL if any target naming it failed, PASS if all passed
    for r in rows:
        r["compile_ok"] = (None if r["impl"] != "fedjax_abc" or r.get("compile_s") is None
                           else r["compile_s"] < COMPILE_LIMIT_S)
        named = [t["status"] for t in targets if t["rows"][:1] == [r["id"]]]
        if r["compile_ok"] is not None:
            named.append("PASS" if r["compile_ok"] else "FAIL")
        r["status"] = "FAIL" if "FAIL" in named else ("PASS" if named else "")
    return targets, mem


SWEEP_SPEEDUP = 10.0
TWO_CORE_SPEEDUP = 1.7


def numba_targets(rows):
    """Table II, 1000 trials: the package's best row against the Numba SIMD kernels on one
    core and on two (gather vs sampled-only, mask vs all-clients), and gather mode's speedup
    from a second core. Each target takes the package's fastest configuration on that many
    cores (any generator; one core: pinned; two: one CPU device per core or XLA's own)."""
    out = []
    ncores = max([r["cpu_devices"] for r in rows if r.get("cpu_devices")] + [2])
    shape = dict(TABLE2)
    for dtype in ("float64", "float32"):
        for mode, bmode in (("gather", "sampled"), ("mask", "all")):
            for cores in NUMBA_CORES:
                base = _find(rows, impl=f"numba_{bmode}", dtype=dtype, cores=cores, **shape)
                mine = [r for r in rows if "error" not in r and r["impl"] == "fedjax_abc"
                        and r["mode"] == mode and r["dtype"] == dtype
                        and all(r.get(k) == v for k, v in shape.items())
                        and ((r.get("cores") == 1) if cores == 1 else
                             (r.get("cores") is None and r.get("cpu_devices") in (None, ncores)))]
                best = max(mine, key=lambda r: r["virtual_rate"], default=None)
                v = best["virtual_rate"] / base["virtual_rate"] if best and base else None
                out.append(_target(f"Table II: {mode} {dtype} on {cores} core(s) >= 1.0x "
                                   f"numba_{bmode} (fastest package configuration)", [best, base],
                                   v, 1.0, None if v is None else v >= 1.0, "x"))
    for dtype in ("float64", "float32"):
        one = _find(rows, impl="fedjax_abc", mode="gather", dtype=dtype, cores=1, generator=None,
                    cpu_devices=None, native_loops=None, **shape)
        two = _find(rows, impl="fedjax_abc", mode="gather", dtype=dtype, cores=None,
                    cpu_devices=ncores, generator=None, native_loops=None, **shape)
        v = two["virtual_rate"] / one["virtual_rate"] if one and two else None
        out.append(_target(f"Table II: gather {dtype} on {ncores} cores (one CPU device each) "
                           f">= {TWO_CORE_SPEEDUP:g}x on one core", [two, one], v,
                           TWO_CORE_SPEEDUP, None if v is None else v >= TWO_CORE_SPEEDUP, "x"))
    return out


def sweep_targets(rows):
    """fa.sweep of 16 stepsizes x 100 trials against 16 separate simulate calls and against
    one simulate call of 1600 trials (workload "sweep")."""
    rows = [r for r in rows if r["workload"] == "sweep"]
    sweep = next((r for r in rows if r.get("grid") and not r.get("separate")
                  and "error" not in r), None)
    sep = next((r for r in rows if r.get("separate") and "error" not in r), None)
    one = next((r for r in rows if not r.get("grid") and "error" not in r), None)
    out = []
    v = sep["first_s"] / sweep["first_s"] if sweep and sep else None
    out.append(_target(f"sweep 16 x 100 trials, compile + run: >= {SWEEP_SPEEDUP:g}x faster than "
                       "16 simulate calls in one process (one compile, 16 runs)", [sweep, sep], v,
                       SWEEP_SPEEDUP, None if v is None else v >= SWEEP_SPEEDUP, "x"))
    if sweep and sep:  # 16 processes: each pays one compile and one run
        one_call = sep["first_s"] - sep["run_s"] * (sep["grid"] - 1) / sep["grid"]
        v = sep["grid"] * one_call / sweep["first_s"]
    else:
        v = None
    out.append(_target(f"sweep 16 x 100 trials, compile + run: >= {SWEEP_SPEEDUP:g}x faster than "
                       "16 simulate calls each compiling (16 processes, estimated)", [sweep, sep],
                       v, SWEEP_SPEEDUP, None if v is None else v >= SWEEP_SPEEDUP, "x"))
    v = sep["run_s"] / sweep["run_s"] if sweep and sep else None
    out.append(_target("sweep 16 x 100 trials, run only (compiled): faster than 16 compiled "
                       "simulate calls", [sweep, sep], v, 1.0, None if v is None else v >= 1.0,
                       "x"))
    v = sweep["virtual_rate"] / one["virtual_rate"] if sweep and one else None
    out.append(_target("sweep 16 x 100 trials: client-step rate >= one simulate call of 1600 "
                       "trials", [sweep, one], v, 1.0, None if v is None else v >= 1.0, "x"))
    return out


def memory_check(rows) -> dict:
    """Peak memory of the package at T and 4T with the same trials x n (workload "memory")."""
    mem = [r for r in rows if r["workload"] == "memory" and "error" not in r]
    if not mem:
        return {}
    big = max(r["trials"] for r in mem)
    at = sorted((r for r in mem if r["trials"] == big), key=lambda r: r["T"])
    out = {"rows": [dict(trials=r["trials"], n=r["n"], T=r["T"], record_every=r["record_every"],
                         rss_setup_mb=r["rss_setup_mb"], peak_run_mb=r["peak_run_mb"],
                         peak_first_mb=r.get("peak_first_mb"),
                         working_mb=r["peak_run_mb"] - r["rss_setup_mb"]) for r in mem]}
    if len(at) < 2:
        return out
    lo, hi = at[0], at[-1]
    work = lo["peak_run_mb"] - lo["rss_setup_mb"]
    growth = hi["peak_run_mb"] - lo["peak_run_mb"]
    allowed = MEMORY_TOLERANCE * max(work, 0.0) + MEMORY_SLACK_MB
    # what T-proportional storage of the (trials, n) local models would have added
    per_T = lo["trials"] * lo["n"] * lo["d"] * 8 * (hi["T"] - lo["T"]) / 2**20
    out.update(T_low=lo["T"], T_high=hi["T"], growth_mb=growth, allowed_mb=allowed,
               tolerance_fraction=MEMORY_TOLERANCE, slack_mb=MEMORY_SLACK_MB,
               if_proportional_to_T_mb=per_T, passed=growth <= allowed, rows_used=[hi, lo])
    return out


def print_table(rows, targets, file=sys.stdout):
    print(report.markdown_table(rows, console=True), file=file)
    print(file=file)
    errors = report.errors_list(rows)
    if errors:
        print(errors + "\n", file=file)
    print(report.targets_table(targets), file=file)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (checks that it runs)")
    ap.add_argument("--json", metavar="FILE", help="write all measurements to FILE")
    ap.add_argument("--only", metavar="WORKLOAD", action="append", choices=WORKLOADS,
                    help=f"run only this workload (repeatable): {', '.join(WORKLOADS)}")
    ap.add_argument("--impl", metavar="NAME", action="append",
                    help="run only the implementations starting with NAME (repeatable), e.g. "
                         "--impl fedjax_abc --impl numba")
    ap.add_argument("--num-sampled", type=int, action="append", dest="S", metavar="S",
                    help="run only the cases with this many sampled clients (repeatable)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="at least this many timed calls per case (new key each; more until "
                         "they add up to 1.5 s); the fastest is reported")
    ap.add_argument("--passes", type=int, default=None,
                    help="run every case this many times, in alternating order (forward, "
                         "backward, ...), and keep each case's fastest pass, which damps the "
                         "drift of a shared machine (default 2; 1 with --quick)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    args = ap.parse_args(argv)
    passes = args.passes if args.passes is not None else (1 if args.quick else 2)
    if passes < 1:
        ap.error("--passes must be at least 1")

    chosen = cases(quick=args.quick, only=args.only)
    todo = [c for c in chosen
            if (not args.impl or c["impl"].startswith(tuple(args.impl)))
            and (not args.S or c["S"] in args.S)]
    for w in left_out(chosen, todo):
        print(f"warning: no {w} case left after --impl / --num-sampled", file=sys.stderr)
    rows, info = run_cases(todo, passes=passes,
                           timeout=args.timeout, repeat=args.repeat)
    targets, mem = summarise(rows, info, quick=args.quick)
    if args.json:
        write_json(args.json, dict(machine=info, quick=args.quick, only=args.only,
                                   repeat=args.repeat, passes=passes,
                                   baseline_rounds=BASELINE_ROUNDS, targets=targets, memory=mem,
                                   results=rows))
    return 1 if any("error" in r for r in rows) else 0


def left_out(chosen, todo) -> list:
    """The workloads of ``chosen`` (cases) of which ``todo`` keeps no case, in order."""
    kept = {c["workload"] for c in todo}
    return list(dict.fromkeys(c["workload"] for c in chosen if c["workload"] not in kept))


def in_pass_order(items, p: int) -> list:
    """``items`` in the order of pass ``p`` (from 0): forward in even passes, backward in odd
    ones, so that each item runs early and late as often, and a drift of the machine's speed
    during a run spreads over all of them."""
    items = list(items)
    return items if p % 2 == 0 else items[::-1]


def run_cases(todo, *, passes: int, timeout: float, repeat: int = 1, info=None):
    """Runs every case ``passes`` times (alternating order), keeping each one's fastest pass.

    Returns (rows, machine info), the rows in the order of ``todo`` (each case gets its
    ``id`` and ``repeat``), the info with the load averages and the total time.
    """
    for i, c in enumerate(todo):
        c["id"] = i
        c["repeat"] = repeat
    info = dict(machine_info(), **(info or {}))
    info["loadavg_start"] = os.getloadavg()
    t0 = time.perf_counter()
    best, pass_times = {}, {c["id"]: [] for c in todo}
    for p in range(passes):
        for c in in_pass_order(todo, p):
            row = run_case(c, timeout)
            pass_times[c["id"]].append(row.get("run_s"))
            old = best.get(c["id"])
            if old is None or ("error" in old and "error" not in row) or (
                    "error" not in row and "error" not in old and row["run_s"] < old["run_s"]):
                best[c["id"]] = row
            pinned = f" {c['cores']} core(s)" if c.get("cores") else ""
            what = (f"[pass {p + 1}/{passes}, {c['id'] + 1}/{len(todo)}] {c['workload']:<10} "
                    f"{c['impl']:<13} {c['mode']:<7} {c['dtype']:<7} R={c['trials']} n={c['n']} "
                    f"S={c['S']} T={c['T']}{pinned}")
            if "error" in row:
                print(f"{what}: ERROR {row['error']}", file=sys.stderr, flush=True)
            else:
                print(f"{what}: run {row['run_s']:.3f} s, {row['virtual_rate']:.3g} virtual "
                      "steps/s", file=sys.stderr, flush=True)
    rows = [dict(best[c["id"]], run_s_passes=pass_times[c["id"]], run=0) for c in todo]
    info["loadavg_end"] = os.getloadavg()
    info["git_end"] = git_state()
    if info["git_end"] != info["git"]:
        print(f"warning: the package changed during the run: {info['git']} -> {info['git_end']}",
              file=sys.stderr)
    info["total_s"] = time.perf_counter() - t0
    return rows, info


def evaluate(rows, *, quick: bool):
    """Adds the ratios to the rows and evaluates the targets; returns (targets, memory)."""
    add_ratios(rows)
    targets, mem = evaluate_targets(rows)
    mem.pop("rows_used", None)
    if quick:  # the targets are defined on the full sizes
        for t in targets:
            t["status"] += " (quick sizes)"
    return targets, mem


def summarise(rows, info, *, quick: bool):
    """:func:`evaluate`, and prints the tables; returns (targets, memory)."""
    targets, mem = evaluate(rows, quick=quick)
    print_table(rows, targets)
    if mem.get("passed") is not None:
        print(f"\nmemory: peak at T={mem['T_high']} minus at T={mem['T_low']}: "
              f"{mem['growth_mb']:+.1f} MB (allowed {mem['allowed_mb']:.1f} MB; storing the "
              f"local models per round would add {mem['if_proportional_to_T_mb']:.0f} MB)")
    print(f"\n{len(rows)} cases in {info['total_s']:.0f} s; load average "
          f"{info['loadavg_start']} -> {info['loadavg_end']}")
    return targets, mem


def write_json(path, doc) -> None:
    from fedjax_abc.repro.common import atomic_open  # imports jax: only when writing

    with atomic_open(path) as f:  # an interrupted write keeps the previous results
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
