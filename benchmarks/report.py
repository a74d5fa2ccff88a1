"""Renders the JSON written by ``benchmarks/run.py --json`` as Markdown.

Usage::

    python benchmarks/report.py benchmarks/results/latest.json -o docs/performance.md
    python benchmarks/report.py benchmarks/results/latest.json \
        --compare benchmarks/results/compare.json -o docs/performance.md

Every number in the output comes from the JSON files (``--compare``: a
``benchmarks/compare.py`` comparison, appended as a section).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORKLOAD_TITLES = {
    "table2": "Table II workload: problem (27), n = 40 Huber clients, Q = 10",
    "fig1": "Fig. 1 workload: problem (25) with oracle (26), n = 16, Q = 5, S = 4",
    "quadratics": "d-dimensional workload: `problems.quadratics`, d = 100",
    "trials": "Scaling in the number of trials: problem (27), n = 40, S = 4, Q = 10",
    "clients": "Scaling in the number of clients: problem (27), S = 10, Q = 10, 100 trials "
               "(T = 1000, 100 at n = 10^4), and n = 1000 with 1000 trials (T = 200)",
    "memory": "Memory check: problem (27), mask mode, float64",
    "learning": "Learning workload: softmax regression on Synthetic(1, 1), n = 30, d = 610, "
                "mini-batch b = 10, Q = 10, S = 10, 100 trials",
    "steps": "Local steps: problem (27), n = 40, S = 4, 1000 trials, T = 2000, float64, "
             "Q = 1, 10, 20",
}

COLUMNS = ("workload", "implementation", "mode", "dtype", "trials", "n", "S", "Q", "T",
           "compile s", "run s", "cores", "virtual client-steps/s", "sampled client-steps/s",
           "peak MB",
           "x numpy", "x jax_naive", "x torch", "x numba 1 core", "x numba 2 cores", "target",
           "run")


def _f(v, fmt):
    return "—" if v is None else format(v, fmt)


def _row_cells(r):
    impl = r["impl"] + (f" {r['algorithm']}" if r.get("algorithm") else "")
    if r.get("grid"):
        impl += f" {'separate' if r.get('separate') else 'sweep'} x{r['grid']}"
    if r.get("generator"):
        impl += f" {r['generator']}"
    if r.get("sampler"):
        impl += f" {r['sampler']}"
    if r.get("cores"):
        impl += f" on {r['cores']} core{'s' if r['cores'] > 1 else ''}"
    if r.get("cpu_devices"):
        impl += f" on {r['cpu_devices']} CPU devices"
    if r.get("native_loops"):
        impl += ", native loops"
    elif r.get("native_loops") is False:
        impl += ", loops as calls"
    base = [r["workload"], impl, r["mode"], r["dtype"], str(r["trials"]), str(r["n"]),
            str(r["S"]), str(r["Q"]), str(r["T"])]
    if "error" in r:
        return base + ["error (below)"] + [""] * (len(COLUMNS) - len(base) - 2) + [_run(r)]
    return base + [
        _f(r.get("compile_s"), ".2f"),
        _f(r.get("run_s"), ".3f"),
        _f(r.get("cores_used"), ".1f"),
        _f(r.get("virtual_rate"), ".3g"),
        _f(r.get("sampled_rate"), ".3g"),
        _f(r.get("peak_run_mb"), ".0f"),
        _f(r.get("ratio_numpy"), ".2f"),
        _f(r.get("ratio_jax_naive"), ".2f"),
        _f(r.get("ratio_torch"), ".2f"),
        _f(r.get("ratio_numba_1"), ".2f"),
        _f(r.get("ratio_numba_2"), ".2f"),
        r.get("status", ""),
        _run(r),
    ]


def _run(r):
    return "—" if r.get("run") is None else str(r["run"])


def markdown_table(rows, console: bool = False, columns=COLUMNS) -> str:
    """One table row per case."""
    cells = [list(columns)] + [_row_cells(r) for r in rows]
    if console:
        widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
        lines = [" | ".join(c[i].ljust(widths[i]) for i in range(len(columns))) for c in cells]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        return "\n".join(lines)
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(c) + " |" for c in cells[1:]]
    return "\n".join(lines)


def errors_list(rows) -> str:
    """One line per failed case, or an empty string."""
    return "\n".join(f"- error in case {r['id']} ({r['workload']}, {r['impl']}, {r['mode']}, "
                     f"{r['dtype']}): {r['error']}" for r in rows if "error" in r)


def _value(t):
    v, unit = t["value"], t["unit"]
    if v is None:
        return "—"
    if unit == "steps/s":
        return f"{v:.3g} steps/s"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "MB":
        return f"{v:+.1f} MB"
    return f"{v:.2f} {unit}"


def _limit(t):
    v, unit = t["limit"], t["unit"]
    if v is None:
        return "—"
    if unit == "steps/s":
        return f">= {v:.3g}"
    if unit == "x":
        return f">= {v:g}x"
    if unit == "MB":
        return f"<= {v:.1f} MB"
    return f"< {v:g} {unit}"


def _runs(t):
    """The runs of a target's rows: one number, or several (a ratio across runs)."""
    runs = sorted({r for r in t.get("runs", ()) if r is not None})
    return ", ".join(map(str, runs)) if runs else "—"


def targets_table(targets) -> str:
    lines = ["| target | measured | required | status | run(s) |", "|---|---|---|---|---|"]
    for t in targets:
        lines.append(f"| {t['name']} | {_value(t)} | {_limit(t)} | {t['status']} | {_runs(t)} |")
    return "\n".join(lines)


def memory_section(mem) -> str:
    if not mem or "rows" not in mem:
        return "The memory workload was not run."
    lines = ["| trials | n | T | record every | RSS after set-up MB | peak during run MB | "
             "run peak minus set-up MB | peak during first call (compiling) MB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in mem["rows"]:
        lines.append(f"| {r['trials']} | {r['n']} | {r['T']} | {r['record_every']} | "
                     f"{r['rss_setup_mb']:.0f} | {r['peak_run_mb']:.0f} | {r['working_mb']:.0f} | "
                     f"{_f(r.get('peak_first_mb'), '.0f')} |")
    if mem.get("passed") is not None:
        lines.append("")
        lines.append(
            f"From T = {mem['T_low']} to T = {mem['T_high']} the peak changed by "
            f"{mem['growth_mb']:+.1f} MB (allowed: {mem['allowed_mb']:.1f} MB, "
            f"{100 * mem['tolerance_fraction']:.0f}% of the working set at T = {mem['T_low']} plus "
            f"{mem['slack_mb']:.0f} MB). Keeping the (trials, n) local models of every round "
            f"would have added {mem['if_proportional_to_T_mb']:.0f} MB: "
            f"**{'PASS' if mem['passed'] else 'FAIL'}**.")
    return "\n".join(lines)


def machine_section(m) -> str:
    cores = m.get("cores_per_socket")
    sockets = m.get("sockets")
    lines = [
        f"- CPU: {m.get('cpu_model')} ({m.get('cpu_count')} logical CPUs, {cores} core(s) per "
        f"socket x {sockets} socket(s), {m.get('threads_per_core')} thread(s) per core; "
        f"{m.get('cpus_usable')} usable by this process"
        + (f"; widest SIMD: {m['simd']})" if m.get("simd") else ")"),
        f"- memory: {m.get('mem_total_gb')} GB; platform: {m.get('platform')}",
    ] + ([f"- JAX device(s): {m['device']}"] if m.get("device") else []) + [
        f"- Python {m.get('python')}, jax {m.get('jax')}, jaxlib {m.get('jaxlib')}, "
        f"numpy {m.get('numpy')}, equinox {m.get('equinox')}, fedjax_abc {m.get('fedjax_abc')}"
        + (f", numba {m['numba']}" if m.get("numba") else ""),
        f"- fedjax_abc at commit {_git(m.get('git'))}"
        + ("" if m.get("git_end") == m.get("git") else
           f" at the start, {_git(m.get('git_end'))} at the end (changed during the run)"),
        f"- run 0: on {m.get('date')}, {m.get('total_s', 0):.0f} s in all; load average (1, 5, 15 "
        f"min) {_load(m.get('loadavg_start'))} at the start, {_load(m.get('loadavg_end'))} at "
        f"the end",
    ] + [f"- run {r.get('run', i + 1)}: a rerun at commit {_git(r.get('git'))} on "
         f"{r.get('date')} ({r.get('cases')} cases, {r.get('total_s', 0):.0f} s), whose rows "
         f"replace those of the same cases above: {r.get('why')}"
         for i, r in enumerate(m.get("reruns", ()))]
    return "\n".join(lines)


def _git(g):
    if not g:
        return "unknown"
    return g["commit"] + (" with local changes to fedjax_abc/" if g["package_modified"] else "")


def _load(v):
    return "—" if v is None else "(" + ", ".join(f"{x:.2f}" for x in v) + ")"


HEADER = """# Performance

Throughput of `fedjax_abc.simulate` against independent baselines, measured by
`benchmarks/run.py` and rendered from its JSON output by `benchmarks/report.py` (no
number below is typed by hand).

## How to rerun

```bash
# all workloads, two passes: about 35 minutes on 2 quiet cores
python benchmarks/run.py --json benchmarks/results/latest.json
python benchmarks/report.py benchmarks/results/latest.json -o docs/performance.md
python benchmarks/run.py --quick                    # tiny sizes, under a minute
python benchmarks/run.py --only table2 --repeat 3   # one workload, at least 3 timed calls
python benchmarks/run.py --only table2 --num-sampled 4 --impl fedjax_abc --impl numba
# a partial run replaces the rows of its cases in the full file, as run k (below)
python benchmarks/run.py --only fig1 --json partial.json
python benchmarks/merge.py partial.json --why "the Fig. 1 rows after ..."
python benchmarks/gpu.py --require-gpu    # on an accelerator: docs/performance_gpu.md
# the package at an earlier commit and now, case by case, side by side (last section)
python benchmarks/compare.py cd43869 --json benchmarks/results/compare.json
python benchmarks/report.py benchmarks/results/latest.json \\
    --compare benchmarks/results/compare.json -o docs/performance.md
```

Run on a quiet machine: absolute timings on a shared CPU drift by up to 2x; only ratios of
cases measured in the same run are comparable.

## What is measured

- Every case runs in its own subprocess, once per pass (two passes by default, the second in
  reverse order; the faster pass is kept, so a slow spell of a shared machine must hit both
  to show). The first call (key 1) compiles and runs; the
  second (key 2, a new key, which compiles nothing) is the **run s**. **compile s** is the
  first call's time minus the second's. Timed calls are repeated with new keys until they
  add up to 1.5 s (at most 100 calls) and the fastest is reported. **cores**: CPU seconds
  of all threads divided by the wall seconds of that call; XLA spreads a run over the cores,
  NumPy's small element-wise operations use one, so on a loaded machine the package loses
  more than the NumPy baselines.
- **virtual client-steps/s** = trials x n x Q x T / run s, counting all n clients as the
  mask formulation does, whatever a mode computes; **sampled client-steps/s** = trials x S
  x Q x T / run s. For the d-dimensional workload one client-step updates all d = 100
  coordinates. The package runs each device's trials in a multiple of 8 (16 for float32
  in mask mode), so that a trial's numbers do not depend on its batch; the padding trials
  are computed but not counted (100 trials: 4% more work on one device, 12% on two; 28%
  for float32 in mask mode on two).
- **peak MB**: the subprocess's peak resident memory (VmHWM, reset before the timed call)
  during the timed run: imports and compiled code (about 300 MB) included.
- Baselines (`benchmarks/baselines/`, no import of `fedjax_abc`):
  `numpy_all` (NumPy, float64, vectorised over trials and clients, Python loops over rounds
  and local steps, all n virtual trajectories each round), `numpy_sampled` (the same, only
  the S sampled clients, chosen per trial by `argpartition` of uniforms), `jax_naive`
  (straightforward JAX: one key per local step, sampling by `jax.random.permutation`,
  `vmap` over clients and trials, `scan` over steps and rounds, one `jit`; mode `all` or
  `sampled`). They run the same problems from the same arrays and agree in distribution
  with the package (`tests/test_benchmarks.py`).
- `numba_sampled` / `numba_all` (Table II workload, when Numba is installed): problem (27)
  compiled with Numba, the fastest CPU code we could write for it: trials in blocks of 128
  spread over threads (`prange`), the trial loop innermost so that LLVM vectorises the
  local step, no `fastmath`, float64 and float32; random words are a counter-based
  SplitMix64 hash of (seed, trial, round, slot), clients sampled by Floyd's algorithm;
  `numba_sampled` runs the S sampled clients, `numba_all` all n with a 0/1 mask
  (`benchmarks/baselines/numba_impl.py`; in distribution against the package:
  `tests/test_baseline_numba.py`). They run the package's T, on 1 and on 2 cores (the
  process pinned to them, as many threads); **compile s** is Numba's JIT compilation, out
  of the run time as XLA's is. Rows "on 1 core" are the package with its process pinned to
  one core before JAX starts (XLA's thread pool then has one thread). Rows "on N CPU
  devices" call `fa.use_cpu_cores(N)` first: N devices that share the trials, whose small
  loops compile as one native function (`fedjax_abc/_engine/_xla_loops.py`), its default
  on more than one device since run 13 (earlier runs' rows ran them as calls); "loops as
  calls" is `fa.use_cpu_cores(N, native_loops=False)`; "native loops" names
  `native_loops=True`, and "on 1 core on 1 CPU devices" is that setting pinned to one
  core.
- Baselines run fewer rounds than the package (T column; {baseline_rounds}); throughput is
  compared per client-step, so T only sets the length of a measurement.
- **x numpy** / **x jax_naive**: the package's virtual client-steps/s divided by the
  matching baseline's in the same workload and shape (mask vs `numpy_all` / `jax_naive`
  all, gather vs `numpy_sampled` / `jax_naive` sampled; `jax_naive` of the same dtype,
  NumPy always float64). For `jax_naive` rows, x numpy compares it with NumPy. On the
  learning workload the baselines are `numpy_softmax`, `jax_softmax` (straightforward JAX:
  `jax.grad`, `vmap`, `scan`, one `jit`; its ratio in the **x jax_naive** column) and
  `torch_softmax` (PyTorch, when installed) in both dtypes, matched by mode and dtype;
  **x torch** is the package over PyTorch. **x numba 1 core** / **x numba 2 cores**: the package's rate over the matching
  Numba baseline's (mask vs `numba_all`, gather vs `numba_sampled`, same dtype) on 1 and on
  2 cores, for every package row, pinned or not.
- **target**: PASS / FAIL of the targets naming the row (compile time < 5 s for every
  package row).
- **run**: the run that measured the row: 0 the full run, k the k-th rerun listed under
  Machine (`benchmarks/merge.py`). The targets' **run(s)** column lists the runs of the
  rows each one compares; a target over rows of several runs also compares the machine's
  state at different times.
"""


def contention_note(doc) -> str:
    """A sentence on how many cores the package's longer runs got, from the ``cores`` column."""
    usable = doc["machine"].get("cpus_usable") or doc["machine"].get("cpu_count") or 1
    runs = [r for r in doc["results"] if r["impl"] == "fedjax_abc" and "error" not in r
            and not r.get("cores") and r.get("run_s", 0) >= 0.3
            and r.get("cores_used") is not None]
    if usable < 2 or not runs:
        return ""
    starved = [r for r in runs if r["cores_used"] < 0.75 * usable]
    text = (f"Of the {len(runs)} package runs (not pinned) lasting 0.3 s or more, {len(starved)} "
            f"got fewer "
            f"than {0.75 * usable:g} of the {usable} cores (cores column)")
    if starved:
        text += (": the CPU was shared with other work during this run, which slows the package "
                 "(multi-threaded) more than the NumPy baselines (one thread), so its ratios "
                 "against NumPy are understated.")
    else:
        text += "."
    return text


def render(doc) -> str:
    rows = doc["results"]
    br = doc.get("baseline_rounds", {})
    out = [HEADER.replace("{baseline_rounds}", ", ".join(f"{k}: T = {v}" for k, v in br.items())
                          if not doc.get("quick") else "quick run: the same T")]
    out.append("## Machine\n")
    out.append(machine_section(doc["machine"]))
    note = contention_note(doc)
    if note:
        out.append("\n" + note)
    if doc.get("quick"):
        out.append("\nThis is a `--quick` run: tiny sizes, targets not measured.")
    out.append("\n## Targets\n")
    out.append(targets_table(doc["targets"]))
    for w in WORKLOAD_TITLES:
        sel = [r for r in rows if r["workload"] == w]
        if not sel:
            continue
        out.append(f"\n## {WORKLOAD_TITLES[w]}\n")
        if w == "memory":
            out.append(memory_section(doc.get("memory", {})))
            out.append("")
        out.append(markdown_table(sel))
        if errors_list(sel):
            out.append("\n" + errors_list(sel))
    return "\n".join(out) + "\n"


def compare_section(doc) -> str:
    """The Markdown of a ``benchmarks/compare.py`` comparison (its JSON)."""
    base, m, t = doc["base"], doc["machine"], doc["target"]
    lines = [
        f"## Against commit {base['commit']}, side by side\n",
        f"The package at commit {base['commit']} (`{base['rev']}`) and at {_git(m.get('git'))}, "
        f"each case run in both checkouts one right after the other, in {doc['passes']} "
        f"pass(es) of alternating order, each side's fastest pass kept "
        f"(`benchmarks/compare.py`; on {m.get('date')}, {m.get('cpu_model')}, "
        f"{m.get('cpus_usable')} usable cores). Default configuration of each commit: what "
        f"`fa.simulate(...)` gets in a fresh process set up as its README's first block says "
        f"(one device with XLA's threads before engine v2, one CPU device per core since), "
        f"generator Threefry. **ratio** = "
        f"earlier run s / current run s (above 1: the current code is faster)."
        + (" A `--quick` comparison: tiny sizes." if doc.get("quick") else "") + "\n",
        "| workload | mode | dtype | trials | n | S | Q | T | earlier run s | current run s "
        "| ratio | earlier passes | current passes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def passes(v):
        return " / ".join("error" if x is None else f"{x:.4f}" for x in v)

    for r in doc["results"]:
        lines.append(
            f"| {r['workload']} | {r['mode']} | {r['dtype']} | {r['trials']} | {r['n']} | "
            f"{r['S']} | {r['Q']} | {r['T']} | {_f(r['earlier_run_s'], '.4f')} | "
            f"{_f(r['current_run_s'], '.4f')} | {_f(r['ratio'], '.2f')} | "
            f"{passes(r['earlier_passes'])} | {passes(r['current_passes'])} |")
    errors = [f"- {r['workload']} {r['mode']} {r['dtype']} R={r['trials']} n={r['n']} "
              f"S={r['S']} T={r['T']}, {side}: "
              f"{r[side + '_error']}" for r in doc["results"]
              for side in ("earlier", "current") if r.get(side + "_error")]
    lines += [""] + (errors + [""] if errors else [])
    lines.append(f"Target, {t['name']}: lowest ratio {_value(t)}, {t['below']} case(s) below "
                 f"{t['limit']:g}x: **{t['status']}**.")
    return "\n".join(lines)


KEPT = "<!-- hand-written notes: benchmarks/report.py keeps everything below this line -->"


def kept_notes(path) -> str:
    """The hand-written tail of an existing report (from the KEPT line on), or ""."""
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        return ""
    i = old.find(KEPT)
    return "" if i < 0 else "\n" + old[i:]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Render benchmarks/run.py --json output as Markdown")
    ap.add_argument("json_file")
    ap.add_argument("-o", "--out", help="write here instead of stdout")
    ap.add_argument("--compare", metavar="FILE",
                    help="append this benchmarks/compare.py --json comparison")
    args = ap.parse_args(argv)
    with open(args.json_file) as f:
        doc = json.load(f)
    text = render(doc)
    if args.compare:
        with open(args.compare) as f:
            text = text.rstrip("\n") + "\n\n" + compare_section(json.load(f)) + "\n"
    if args.out:
        from fedjax_abc.repro.common import atomic_open  # imports jax: only when writing

        text = text.rstrip("\n") + "\n" + kept_notes(args.out)

        with atomic_open(args.out) as f:  # a failed write keeps the previous report
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
