"""Decentralised SGD at scale: the Gossip schedule against NumPy with SciPy sparse matrices.

Run from the repository root::

    python benchmarks/gossip.py                      # n = 1k, 10k, 100k; ring and exponential
    python benchmarks/gossip.py --quick              # n = 256, a few rounds
    python benchmarks/gossip.py --json benchmarks/results/gossip.json

Workload: heterogeneous diagonal quadratics (``fa.problems.quadratics(key(0), n, d=10)``,
the Gaussian oracle), one local step of stepsize 0.05 a round then one gossip step
(adapt-then-combine D-SGD, Metropolis-Hastings weights), 64 trials, float64, T rounds.

Rows, timed one after the other in this process:

- ``package``: ``fa.simulate(problem, schedule=fa.decentral.Gossip(topology), trials=64,
  record_every=T)``: every node of every trial in one compiled program (its first call's
  extra time over the second is ``compile_s``, apart from ``run_s``);
- ``numpy``: the same rounds in NumPy, a trial at a time: the nodes' gradients vectorised,
  the oracle's Gaussian noise from NumPy's generator, the mixing step a ``scipy.sparse``
  CSR product ``W @ Y`` (built once; the exponential graph's tau matrices built once).

The figure is rounds x trials per second (``trial_rounds_per_s``) and the ratio package
over NumPy at each n, with the package's cost per edge and round: a round's cost linear in
the edges shows as a flat ``ns_per_edge`` across n. Both rows run on the same cores; the
package uses every core, NumPy's sparse product one (``cpu/wall`` says what each kept busy).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

D, Q, STEPSIZE, TRIALS = 10, 1, 0.05, 64


def setup(n: int):
    import jax

    import fedjax_abc as fa

    return fa.problems.quadratics(jax.random.key(0), n=n, d=D)


def run_package(problem, topology, rounds: int, trials: int = TRIALS):
    import jax
    import jax.numpy as jnp

    import fedjax_abc as fa

    return fa.simulate(problem, local_steps=Q, stepsize=STEPSIZE, rounds=rounds, trials=trials,
                       key=jax.random.key(1), x0=jnp.ones(D), record_every=rounds,
                       record_x=False, schedule=fa.decentral.Gossip(topology))


def sparse_matrices(topology, n: int):
    """The topology's mixing matrices as SciPy CSR (one, or one a round of its period)."""
    import numpy as np
    import scipy.sparse as sp

    period = topology.period(n) or 1

    def csr(t):
        nb = topology.neighbours(n, None, t)
        index, weight, self_weight = (np.asarray(a) for a in nb)
        rows = np.repeat(np.arange(n), index.shape[1])
        W = sp.csr_matrix((weight.ravel(), (rows, index.ravel())), shape=(n, n))
        return (W + sp.diags(self_weight)).tocsr()

    return [csr(t) for t in range(period)]


def run_numpy(problem, mats, rounds: int, trials: int = TRIALS, seed: int = 0):
    """D-SGD in NumPy with the CSR mixing matrices ``mats`` (:func:`sparse_matrices`), a
    trial at a time; returns the trials' average models (trials, d)."""
    import numpy as np

    a, c = (np.asarray(v) for v in problem.params)
    C, D_ = float(problem.oracle.C), float(problem.oracle.D)
    n, d = a.shape
    rng = np.random.default_rng(seed)
    out = np.empty((trials, d))
    for r in range(trials):
        X = np.ones((n, d))
        for t in range(rounds):
            diff = X - c
            f = 0.5 * np.sum(a * diff * diff, axis=1)
            g = a * diff + rng.standard_normal((n, d)) * np.sqrt((C * f + D_) / d)[:, None]
            X = mats[t % len(mats)] @ (X - STEPSIZE * g)
        out[r] = X.mean(0)
    return out


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def measure(n: int, name: str, rounds: int, numpy_trials: int) -> dict:
    import fedjax_abc as fa

    topology = {"ring": fa.decentral.Ring(), "exponential": fa.decentral.Exponential()}[name]
    problem = setup(n)
    _, first, _ = timed(lambda: run_package(problem, topology, rounds))
    _, wall, cpu = timed(lambda: run_package(problem, topology, rounds))
    mats = sparse_matrices(topology, n)  # built once, before the clock starts
    _, np_wall, np_cpu = timed(lambda: run_numpy(problem, mats, rounds, numpy_trials))
    edges = n * topology.max_degree(n)  # directed slots of the neighbour lists
    pkg_rate = TRIALS * rounds / wall
    np_rate = numpy_trials * rounds / np_wall
    return {"topology": name, "n": n, "d": D, "rounds": rounds, "trials": TRIALS,
            "edges": edges, "compile_s": round(first - wall, 3), "run_s": round(wall, 4),
            "cpu/wall": round(cpu / wall, 2), "numpy_trials": numpy_trials,
            "numpy_s": round(np_wall, 4), "numpy_cpu/wall": round(np_cpu / np_wall, 2),
            "trial_rounds_per_s": round(pkg_rate, 1), "numpy_trial_rounds_per_s": round(np_rate, 1),
            "ratio": round(pkg_rate / np_rate, 2),
            "ns_per_edge": round(1e9 * wall / (TRIALS * rounds * edges), 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 256, 4 rounds")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import fedjax_abc as fa

    fa.use_cpu_cores()
    sizes = [(256, 4, 4)] if args.quick else [(1024, 20, 16), (10_000, 20, 4), (100_000, 10, 1)]
    rows = []
    for n, rounds, numpy_trials in sizes:
        for name in ("ring", "exponential"):
            row = measure(n, name, rounds, numpy_trials)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "cores": os.cpu_count(),
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
