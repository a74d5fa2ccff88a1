"""The benchmark on an accelerator: JAX's default device, in under 8 minutes.

Run from the repository root::

    python benchmarks/gpu.py --require-gpu        # refuses (exit 2) if JAX sees no GPU
    python benchmarks/gpu.py --quick              # four tiny cases, under a minute on a CPU

Writes the same JSON and Markdown as ``benchmarks/run.py`` and ``benchmarks/report.py``
(by default ``benchmarks/results/gpu.json`` and ``docs/performance_gpu.md``), with one pass
of these cases (``run.run_cases``, each in its own subprocess):

- Table II workload (problem (27), n = 40, S = 4, Q = 10, T = 2000): the package in mask
  and gather mode, float32 and float64, at 1000, 10 000 and 100 000 trials (T = 500 at
  100 000); the CPU baselines once for reference at 1000 trials, float64 (NumPy, and Numba
  on 1 and 2 cores when installed), with fewer rounds.
- the sweep workload: 16 stepsizes x 100 trials as one ``fa.sweep``, as 16 ``simulate``
  calls, and as one call of 1600 trials.
- the learning workload (softmax regression on Synthetic(1, 1)): the package in both modes
  and dtypes, the NumPy baseline for reference (PyTorch is skipped: it runs on the CPU).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import report, run  # noqa: E402
from benchmarks.workloads import _case, learning_cases, numba_cases, sweep_cases  # noqa: E402

TRIALS = (1000, 10_000, 100_000)
ROUNDS = {1000: 2000, 10_000: 2000, 100_000: 500}
BASELINE_ROUNDS = {"table2": 20, "learning": 5}
GPU_PLATFORMS = ("gpu", "cuda", "rocm")


def device_info() -> dict:
    """JAX's devices, asked in a subprocess (this process must not take the GPU's memory)."""
    code = ("import jax; d = jax.devices(); "
            "print(d[0].platform, len(d), d[0].device_kind, sep='\\t')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError("could not list JAX's devices: " + out.stderr.strip()[-500:])
    platform, count, kind = out.stdout.strip().splitlines()[-1].split("\t")
    return {"platform": platform, "count": int(count), "kind": kind,
            "text": f"{count} x {kind} ({platform})"}


def gpu_cases(quick: bool):
    """The cases of one accelerator run; with ``quick``, four tiny ones (Table II in mask
    float64 and gather float32 with NumPy for reference, and the sweep)."""
    shape = dict(problem="huber27", n=40, S=4, Q=10)
    if quick:
        return [_case("table2", "fedjax_abc", "mask", "float64", T=20, trials=64, **shape),
                _case("table2", "fedjax_abc", "gather", "float32", T=20, trials=64, **shape),
                _case("table2", "numpy_all", "all", "float64", T=20, trials=64, **shape),
                sweep_cases(True)[0]]
    out = []
    for trials in TRIALS:
        for dtype in ("float32", "float64"):
            for mode in ("mask", "gather"):
                out.append(_case("table2", "fedjax_abc", mode, dtype, T=ROUNDS[trials],
                                 trials=trials, **shape))
    bT = BASELINE_ROUNDS["table2"]
    for bmode in ("all", "sampled"):
        out.append(_case("table2", f"numpy_{bmode}", bmode, "float64", T=bT, trials=1000,
                         **shape))
    out += numba_cases("table2", T=10 * bT, trials=1000, dtypes=("float64",), **shape)
    out += sweep_cases(False)
    for c in learning_cases(False):
        if c["impl"] == "numpy_softmax":
            c["T"] = BASELINE_ROUNDS["learning"]
        if c["impl"] != "torch_softmax":
            out.append(c)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (checks that it runs)")
    ap.add_argument("--require-gpu", action="store_true",
                    help="exit with status 2 unless JAX's default device is a GPU")
    ap.add_argument("--json", metavar="FILE", default=os.path.join(run.REPO, "benchmarks",
                                                                   "results", "gpu.json"))
    ap.add_argument("--markdown", metavar="FILE",
                    default=os.path.join(run.REPO, "docs", "performance_gpu.md"))
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per case")
    args = ap.parse_args(argv)

    dev = device_info()
    print(f"device: {dev['text']}", flush=True)
    if args.require_gpu and dev["platform"] not in GPU_PLATFORMS:
        print(f"--require-gpu: no GPU, JAX's default device is {dev['text']}", file=sys.stderr)
        return 2
    rows, info = run.run_cases(gpu_cases(args.quick), passes=1, timeout=args.timeout,
                               info={"device": dev["text"]})
    targets, mem = run.summarise(rows, info, quick=args.quick)
    doc = dict(machine=info, quick=args.quick, only=None, repeat=1, passes=1,
               baseline_rounds=BASELINE_ROUNDS, targets=targets, memory=mem, results=rows)
    run.write_json(args.json, doc)
    from fedjax_abc.repro.common import atomic_open

    with atomic_open(args.markdown) as f:
        f.write(report.render(doc))
    print(f"wrote {args.json} and {args.markdown} ({dev['text']})")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
