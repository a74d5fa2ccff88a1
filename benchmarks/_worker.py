"""Runs one benchmark case in a fresh process and prints its measurements as JSON.

Usage: ``python -m benchmarks._worker '<case as JSON>'`` (``benchmarks/run.py`` does this).

The first call (key 1) compiles and runs; the following calls, each with a new key, are
timed, until they add up to ``MIN_TIMED_S`` (at most ``MAX_CALLS`` calls, at least the
case's ``repeat``). The fastest is reported, with the cores it used (CPU seconds of all
threads / wall seconds). NumPy cases have no compiling call; Numba cases compile on the
first call, as the package's do.

A case with ``cores`` pins the process to its first that many usable cores before JAX or
Numba is imported (so XLA's thread pool has that many threads), and a Numba case runs that
many threads.

Memory is read from /proc/self/status: VmHWM (the peak resident set) is reset through
/proc/self/clear_refs before the first and before the first timed call, so ``peak_run_mb``
is the process's peak resident memory during the timed run (imports, compiled code and
buffers included) and ``peak_first_mb`` the same during the first call (compilation
included).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import numpy as np

RESULT_MARK = "@@RESULT "

# Timed calls are repeated with new keys until they add up to MIN_TIMED_S (at most MAX_CALLS
# calls) and the fastest is reported: short runs are otherwise at the mercy of the scheduler.
MIN_TIMED_S = 1.5
MAX_CALLS = 100

COMPILED = ("fedjax_abc", "jax_naive", "numba_all", "numba_sampled")  # first call compiles
STEPSIZES = {"huber27": 1e-4, "softplus_huber": 1e-3, "quadratics": 1e-2, "synthetic11": 0.05}
LEARNING_DATA_KEY = 4  # Synthetic(1, 1) with this key: 30 clients, 50..877 training samples
LEARNING_L2 = 1e-3


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process, all threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build_problem(case):
    """(package problem, baseline problem, x0, stepsize) of a case, from the same arrays."""
    import jax

    import fedjax_abc as fa
    from benchmarks.baselines import HuberOffsets, Quadratics, SoftplusHuber

    kind, n = case["problem"], case["n"]
    if kind == "huber27":
        p = fa.problems.huber_offsets(jax.random.key(0), n=n, d_max=200.0)
        base = HuberOffsets(np.asarray(p.params))
        x0 = np.asarray(p.x_star) + 10.0
    elif kind == "softplus_huber":
        p = fa.problems.softplus_huber(n)
        base = SoftplusHuber(n)
        x0 = np.array([10.0])
    elif kind == "quadratics":
        p = fa.problems.quadratics(jax.random.key(0), n=n, d=case["d"])
        a, c = p.params
        base = Quadratics(np.asarray(a), np.asarray(c), C=float(p.oracle.C), D=float(p.oracle.D))
        x0 = np.asarray(p.x_star) + 1.0
    elif kind == "synthetic11":
        from benchmarks.baselines import SoftmaxData

        data = fa.data.synthetic_data(jax.random.key(LEARNING_DATA_KEY), 1.0, 1.0, n)
        base = SoftmaxData.from_lists(data.features, data.labels, data.num_classes, LEARNING_L2,
                                      case["batch"])
        p = None  # the package's problem (its f_i*, f*, x* take a few seconds) only if needed
        if case["impl"] == "fedjax_abc":
            p = fa.problems.softmax_regression(data.features, data.labels, l2=LEARNING_L2,
                                               num_classes=data.num_classes,
                                               oracle=fa.MinibatchOracle(case["batch"]))
        x0 = np.zeros(base.dim)
    else:
        raise ValueError(f"unknown problem {kind!r}")
    return p, base, x0, case.get("stepsize", STEPSIZES[kind])


def build_algorithm(name):
    """The package's algorithm of a case: None (Algorithm 1 by default) or one by name."""
    if name is None:
        return None
    import optax

    import fedjax_abc as fa

    return {"FedAvg": lambda: fa.algorithms.FedAvg(), "FedProx": lambda: fa.algorithms.FedProx(0.1),
            "Scaffold": lambda: fa.algorithms.Scaffold(),
            "FedAdam": lambda: fa.algorithms.FedOpt(optax.adam(1e-3))}[name]()


def build_sampler(spec):
    """The package's sampler of a case: None (S uniformly without replacement) or
    ``"bernoulli:P"``."""
    if spec is None:
        return None
    import fedjax_abc as fa

    kind, value = spec.split(":")
    return {"bernoulli": fa.Bernoulli}[kind](float(value))


def make_call(case):
    """A function ``call(seed) -> x_T`` running the case once."""
    import jax

    import fedjax_abc as fa

    p, base, x0, alpha = build_problem(case)
    common = dict(num_sampled=case["S"], local_steps=case["Q"], stepsize=alpha,
                  rounds=case["T"], x0=x0, trials=case["trials"])
    impl = case["impl"]
    if impl == "fedjax_abc" and case.get("grid"):
        return _grid_call(case, p, x0, alpha, common)
    if impl == "fedjax_abc":
        keys = {}
        algorithm = build_algorithm(case.get("algorithm"))
        sampler = build_sampler(case.get("sampler"))
        if sampler is not None:
            common = dict(common, num_sampled=None, sampler=sampler)

        def call(seed):
            key = keys.setdefault(seed, jax.random.key(seed))
            res = fa.simulate(p, key=key, record_every=case["record_every"], mode=case["mode"],
                              dtype=case["dtype"], record_x=False, algorithm=algorithm,
                              generator=case.get("generator", "threefry"), **common)
            return res.x_final

        for s in range(1, 2 + max(case.get("repeat", 1), MAX_CALLS)):
            keys[s] = jax.random.key(s)  # made here, outside the timed calls
        return call
    if impl in ("numpy_all", "numpy_sampled"):
        from benchmarks.baselines import numpy_all, numpy_sampled

        fn = numpy_all if impl == "numpy_all" else numpy_sampled
        return lambda seed: fn(base, seed=seed, **common)
    if impl in ("numpy_softmax", "torch_softmax", "jax_softmax"):
        from benchmarks.baselines import jax_softmax, numpy_softmax, torch_softmax

        fn = {"numpy_softmax": numpy_softmax, "torch_softmax": torch_softmax,
              "jax_softmax": jax_softmax}[impl]
        return lambda seed: fn(base, seed=seed, mode=case["mode"], dtype=case["dtype"], **common)
    if impl in ("numba_all", "numba_sampled"):
        import numba

        from benchmarks.baselines import numba_impl

        numba_impl.set_threads(case.get("cores") or numba.config.NUMBA_NUM_THREADS)
        fn = numba_impl.numba_all if impl == "numba_all" else numba_impl.numba_sampled
        return lambda seed: fn(base, seed=seed, dtype=case["dtype"], **common)
    if impl == "jax_naive":
        from benchmarks.baselines import jax_naive

        return lambda seed: jax_naive(base, key=jax.random.key(seed), mode=case["mode"],
                                      dtype=case["dtype"], **common)
    raise ValueError(f"unknown implementation {impl!r}")


def sweep_stepsizes(alpha: float, points: int) -> list:
    """``points`` stepsizes spaced geometrically from alpha / 2 to 2 alpha."""
    return [float(a) for a in np.geomspace(alpha / 2, 2 * alpha, points)]


def _grid_call(case, p, x0, alpha, common):
    """``call(seed)``: the grid of ``case["grid"]`` stepsizes, as one ``fa.sweep`` or (with
    ``separate``) as one ``fa.simulate`` call per stepsize in this process."""
    import jax

    import fedjax_abc as fa

    alphas = sweep_stepsizes(alpha, case["grid"])
    common = {k: v for k, v in common.items() if k != "stepsize"}
    opts = dict(record_every=case["record_every"], mode=case["mode"], dtype=case["dtype"],
                record_x=False, **common)
    if case.get("separate"):
        def call(seed):
            key = jax.random.key(seed)
            return np.stack([fa.simulate(p, key=key, stepsize=a, **opts).x_final
                             for a in alphas])
    else:
        def call(seed):
            return fa.sweep(p, grid={"stepsize": alphas}, key=jax.random.key(seed),
                            **opts).x_final
    return call


class _CompileLog:
    """Counts XLA compilations and sums trace + lowering + compile seconds."""

    EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
              "/jax/core/compile/jaxpr_to_mlir_module_duration",
              "/jax/core/compile/backend_compile_duration")

    def __init__(self):
        self.count = 0
        self.secs = 0.0
        try:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(self._listen)
        except Exception:  # older JAX: no counts
            self.count = None

    def _listen(self, name, secs, **kwargs):
        if name in self.EVENTS:
            self.secs += secs
            if name == self.EVENTS[-1]:
                self.count += 1

    def take(self):
        out = (self.count, self.secs)
        if self.count is not None:
            self.count, self.secs = 0, 0.0
        return out


def run_case(case) -> dict:
    call = make_call(case)
    log = _CompileLog() if case["impl"] in ("fedjax_abc", "jax_naive") else None
    if log:
        log.take()
    rss_setup = _status_mb("VmRSS")
    out = {"rss_setup_mb": rss_setup}
    can_reset = _reset_peak()
    compiled = case["impl"] in COMPILED
    first_s = None
    if compiled:
        t = time.perf_counter()
        call(1)
        first_s = time.perf_counter() - t
        if log:
            out["compiles_first"], out["trace_compile_s"] = log.take()
        out["peak_first_mb"] = _status_mb("VmHWM") if can_reset else None
    runs, cores = [], []
    compiles_run = 0
    r = 0
    while r < case.get("repeat", 1) or (sum(runs) < MIN_TIMED_S and r < MAX_CALLS):
        rss_before = _status_mb("VmRSS")
        if can_reset:
            _reset_peak()
        c0 = _cpu_s()
        t = time.perf_counter()
        x = call(2 + r)
        runs.append(time.perf_counter() - t)
        cores.append((_cpu_s() - c0) / runs[-1])
        peak = _status_mb("VmHWM") if can_reset else None
        if r == 0:
            out["rss_before_run_mb"] = rss_before
            out["peak_run_mb"] = peak
        if log:
            c, _ = log.take()
            compiles_run += c or 0
        r += 1
    run_s = min(runs)
    out.update(
        first_s=first_s,
        run_s=run_s,
        run_s_all=runs,
        timed_calls=len(runs),
        cores_used=cores[int(np.argmin(runs))],
        compile_s=None if first_s is None else first_s - runs[0],
        compiles_run=compiles_run if log else None,
        maxrss_mb=_maxrss_mb(),
        peak_reset=can_reset,
        x_final_mean=float(np.mean(x)),
        finite=bool(np.all(np.isfinite(x))),
    )
    if not can_reset:  # no per-call peak: fall back to the process's lifetime peak
        out["peak_run_mb"] = out["maxrss_mb"]
    return out


def pin(cores: int) -> None:
    """Restricts this process (and the threads it starts later) to its first ``cores`` usable
    cores."""
    usable = sorted(os.sched_getaffinity(0))
    if cores > len(usable):
        raise ValueError(f"cores ({cores}) must be at most the {len(usable)} usable cores")
    os.sched_setaffinity(0, usable[:cores])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    case = json.loads(argv[0])
    if case.get("cores"):
        pin(case["cores"])
    if case.get("impl") == "fedjax_abc" or case.get("cpu_devices"):
        # the README's first block, before any JAX computation: float64, and one CPU device
        # per usable core (the pinned ones) unless the case names the devices
        import jax

        import fedjax_abc as fa

        jax.config.update("jax_enable_x64", True)
        fa.use_cpu_cores(case.get("cpu_devices"), native_loops=case.get("native_loops"))
    out = run_case(case)
    if case.get("cores"):
        out["cpus_pinned"] = sorted(os.sched_getaffinity(0))
    print(RESULT_MARK + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
