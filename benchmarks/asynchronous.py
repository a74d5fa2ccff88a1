"""Asynchronous training: the package's compiled FedBuff against an event-driven reference.

Run from the repository root::

    python benchmarks/asynchronous.py                  # R = 1 and 256 trials
    python benchmarks/asynchronous.py --quick          # T = 50, R = 1 and 16
    python benchmarks/asynchronous.py --json benchmarks/results/asynchronous.json

Workload: FedBuff (K = 10 of C = 50 in flight, eta_g = 1, staleness 1 / sqrt(1 + tau)) on
heterogeneous diagonal quadratics (n = 200 clients, d = 20), Q = 5 exact local gradient
steps, durations Q s_i c + m with lognormal speeds s_i (sigma = 1), exponential step
times and a constant communication time, T = 500 server steps, float64.

Rows, timed one after the other in this process on the same cores:

- ``package``: ``fa.timing.simulate_async`` at R trials (after a first, compiling call
  with another key; its extra time is reported apart);
- ``reference``: the event-driven NumPy reference of ``tests/async_reference.py`` (a heap
  of arrivals, a trial at a time, NumPy's own generator for its draws), timed on a few
  trials and counted per trial (its time grows linearly with R).

Throughput is server steps x trials per second; the ratio is the package's over the
reference's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

N, D, Q, C, K, STEP_MEAN, COMM, SIGMA = 200, 20, 5, 50, 10, 1.0, 0.5, 1.0


def _setup():
    import jax
    import numpy as np

    import fedjax_abc as fa

    problem = fa.problems.quadratics(jax.random.key(0), n=N, d=D)
    speeds = np.exp(SIGMA * np.random.default_rng(1).standard_normal(N))
    clock = fa.timing.Clock(fa.timing.Exponential(STEP_MEAN), speed=speeds,
                            communication=fa.timing.Constant(COMM))
    return problem, clock, speeds


def package_row(problem, clock, T: int, R: int) -> dict:
    import jax
    import jax.numpy as jnp

    import fedjax_abc as fa

    def go(seed):
        t = time.perf_counter()
        out = fa.timing.simulate_async(problem, fa.timing.FedBuff(K), clock, concurrency=C,
                                       local_steps=Q, stepsize=0.05, steps=T, trials=R,
                                       key=jax.random.key(seed), x0=jnp.ones(D),
                                       oracle=fa.ExactOracle(), record_every=T)
        out.gap.sum()
        return time.perf_counter() - t

    first = go(1)
    run = min(go(2), go(3))
    return {"row": "package", "trials": R, "steps": T, "run_s": run,
            "compile_s": max(first - run, 0.0), "rate": T * R / run}


def reference_row(problem, speeds, T: int, trials: int) -> dict:
    import numpy as np

    from async_reference import NumpyDraws, run_trial

    a, c = (np.asarray(p) for p in problem.params)
    t = time.perf_counter()
    for r in range(trials):
        run_trial(a, c, rule="fedbuff", buffer=K, concurrency=C, local_steps=Q,
                  stepsize=0.05, steps=T, key=None, trial=r, x0=np.ones(D),
                  step_mean=STEP_MEAN, communication=COMM, speeds=speeds,
                  staleness=lambda tau: (1 + tau) ** -0.5, draws=NumpyDraws(r, N))
    run = time.perf_counter() - t
    return {"row": "reference", "trials": trials, "steps": T, "run_s": run,
            "rate": T * trials / run}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, nargs="+", default=[1, 256])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--reference-trials", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="T = 50, R = 1 and 16")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    import jax

    import fedjax_abc as fa

    jax.config.update("jax_enable_x64", True)
    fa.use_cpu_cores()
    T = 50 if args.quick else args.steps
    trials = [1, 16] if args.quick else args.trials
    problem, clock, speeds = _setup()
    ref = reference_row(problem, speeds, T, 1 if args.quick else args.reference_trials)
    rows = [ref]
    print(f"reference: {ref['rate']:.0f} server steps x trials / s "
          f"({ref['trials']} trials x {T} steps in {ref['run_s']:.2f} s)")
    for R in trials:
        row = package_row(problem, clock, T, R)
        row["ratio"] = row["rate"] / ref["rate"]
        rows.append(row)
        print(f"package R={R}: {row['rate']:.0f} server steps x trials / s "
              f"(run {row['run_s']:.3f} s, compile {row['compile_s']:.1f} s), "
              f"{row['ratio']:.1f}x the reference")
    if args.json:
        info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                "platform": platform.platform(), "cpu_count": os.cpu_count(),
                "load": os.getloadavg()[0], "workload": {
                    "n": N, "d": D, "Q": Q, "C": C, "K": K, "T": T}}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": info, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
