"""One run's trials over several processes (or hosts), bit for bit the single-process run.

Every process calls ``jax.distributed.initialize`` before any other JAX call (on CPU with
the gloo collectives). Two ways:

- ``--shard``: one ``simulate(..., devices=jax.devices())`` call in every process shards
  the trials over all processes' devices; every process gets the whole result (gathered
  across processes) and process 0 saves it.
- shares: each process runs its share of the trials by global trial index
  (``simulate(..., first_trial=...)``; trial r always uses ``fold_in(key, r)``) on its own
  devices and saves it; ``--join`` puts the shares together (``fa.SimResult.concatenate``).

Both give the single-process run's arrays bit for bit (the config differs in ``devices``)::

    # two processes on this machine (any free port); on hosts, the first host's address
    python examples/multiprocess.py --coordinator 127.0.0.1:12355 --processes 2 --id 0 --shard --out sharded.nc &
    python examples/multiprocess.py --coordinator 127.0.0.1:12355 --processes 2 --id 1 --shard --out sharded.nc
    wait
    python examples/multiprocess.py --coordinator 127.0.0.1:12356 --processes 2 --id 0 --out share0.nc &
    python examples/multiprocess.py --coordinator 127.0.0.1:12356 --processes 2 --id 1 --out share1.nc
    wait
    python examples/multiprocess.py --join share0.nc share1.nc --out joined.nc
    python examples/multiprocess.py --single --out single.nc   # the same run in one process
    python examples/multiprocess.py --compare single.nc sharded.nc joined.nc

The run: problem (27) with n = 40, S = 4, Q = 10, alpha = 1e-4, ``--trials`` (default 64)
trials of ``--rounds`` (default 200) rounds, key ``jax.random.key(--seed)``.
"""

from __future__ import annotations

import argparse
import sys


def the_run(trials: int, rounds: int, seed: int, first_trial: int = 0, share=None, devices=None):
    import jax

    import fedjax_abc as fa

    problem = fa.problems.huber_offsets(jax.random.key(0), n=40, d_max=200.0)
    return fa.simulate(problem, num_sampled=4, local_steps=10, stepsize=1e-4, rounds=rounds,
                       x0=problem.x_star + 10.0, trials=trials if share is None else share,
                       key=jax.random.key(seed), record_every=max(1, rounds // 10),
                       first_trial=first_trial, devices=devices)


def share_of(trials: int, processes: int, index: int) -> tuple[int, int]:
    """(first trial, number of trials) of process ``index``: consecutive, sizes within one."""
    base, extra = divmod(trials, processes)
    first = index * base + min(index, extra)
    return first, base + (index < extra)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coordinator", help="host:port of process 0")
    ap.add_argument("--processes", type=int, help="number of processes")
    ap.add_argument("--id", type=int, help="this process's index, 0 ... processes - 1")
    ap.add_argument("--join", nargs="+", metavar="SHARE", help="join saved shares, in order")
    ap.add_argument("--single", action="store_true", help="the whole run in this process")
    ap.add_argument("--shard", action="store_true",
                    help="shard the trials over every process's devices (one result)")
    ap.add_argument("--compare", nargs="+", metavar="RESULT",
                    help="exit 0 if the results' arrays are equal bit for bit, 1 if not")
    ap.add_argument("--out", help="result file (netCDF, fa.load)")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import jax

    import fedjax_abc as fa

    jax.config.update("jax_enable_x64", True)  # the README's set-up, before any JAX work
    fa.use_cpu_cores()
    if args.compare:
        import numpy as np

        import fedjax_abc as fa

        first, *others = [fa.load(p) for p in args.compare]
        same = all(np.array_equal(getattr(first, n), getattr(o, n), equal_nan=True)
                   for o in others for n in ("gap", "grad_norm_sq", "x", "x_final",
                                             "diverged_at"))
        print("bit for bit" if same else "different")
        return 0 if same else 1
    if args.join:
        import fedjax_abc as fa

        fa.SimResult.concatenate([fa.load(p) for p in args.join]).save(args.out)
        return 0
    if args.single:
        the_run(args.trials, args.rounds, args.seed).save(args.out)
        return 0
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process on CPU
    jax.distributed.initialize(coordinator_address=args.coordinator,
                               num_processes=args.processes, process_id=args.id)
    assert jax.process_count() == args.processes and jax.process_index() == args.id
    if args.shard:
        res = the_run(args.trials, args.rounds, args.seed, devices=jax.devices())
        if jax.process_index() == 0:
            res.save(args.out)
        print(f"process {jax.process_index()} of {jax.process_count()}: all {args.trials} "
              f"trials sharded over {len(jax.devices())} devices", flush=True)
        jax.distributed.shutdown()
        return 0
    first, count = share_of(args.trials, args.processes, args.id)
    res = the_run(args.trials, args.rounds, args.seed, first, count, jax.local_devices())
    res.save(args.out)
    print(f"process {jax.process_index()} of {jax.process_count()}: trials {first} ... "
          f"{first + count - 1} on {len(jax.local_devices())} local device(s) of "
          f"{len(jax.devices())}", flush=True)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
