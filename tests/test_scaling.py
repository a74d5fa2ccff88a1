"""Scaling contracts of ``fedjax_abc.simulate``: chunking and sharding change nothing, memory
does not grow with T, and a new key compiles nothing.

- ``trial_chunk=`` gives results bit for bit identical to one chunk.
- Sharding the trials over 2 CPU devices (a subprocess with
  ``XLA_FLAGS=--xla_force_host_platform_device_count=2``) gives results bit for bit identical
  to one device (``devices=[jax.devices()[0]]``), and each device computes its own trials
  alone: the compiled programs (dumped by XLA) hold no collective operation.
- Peak resident memory during a run (a subprocess per T, ``benchmarks/_worker.py``) is the
  same at T and 4T when recording every k rounds, although keeping the local models of
  every round would have added far more than the tolerance.
- A second call with a new key, a new stepsize or a new x0 compiles nothing.
"""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import fedjax_abc as fa

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ("gap", "grad_norm_sq", "x", "x_final")


def _problems():
    return {
        "eq27": (fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0), 3, 1e-2, 10.0),
        "quadratics": (fa.problems.quadratics(jax.random.key(1), n=6, d=5), 2, 5e-2, 1.0),
    }


def _kwargs(name, trials=7):
    p, S, alpha, shift = _problems()[name]
    return p, dict(num_sampled=S, local_steps=4, stepsize=alpha, rounds=30,
                   x0=np.asarray(p.x_star) + shift, trials=trials, key=jax.random.key(5),
                   record_every=10)


def _identical(a, b):
    return {f: bool(np.array_equal(getattr(a, f), getattr(b, f))) for f in FIELDS}


@pytest.mark.parametrize("mode", ["mask", "gather"])
@pytest.mark.parametrize("name", ["eq27", "quadratics"])
def test_trial_chunk_is_bit_identical(name, mode):
    p, kw = _kwargs(name)
    whole = fa.simulate(p, mode=mode, **kw)
    for chunk in (3, 2):  # 7 trials: the last chunk is padded
        chunked = fa.simulate(p, mode=mode, trial_chunk=chunk, **kw)
        assert all(_identical(whole, chunked).values()), (chunk, _identical(whole, chunked))
    assert whole.x_final.shape == (7, p.dim)


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_trial_chunk_of_one_is_bit_identical(mode):
    p, kw = _kwargs("eq27")
    whole = fa.simulate(p, mode=mode, **kw)
    single = fa.simulate(p, mode=mode, trial_chunk=1, **kw)
    assert all(_identical(whole, single).values()), _identical(whole, single)


SHARD_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    import fedjax_abc as fa
    sys.path.insert(0, {tests!r})
    from test_scaling import FIELDS, _identical, _kwargs, _learning
    out = {{"devices": [str(d) for d in jax.devices()]}}
    cases = [("eq27", "mask", None), ("eq27", "gather", None), ("quadratics", "mask", None),
             ("eq27", "mask", fa.algorithms.Scaffold()), ("eq27", "gather", fa.algorithms.Scaffold()),
             ("softmax", "mask", None)]
    for name, mode, algorithm in cases:
        p, kw = _learning() if name == "softmax" else _kwargs(name, trials=17)
        kw = dict(kw, mode=mode, algorithm=algorithm)
        # 17 trials, padded to 16 on each of the 2 devices listed (by default a call this
        # short stays on one device)
        kw = dict(kw, devices=jax.devices())
        sharded = fa.simulate(p, **kw)
        one = fa.simulate(p, **dict(kw, devices=[jax.devices()[0]]))
        r = dict(one_device=_identical(sharded, one), used=sharded.config["devices"])
        if (name, mode, algorithm) == ("eq27", "mask", None):  # chunks of 3, on one device
            r["chunked"] = _identical(sharded, fa.simulate(p, trial_chunk=3, **kw))
        if algorithm is None and name != "quadratics":  # a start, then a segment per block
            r["segmented"] = _identical(sharded, fa.simulate(p, progress=lambda *a: None, **kw))
        out[" ".join((name, mode, type(algorithm).__name__))] = r
    print("@@" + json.dumps(out))
""")

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter",
               "collective-broadcast")


def _learning():
    """A softmax regression on 4 clients' data (records of the pooled rows, 8 trials a time)."""
    data = fa.data.synthetic_data(jax.random.key(4), 1.0, 1.0, num_clients=4, max_samples=40)
    p = fa.problems.softmax_regression(data.features, data.labels, l2=1e-3,
                                       num_classes=data.num_classes,
                                       oracle=fa.MinibatchOracle(5))
    return p, dict(num_sampled=2, local_steps=2, stepsize=1e-2, rounds=6, x0=np.zeros(p.dim),
                   trials=9, key=jax.random.key(5), record_every=2)


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """The script's output on 2 CPU devices, and the optimized HLO of every program it ran."""
    dump = tmp_path_factory.mktemp("hlo")
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count=2 --xla_dump_to={dump} "
                         "--xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*(segment|start).*")
    script = SHARD_SCRIPT.format(tests=os.path.join(REPO, "tests"))
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("@@")][-1][2:])
    programs = {f.name: f.read_text() for f in dump.glob("*after_optimizations.txt")}
    return out, programs


@pytest.mark.slow  # subprocesses that import JAX
def test_sharding_over_two_devices_is_bit_identical(two_devices):
    out, _ = two_devices
    assert len(out.pop("devices")) == 2
    for case, r in out.items():
        assert len(r["used"]) == 2, (case, r["used"])  # trials really were sharded
        assert all(r["one_device"].values()), (case, r["one_device"])
        assert all(r.get("chunked", {}).values()), (case, r["chunked"])
        assert all(r.get("segmented", {}).values()), (case, r["segmented"])


@pytest.mark.slow  # subprocesses that import JAX
def test_each_device_runs_its_own_trials_without_collectives(two_devices):
    _, programs = two_devices
    sharded = {name: text for name, text in programs.items() if "num_partitions=2" in text}
    # the segments of every case above (not only one-device runs); a chunk of one segment
    # starts in it (state and records at t = 0, the trials' ids and x_0 made on the devices),
    # a chunk of several in a program of its own
    assert sum("segment" in name for name in sharded) >= 6, sorted(programs)
    assert any("first_segment" in name for name in sharded), sorted(programs)
    assert any("start" in name and "segment" not in name for name in sharded), sorted(programs)
    for name, text in sharded.items():
        found = [op for op in COLLECTIVES if f" {op}(" in text or f" {op}-start(" in text]
        assert not found, (name, found)


def _peak(T, trials, n, k=5):
    """One case in a fresh process: RSS after set-up and peak RSS during the timed run (MB)."""
    case = dict(workload="memory", impl="fedjax_abc", mode="mask", dtype="float64",
                problem="huber27", n=n, d=1, S=10, Q=10, T=T, trials=trials, record_every=k)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "benchmarks._worker", json.dumps(case)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@RESULT ")][-1]
    return json.loads(line[len("@@RESULT "):])


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_peak_memory_does_not_grow_with_rounds():
    trials, n, T = 2000, 500, 10
    lo, hi = _peak(T, trials, n), _peak(4 * T, trials, n)
    working = lo["peak_run_mb"] - lo["rss_setup_mb"]
    tolerance = 0.25 * max(working, 0.0) + 16.0  # allocator noise of ~20 MB has been seen
    # storing the (trials, n) local models of every round would add this much at 4T
    proportional = trials * n * 8 * (4 * T - T) / 2**20
    assert proportional > 3 * tolerance  # the check can see T-proportional memory
    growth = hi["peak_run_mb"] - lo["peak_run_mb"]
    assert growth <= tolerance, (lo, hi)
    # the whole process (compilation included) as seen by getrusage
    assert hi["maxrss_mb"] - lo["maxrss_mb"] <= tolerance + 0.10 * lo["maxrss_mb"], (lo, hi)


class _Compiles:
    def __init__(self):
        self.count = 0

    def __call__(self, name, secs, **kwargs):
        if name == "/jax/core/compile/backend_compile_duration":
            self.count += 1


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_new_key_stepsize_or_x0_compiles_nothing(mode):
    p, kw = _kwargs("eq27", trials=5)
    keys = [jax.random.key(s) for s in (1, 2, 3, 4)]
    x0b = np.asarray(kw["x0"]) + 1.0
    fa.simulate(p, mode=mode, **dict(kw, key=keys[0]))
    counter = _Compiles()
    jax.monitoring.register_event_duration_secs_listener(counter)
    try:
        a = fa.simulate(p, mode=mode, **dict(kw, key=keys[1]))
        after_key = counter.count
        fa.simulate(p, mode=mode, **dict(kw, key=keys[2], stepsize=2 * kw["stepsize"]))
        after_stepsize = counter.count
        fa.simulate(p, mode=mode, **dict(kw, key=keys[3], x0=x0b))
        after_x0 = counter.count
    finally:
        jax.monitoring.unregister_event_duration_listener(counter)
    assert (after_key, after_stepsize, after_x0) == (0, 0, 0)
    assert a.x_final.shape == (5, 1)


def test_a_chunk_goes_to_the_devices_its_trials_fill():
    """8 trials a device (16 in float32 mask mode): a call of up to 8 trials runs on one
    device, not padded out over both; a sweep (every_device) takes them all."""
    from fedjax_abc._engine._plan import make_plan

    devices = jax.devices()[:2]
    if len(devices) < 2:
        pytest.skip("needs two devices")
    cases = [  # (chunk, dtype, mask, every_device) -> (devices used, trials per call)
        ((1, "float64", False, False), (1, 8)), ((8, "float64", True, False), (1, 8)),
        ((9, "float64", False, False), (2, 16)), ((17, "float64", True, False), (2, 32)),
        ((16, "float32", True, False), (1, 16)), ((17, "float32", True, False), (2, 32)),
        ((16, "float32", False, False), (2, 16)), ((1, "float64", False, True), (2, 16)),
    ]
    for (chunk, dtype, mask, every), expected in cases:
        plan = make_plan(10, 10, chunk, np.dtype(dtype), devices, False, mask=mask,
                         every_device=every)
        assert (plan.groups, plan.per_call) == expected, (chunk, dtype, mask, every)
