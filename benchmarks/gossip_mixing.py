"""One gossip step W X: the package's padded neighbour lists against SciPy's CSR products.

Run from the repository root::

    python benchmarks/gossip_mixing.py                 # n = 1k, 10k, 100k; d = 10; R = 64
    python benchmarks/gossip_mixing.py --quick         # n = 1k, R = 8, one pass
    python benchmarks/gossip_mixing.py --json benchmarks/results/gossip_mixing.json

Workload: one round of gossip X <- W X, float64, d = 10 coordinates a node, R = 64 trials, on

- ``ring``: node i with i - 1 and i + 1, Metropolis-Hastings weights (1/3 each, 3 nonzeros a
  row of W);
- ``exponential``: the one-peer exponential graph in round t = 1 (node i averages with node
  i + 2, weights 1/2; 2 nonzeros a row).

Rows, timed one after the other in this process on the same cores (the best of
``--repeats`` passes each):

- ``package``: ``jax.jit(jax.vmap(fa.decentral.mix, in_axes=(None, 0)))`` on X (R, n, d),
  the round's lists shared by the trials (after a first, compiling call, reported apart);
- ``package, trials innermost``: ``jax.jit(fa.decentral.mix)`` on X (n, d, R);
- ``scipy``: W as a CSR matrix built from the graph's definition (not from the package's
  lists), ``W @ X[r]`` in a Python loop over the trials (SciPy's sparse products use one
  core).

Reported: the ratio (SciPy's time over the package's), the cost per entry, time / (R d
nnz(W)) in nanoseconds (one multiply-add of a weight and a coordinate), and the largest
difference between the results (0 on the exponential graph, whose weights 1/2 make every
product exact; rounding on the ring). The machine's load average goes into the JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

TOPOLOGIES = ("ring", "exponential")
SIZES = (1_000, 10_000, 100_000)
D, TRIALS, ROUND = 10, 64, 1  # the exponential graph's round: node i with i + 2


def scipy_matrix(topology: str, n: int):
    """The round's W as a SciPy CSR matrix, from the graph's definition."""
    import numpy as np
    import scipy.sparse as sp

    i = np.arange(n)
    if topology == "ring":
        rows, cols, vals = np.repeat(i, 3), np.stack([(i - 1) % n, i, (i + 1) % n], 1).ravel(), \
            np.full(3 * n, 1.0 / 3.0)
    else:
        rows, cols, vals = np.repeat(i, 2), np.stack([i, (i + 2 ** ROUND) % n], 1).ravel(), \
            np.full(2 * n, 0.5)
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def package_neighbours(topology: str, n: int):
    import fedjax_abc as fa

    if topology == "ring":
        return fa.decentral.Ring().neighbours(n, fa.decentral.MetropolisHastings())
    return fa.decentral.Exponential().neighbours(n, fa.decentral.MetropolisHastings(), t=ROUND)


def _best(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(topology: str, n: int, d: int = D, trials: int = TRIALS, repeats: int = 3,
            seed: int = 0) -> dict:
    """One row: the package's step (vmapped over trials, and trials innermost) and SciPy's
    loop over trials, on the same X; times in seconds (the best of ``repeats``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import fedjax_abc as fa

    X = np.random.default_rng(seed).standard_normal((trials, n, d))
    nb = package_neighbours(topology, n)
    A = scipy_matrix(topology, n)

    step = jax.jit(jax.vmap(fa.decentral.mix, in_axes=(None, 0)))
    Xj = jnp.asarray(X)
    start = time.perf_counter()
    got = np.asarray(step(nb, Xj).block_until_ready())
    first = time.perf_counter() - start
    jax_s = _best(lambda: step(nb, Xj).block_until_ready(), repeats)

    inner = jax.jit(fa.decentral.mix)
    Xi = jnp.asarray(np.ascontiguousarray(X.transpose(1, 2, 0)))
    got_inner = np.asarray(inner(nb, Xi).block_until_ready()).transpose(2, 0, 1)
    inner_s = _best(lambda: inner(nb, Xi).block_until_ready(), repeats)
    del Xi

    out = np.empty_like(X)

    def scipy_loop():
        for r in range(trials):
            out[r] = A @ X[r]

    scipy_s = _best(scipy_loop, repeats)
    diff = float(max(np.max(np.abs(got - out)), np.max(np.abs(got_inner - out))))
    entries = trials * d * A.nnz
    return {"topology": topology, "n": n, "d": d, "trials": trials, "nnz": int(A.nnz),
            "entries": entries, "jax_s": jax_s, "jax_compile_s": max(first - jax_s, 0.0),
            "jax_innermost_s": inner_s, "scipy_s": scipy_s, "ratio": scipy_s / jax_s,
            "ratio_innermost": scipy_s / inner_s, "jax_ns_per_entry": 1e9 * jax_s / entries,
            "jax_innermost_ns_per_entry": 1e9 * inner_s / entries,
            "scipy_ns_per_entry": 1e9 * scipy_s / entries, "max_abs_diff": diff}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--trials", type=int, default=TRIALS)
    ap.add_argument("--d", type=int, default=D)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="n = 1k, R = 8, one pass")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    sizes = [1_000] if args.quick else args.sizes
    trials = 8 if args.quick else args.trials
    repeats = 1 if args.quick else args.repeats
    load = os.getloadavg()[0]
    print(f"one gossip step, d = {args.d}, R = {trials} trials, float64, "
          f"{os.cpu_count()} cores, load average {load:.2f}")
    rows = []
    for topology in TOPOLOGIES:
        for n in sizes:
            row = measure(topology, n, args.d, trials, repeats)
            rows.append(row)
            print(f"{topology:12s} n={n:>7d}: package {row['jax_s'] * 1e3:8.2f} ms "
                  f"({row['jax_ns_per_entry']:.2f} ns/entry), trials innermost "
                  f"{row['jax_innermost_s'] * 1e3:8.2f} ms, scipy "
                  f"{row['scipy_s'] * 1e3:8.2f} ms ({row['scipy_ns_per_entry']:.2f} ns/entry); "
                  f"scipy / package {row['ratio']:.2f}x (innermost {row['ratio_innermost']:.2f}x)"
                  f", max |diff| {row['max_abs_diff']:.1e}")
    if args.json:
        info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                "platform": platform.platform(), "cpu_count": os.cpu_count(),
                "load": load, "load_after": os.getloadavg()[0]}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": info, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
