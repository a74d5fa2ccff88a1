"""The learning workload against its arithmetic: the package, plain JAX and the real frameworks.

Run from the repository root::

    python benchmarks/learning.py                      # both models, R = 1, 16, 64, 256
    python benchmarks/learning.py --quick              # T = 20, R = 1 and 16
    python benchmarks/learning.py --model mlp --trials 16 --dtype float32
    python benchmarks/learning.py --model mlp --trials 1 16 --json learning_peers.json

Workload (issue 64; ``docs/performance.md``, "Learning workload against its
arithmetic"): Synthetic(1, 1) data (``fa.data.synthetic_data(key(0), 1, 1, 100,
max_samples=221)``: 100 clients of 45-198 rows, 60 features, 10 classes), l2 = 1e-3,
FedAvg with S = 10 clients uniformly without replacement, Q = 5 SGD steps on b = 32
distinct rows, stepsize 0.05, plain mean, T = 100 rounds, float64 (``--dtype float32``
for the other). Two models: softmax regression (d = 610, ``fa.problems.synthetic``) and a
60-64-10 tanh MLP (d = 4554, an ``equinox.nn.MLP`` through ``fa.problems.from_model``).

Rows, each timed in this one process, one after the other:

- ``package``: ``fa.simulate(..., mode="gather", record_every=T)`` (records at t = 0 and T
  only, as the peers evaluate nothing in between) at R trials; set-up (building the
  problem; its f* and f_i* are computed only when asked for, which no row does), the first
  call's extra time (compilation) and the run's time are reported apart.
- ``unpadded``: the same with ``pad_trials=False`` (only the R trials computed, not a
  multiple of 8; a trial's last bits may then depend on R), where R is not a multiple of 8.
- ``clients`` (``--record-clients``, in place of the rows below): the package row with
  ``record_clients=True``, every client's model and loss at both records; its run time
  over the package row's is the cost of the per-client records.
- ``plain_jax``: :mod:`benchmarks.baselines.fedavg_jax`, FedAvg written out in plain JAX
  (jit, vmap over trials and clients, one batched product a layer); always available.
- ``products``: the matrix products of one local step of the S x R sampled clients as
  batched products (:func:`~benchmarks.baselines.fedavg_jax.batched_products`), the
  arithmetic limit: "x limit" = a row's rate of those products' flops over this one's.
- peers (``pip install -e ".[peers]"``): Google's fedjax, Flower (flwr) and Apple's pfl are
  looked for and reported as found or not; a runner for each is not part of this script
  (their figures in ``docs/performance.md`` came from scripts written for each).

Throughput is trials/s = R / run s; client-steps/s = R S Q T / run s. On 2 busy cores
(load 3-6) the full run took about 20 minutes, ``--quick`` 5; ``--model mlp`` with one R
about 2.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

N, S, Q, B, STEPSIZE, L2, P, K, WIDTH = 100, 10, 5, 32, 0.05, 1e-3, 60, 10, 64
PEERS = {"fedjax": "fedjax", "flwr": "flwr", "pfl": "pfl"}


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _timed(go, repeat: int) -> dict:
    """compile_s (the first call less a later one) and run_s (the fastest of ``repeat``)."""
    t = time.perf_counter()
    go()
    first = time.perf_counter() - t
    run = _best(go, repeat)
    return dict(compile_s=max(first - run, 0.0), run_s=run)


def build(model: str, solver_steps: int):
    """(problem, x0, set-up s) through the package's public functions."""
    import equinox as eqx
    import jax

    import fedjax_abc as fa

    t = time.perf_counter()
    oracle = fa.MinibatchOracle(B)
    if model == "softmax":
        problem = fa.problems.synthetic(jax.random.key(0), 1.0, 1.0, N, l2=L2, oracle=oracle,
                                        max_samples=221)
    else:
        data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, N, max_samples=221)
        net = eqx.nn.MLP(P, K, WIDTH, 1, activation=jax.nn.tanh, key=jax.random.key(1))
        problem = fa.problems.from_model(net, fa.problems.cross_entropy, data.features,
                                         data.labels, l2=L2, num_classes=K, oracle=oracle,
                                         solver_steps=solver_steps)
    x0 = problem.loss.model.init(jax.random.key(1))
    return problem, x0, time.perf_counter() - t


def package_row(problem, x0, model, R, T, dtype, repeat, pad=True, clients=False):
    import jax

    import fedjax_abc as fa

    seed = [0]

    def go():
        seed[0] += 1
        res = fa.simulate(problem, num_sampled=S, local_steps=Q, stepsize=STEPSIZE, rounds=T,
                          x0=x0, trials=R, key=jax.random.key(seed[0]), mode="gather",
                          record_every=T, dtype=dtype, pad_trials=pad,
                          record_clients=clients)
        jax.block_until_ready(res.x_final)  # the gap would compute f* (not the peers' work)

    impl = "clients" if clients else "package" if pad else "unpadded"
    return dict(impl=impl, model=model, trials=R, rounds=T, dtype=dtype, **_timed(go, repeat))


def clients_row(problem, x0, model, R, T, dtype, repeat):
    """The package row with every client's model and loss recorded (``record_clients``)."""
    return package_row(problem, x0, model, R, T, dtype, repeat, clients=True)


def unpadded_row(problem, x0, model, R, T, dtype, repeat):
    return package_row(problem, x0, model, R, T, dtype, repeat, pad=False)


def plain_row(problem, x0, model, R, T, dtype, repeat):
    import jax
    import jax.numpy as jnp

    from benchmarks.baselines.fedavg_jax import make_fedavg, to_params

    data = problem.params
    features = jnp.asarray(data.features, dtype)
    labels, counts = jnp.asarray(data.labels), jnp.asarray(data.count)
    params = to_params(model, jnp.broadcast_to(jnp.asarray(x0, dtype), (R, x0.shape[0])), P, K,
                       WIDTH)
    run_fn = make_fedavg(model, num_sampled=S, local_steps=Q, batch=B, rounds=T,
                         stepsize=STEPSIZE, l2=L2)
    seed = [0]

    def go():
        seed[0] += 1
        keys = jax.random.split(jax.random.key(seed[0]), R)
        jax.block_until_ready(run_fn(features, labels, counts, params, keys))

    return dict(impl="plain_jax", model=model, trials=R, rounds=T, dtype=dtype,
                **_timed(go, repeat))


def products_rate(model, R, dtype, repeat) -> float:
    """Flop/s of one local step's products of S R clients, batched (the arithmetic limit)."""
    import jax

    from benchmarks.baselines.fedavg_jax import batched_products, product_flops

    fn, args = batched_products(model, S * R, B, dtype, P, K, WIDTH)
    jax.block_until_ready(fn(*args))
    reps = max(1, int(2e8 // product_flops(model, S * R, B, P, K, WIDTH)))

    def go():
        for _ in range(reps):
            out = fn(*args)
        jax.block_until_ready(out)

    return product_flops(model, S * R, B, P, K, WIDTH) * reps / _best(go, max(repeat, 3))


def peers_found() -> dict:
    return {name: importlib.util.find_spec(mod) is not None for name, mod in PEERS.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("softmax", "mlp"), action="append")
    ap.add_argument("--trials", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--repeat", type=int, default=1, help="timed runs after the first call")
    ap.add_argument("--solver-steps", type=int, default=50,
                    help="L-BFGS steps of the MLP's f* and f_i* (set-up only)")
    ap.add_argument("--quick", action="store_true", help="T = 20, R = 1 and 16")
    ap.add_argument("--record-clients", action="store_true",
                    help="also the package row with record_clients=True (every client's "
                    "model and loss at each record), its time beside the package row's")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.trials = 20, [1, 16]
    models = args.model or ["softmax", "mlp"]

    t = time.perf_counter()
    import jax

    jax.config.update("jax_enable_x64", True)
    import fedjax_abc as fa

    fa.use_cpu_cores()
    import_s = time.perf_counter() - t
    from benchmarks.baselines.fedavg_jax import product_flops

    info = dict(date=datetime.datetime.now().isoformat(timespec="seconds"),
                platform=platform.platform(), cpus=os.cpu_count(), jax=jax.__version__,
                import_s=import_s, load_start=load(), peers=peers_found())
    print(f"import fedjax_abc + jax {import_s:.2f} s; load {info['load_start']:.2f}; peers "
          + ", ".join(f"{k} {'found' if v else 'not installed'}" for k, v in info["peers"].items()),
          flush=True)
    rows = []
    T = args.rounds
    for model in models:
        problem, x0, setup_s = build(model, args.solver_steps)
        print(f"{model}: d = {problem.dim}, set-up {setup_s:.1f} s", flush=True)
        info[f"setup_s_{model}"] = setup_s
        for R in args.trials:
            limit = products_rate(model, R, args.dtype, args.repeat)
            trial_flops = T * S * Q * product_flops(model, 1, B, P, K, WIDTH)
            # the unpadded row only where padding adds trials (R not a multiple of 8)
            fns = (package_row, unpadded_row, plain_row)[::1 if R % 8 else 2]
            if args.record_clients:
                fns = (package_row, clients_row)
            for fn in fns:
                row = fn(problem, x0, model, R, T, args.dtype, args.repeat)
                row.update(trials_per_s=R / row["run_s"], ms_per_round=1e3 * row["run_s"] / T,
                           client_steps_per_s=R * S * Q * T / row["run_s"],
                           gflops=R * trial_flops / row["run_s"] / 1e9,
                           limit_gflops=limit / 1e9, load=load())
                row["x_limit"] = row["gflops"] / row["limit_gflops"]
                rows.append(row)
                print(f"{model:7s} {row['impl']:9s} R={R:4d} {row['dtype']}: "
                      f"{row['ms_per_round']:8.2f} ms/round {row['trials_per_s']:8.2f} trials/s "
                      f"compile {row['compile_s']:5.1f} s  {row['gflops']:5.1f} GFLOP/s = "
                      f"{row['x_limit']:.2f} x limit ({row['limit_gflops']:.1f})  "
                      f"load {row['load']:.2f}", flush=True)
    info["load_end"] = load()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=info, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
