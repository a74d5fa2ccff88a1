"""The benchmark cases: one dict per (workload, implementation, configuration).

Fields: workload, impl ("fedjax_abc", "numpy_all", "numpy_sampled", "jax_naive",
"numba_all" and "numba_sampled" on the Table II workload when Numba is installed, and for the
"learning" workload "numpy_softmax", "jax_softmax" and "torch_softmax", the last only when
PyTorch is installed), mode
("mask"/"gather" for the package, "all"/"sampled" for the baselines), dtype, problem
("huber27", "softplus_huber", "quadratics", "synthetic11": softmax regression on
Synthetic(1, 1) with a mini-batch oracle, ``batch`` rows), n, d, S, Q, T, trials,
record_every; optionally cpu_devices (the package on that many CPU devices,
``fa.use_cpu_cores``; native_loops: its ``native_loops``, absent for its default),
generator (the package's random words) and cores (the worker is pinned to that many cores
before it imports JAX or Numba; a Numba baseline runs that many threads).

Baselines run fewer rounds than the package where noted (``BASELINE_ROUNDS``): throughput
is compared per client-step, so T only sets how long a measurement lasts.
"""

from __future__ import annotations

import importlib.util
import os

WORKLOADS = ("table2", "algorithms", "fig1", "quadratics", "trials", "clients", "memory",
             "sweep", "learning", "steps", "participation")
# The algorithms of fedjax_abc.algorithms on the Table II workload (package only).
ALGORITHMS = ("FedAvg", "FedProx", "Scaffold", "FedAdam")
QUICK_WORKLOADS = ("table2", "memory")  # what --quick runs unless --only says otherwise

# Rounds the baselines run in the full configuration (the package runs the workload's T).
BASELINE_ROUNDS = {"table2": 200, "fig1": 200, "quadratics": 100, "trials": 50, "clients": 20,
                   "learning": 20}
# The learning workload: Synthetic(1, 1), 30 clients, d = 610, b = 10, Q = 10, S = 10, 100
# trials, T = 200 rounds for the package (its two records, at t = 0 and T, are full-batch
# evaluations of f and grad f for every trial, included in its time).
LEARNING = dict(n=30, S=10, Q=10, T=200, trials=100, d=610, batch=10)

# The local-steps workload: Table II's shape (float64) at these Q. A round's time against Q
# splits into a cost per local step (the slope) and one per round (the rest: the random
# words' hashes, the sampling, the mean), each compared with Numba's.
STEPS_Q = (1, 10, 20)

# Scaling in n: the package's rounds for each number of clients (100 trials, S = 10, Q = 10).
CLIENTS_ROUNDS = {10: 1000, 100: 1000, 1000: 1000, 10_000: 100}

BASELINE_MODE = {"mask": "all", "gather": "sampled"}
PACKAGE_MODE = {v: k for k, v in BASELINE_MODE.items()}
# The Numba baselines run on 1 and on 2 cores, the package also pinned to 1 core.
NUMBA_CORES = (1, 2)


def has_numba() -> bool:
    return importlib.util.find_spec("numba") is not None


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _case(workload, impl, mode, dtype, problem, n, S, Q, T, trials, d=1, record_every=None,
          **extra):
    if record_every is None:
        record_every = max(1, T // 10)
    return dict(workload=workload, impl=impl, mode=mode, dtype=dtype, problem=problem, n=n,
                d=d, S=S, Q=Q, T=T, trials=trials, record_every=record_every, **extra)


def _package_and_baselines(workload, problem, n, S, Q, T, trials, *, d=1, dtypes=("float64",),
                           base_T, jax_dtypes=("float64",), modes=("mask", "gather"),
                           numpy=True, jax=True):
    cases = []
    for dtype in dtypes:
        for mode in modes:
            cases.append(_case(workload, "fedjax_abc", mode, dtype, problem, n, S, Q, T, trials, d))
    for mode in modes:
        bmode = BASELINE_MODE[mode]
        if numpy:
            cases.append(_case(workload, f"numpy_{bmode}", bmode, "float64", problem, n, S, Q,
                               base_T, trials, d))
        if jax:
            for dtype in jax_dtypes:
                cases.append(_case(workload, "jax_naive", bmode, dtype, problem, n, S, Q, base_T,
                                   trials, d))
    return cases


def numba_cases(workload, problem, n, S, Q, T, trials, *, dtypes=("float64", "float32"),
                modes=("mask", "gather")):
    """The Numba baselines on 1 and 2 cores (as many as there are), none without Numba."""
    if not has_numba():
        return []
    cores = sorted({min(c, usable_cores()) for c in NUMBA_CORES})
    return [_case(workload, f"numba_{BASELINE_MODE[mode]}", BASELINE_MODE[mode], dtype, problem,
                  n, S, Q, T, trials, cores=c)
            for dtype in dtypes for mode in modes for c in cores]


def pinned_package_cases(workload, problem, n, S, Q, T, trials, *, dtypes=("float64", "float32"),
                         modes=("mask", "gather")):
    """The package pinned to one core (when the machine has more)."""
    if usable_cores() < 2:
        return []
    return [_case(workload, "fedjax_abc", mode, dtype, problem, n, S, Q, T, trials, cores=1)
            for dtype in dtypes for mode in modes]


def multicore_package_cases(workload, problem, n, S, Q, T, trials, *,
                            dtypes=("float64", "float32"), modes=("mask", "gather")):
    """The package on one CPU device per core (``fa.use_cpu_cores``: native loops, its
    default there) and with its loops run as XLA's calls (``native_loops=False``), and with
    the "splitmix" generator on one core, on every core and on one core as one CPU device,
    these two with ``native_loops`` (when the machine has two or more cores)."""
    cores = usable_cores()
    if cores < 2:
        return []
    out = []
    for dtype in dtypes:
        for mode in modes:
            shape = (workload, "fedjax_abc", mode, dtype, problem, n, S, Q, T, trials)
            out.append(_case(*shape, cpu_devices=cores))
            out.append(_case(*shape, cpu_devices=cores, native_loops=False))
            out.append(_case(*shape, cores=1, generator="splitmix"))
            out.append(_case(*shape, cpu_devices=cores, generator="splitmix", native_loops=True))
            out.append(_case(*shape, cores=1, cpu_devices=1, generator="splitmix",
                             native_loops=True))
    return out


def memory_cases(quick: bool):
    """The memory check: the package at T and 4T (same trials x n), and at 1/4 of the trials.

    Records every k rounds with k fixed, so the recorded gaps grow with T (trials x T/k
    numbers, a few hundred kB here) while the working set should not.
    """
    if quick:
        trials, n, T, k = 2000, 200, 10, 5
    else:
        trials, n, T, k = 10_000, 100, 25, 5
    out = []
    shapes = [(trials, T), (trials, 4 * T)]
    if not quick:
        shapes.append((trials // 4, T))
    for tr, t in shapes:
        out.append(_case("memory", "fedjax_abc", "mask", "float64", "huber27", n, 10, 10, t, tr,
                         record_every=k))
    return out


def cases(quick: bool = False, only=None):
    """All cases of the selected workloads (``only``: a list of names, None for all)."""
    selected = (QUICK_WORKLOADS if quick else WORKLOADS) if not only else tuple(only)
    for name in selected:
        if name not in WORKLOADS:
            raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    out = []
    if "table2" in selected:
        if quick:
            out += _package_and_baselines("table2", "huber27", 40, 4, 10, 20, 64, base_T=20)
            out.insert(2, _case("table2", "fedjax_abc", "mask", "float32", "huber27", 40, 4, 10,
                                20, 64))
            out = [c for c in out if not (c["impl"] == "jax_naive" and c["mode"] == "sampled")]
        else:
            for S in (4, 40):
                out += _package_and_baselines("table2", "huber27", 40, S, 10, 2000, 1000,
                                              base_T=BASELINE_ROUNDS["table2"],
                                              dtypes=("float64", "float32"),
                                              jax_dtypes=("float64", "float32"))
                if S == 4:
                    out += pinned_package_cases("table2", "huber27", 40, S, 10, 2000, 1000)
                    out += multicore_package_cases("table2", "huber27", 40, S, 10, 2000, 1000)
                # Numba runs the package's T: it is fast enough for a measurement to last
                out += numba_cases("table2", "huber27", 40, S, 10, 2000, 1000)
    if "algorithms" in selected:
        T, R = (20, 64) if quick else (2000, 1000)
        for name in ALGORITHMS:
            for mode in ("mask", "gather"):
                out.append(_case("algorithms", "fedjax_abc", mode, "float64", "huber27", 40, 4, 10,
                                 T, R, algorithm=name))
    if "fig1" in selected:
        T, R, bT = (20, 64, 20) if quick else (2000, 1000, BASELINE_ROUNDS["fig1"])
        out += _package_and_baselines("fig1", "softplus_huber", 16, 4, 5, T, R, base_T=bT)
    if "quadratics" in selected:
        T, R, bT = (10, 16, 10) if quick else (100, 100, BASELINE_ROUNDS["quadratics"])
        out += _package_and_baselines("quadratics", "quadratics", 20, 5, 5, T, R, d=100, base_T=bT)
    if "trials" in selected:
        counts = (1, 100) if quick else (1, 10, 100, 1000, 10_000)
        T, bT = (20, 20) if quick else (200, BASELINE_ROUNDS["trials"])
        for R in counts:
            out += _package_and_baselines("trials", "huber27", 40, 4, 10, T, R, base_T=bT,
                                          jax=False)
    if "clients" in selected:
        # T shrinks at n = 10^4 to keep the mask runs near a second; gather runs are short
        # (tens of ms) at every n, so they are timed repeatedly (see _worker.MIN_TIMED_S).
        rounds = {10: 10, 1000: 10} if quick else CLIENTS_ROUNDS
        bT = 10 if quick else BASELINE_ROUNDS["clients"]
        for n, T in rounds.items():
            out += _package_and_baselines("clients", "huber27", n, 10, 10, T, 100, base_T=bT,
                                          jax=False)
        if not quick:  # the gather-vs-mask target at n = 1000 also with Table II's 1000 trials
            out += _package_and_baselines("clients", "huber27", 1000, 10, 10, 200, 1000,
                                          base_T=bT, jax=False)
    if "memory" in selected:
        out += memory_cases(quick)
    if "sweep" in selected:
        out += sweep_cases(quick)
    if "learning" in selected:
        out += learning_cases(quick)
    if "steps" in selected:
        out += steps_cases(quick)
    if "participation" in selected:
        out += participation_cases(quick)
    return out


def participation_cases(quick: bool):
    """A random number of participants at its cost: Bernoulli(0.01) against S = 10 uniformly
    without replacement, gather mode, recorded once (at t = T), on n = 1000 quadratic
    clients (d = 100, Q = 5) and on the paper's problem (27) (d = 1, Q = 10, 64 trials,
    T = 2000), where a client-step costs a few ns and the round's draw shows: gather computes
    Bernoulli's capacity (32 slots), not n, and the sampler draws about p n + 1 candidates a
    round, not n words. The Bernoulli case's S is its mean number of participants, p n."""
    T, R = (10, 16) if quick else (100, 100)
    T27 = 20 if quick else 2000
    out = []
    for extra in ({}, {"sampler": "bernoulli:0.01"}):  # S: Bernoulli's mean p n
        out.append(_case("participation", "fedjax_abc", "gather", "float64", "quadratics", 1000,
                         10, 5, T, R, d=100, record_every=T, **extra))
        out.append(_case("participation", "fedjax_abc", "gather", "float64", "huber27", 1000,
                         10, 10, T27, 64, record_every=T27, **extra))
    return out


def steps_cases(quick: bool):
    """At each Q of STEPS_Q: the package's default path, the same with generator "splitmix",
    and Numba on every usable core (at most 2), both modes, float64."""
    T, R, counts = (20, 64, (1, 2)) if quick else (2000, 1000, STEPS_Q)
    cores = min(2, usable_cores())
    out = []
    for Q in counts:
        for mode in ("mask", "gather"):
            shape = ("steps", "fedjax_abc", mode, "float64", "huber27", 40, 4, Q, T, R)
            out.append(_case(*shape))
            out.append(_case(*shape, generator="splitmix"))
            if has_numba():
                out.append(_case("steps", f"numba_{BASELINE_MODE[mode]}", BASELINE_MODE[mode],
                                 "float64", "huber27", 40, 4, Q, T, R, cores=cores))
    return out


def learning_cases(quick: bool):
    """Package (mask, gather; one device, and one CPU device per core with native loops and
    with loops as calls) and NumPy / PyTorch baselines, float64 and float32."""
    L = dict(LEARNING)
    T, bT, R = (4, 2, 16) if quick else (L["T"], BASELINE_ROUNDS["learning"], L["trials"])
    common = dict(n=L["n"], S=L["S"], Q=L["Q"], trials=R, d=L["d"], batch=L["batch"])
    torch = importlib.util.find_spec("torch") is not None
    out = []
    cores = usable_cores()
    for dtype in ("float64", "float32"):
        for mode in ("mask", "gather"):
            out.append(_case("learning", "fedjax_abc", mode, dtype, "synthetic11", T=T,
                             record_every=T, **common))
            if cores >= 2:  # one CPU device per core, as fa.use_cpu_cores() and the CLI run
                for extra in ({}, {"native_loops": False}):  # the default; loops as calls
                    out.append(_case("learning", "fedjax_abc", mode, dtype, "synthetic11", T=T,
                                     record_every=T, cpu_devices=cores, **common, **extra))
        for bmode in ("all", "sampled"):
            out.append(_case("learning", "numpy_softmax", bmode, dtype, "synthetic11", T=bT,
                             **common))
            out.append(_case("learning", "jax_softmax", bmode, dtype, "synthetic11", T=T,
                             **common))
            if torch:
                out.append(_case("learning", "torch_softmax", bmode, dtype, "synthetic11", T=bT,
                                 **common))
    return out


# The sweep workload: SWEEP_POINTS stepsizes around Table II's alpha = 1e-4.
SWEEP_POINTS = 16


def sweep_cases(quick: bool):
    """A grid of 16 stepsizes x 100 trials on the Table II workload (mask, float64) three
    ways: ``fa.sweep`` (one program), 16 separate ``fa.simulate`` calls in one process
    (``separate``: the first call compiles, the others reuse it), and one ``simulate`` call
    of 16 x 100 trials at one stepsize (the client-step rate to match)."""
    T, R = (20, 16) if quick else (2000, 100)
    shape = dict(record_every=max(1, T // 10))
    return [
        _case("sweep", "fedjax_abc", "mask", "float64", "huber27", 40, 4, 10, T, R,
              grid=SWEEP_POINTS, **shape),
        _case("sweep", "fedjax_abc", "mask", "float64", "huber27", 40, 4, 10, T, R,
              grid=SWEEP_POINTS, separate=True, **shape),
        _case("sweep", "fedjax_abc", "mask", "float64", "huber27", 40, 4, 10, T,
              R * SWEEP_POINTS, **shape),
    ]
