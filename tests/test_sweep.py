"""Contracts of ``fa.sweep``.

- trial r of grid point g has the numbers of ``simulate`` with the point's arguments and
  the same key, bit for bit (stepsizes, schedules, modes, x0, algorithm hyperparameters,
  problems of the same shapes, Gaussian noise in d = 5, trial chunks, progress segments);
- a grid over data compiles one program; a new grid of the same shapes compiles nothing;
  settings that change shapes compile once per shape;
- progress counts the whole grid; invalid grids are refused before anything runs.
"""


import jax
import numpy as np
import optax
import pytest

import fedjax_abc as fa
from conftest import count_backend_compilations as count_compilations


def offsets(n=8, seed=0, d_max=10.0):
    return fa.problems.huber_offsets(jax.random.key(seed), n=n, d_max=d_max)


KW = dict(local_steps=3, rounds=12, trials=6, key=jax.random.key(0), record_every=4)


def alone(p, **kw):
    return fa.simulate(p, **dict(KW, **kw))


def assert_point(sw, point, p, **kw):
    res = sw.point(**point)
    ref = alone(p, **kw)
    assert ref.equals(res), point


def test_stepsizes_schedules_and_modes_bit_for_bit():
    p = offsets()
    sched = optax.exponential_decay(0.05, 4, 0.5)
    sw = fa.sweep(p, grid={"stepsize": [0.01, 0.05, sched], "mode": ["mask", "gather"]},
                  num_sampled=3, x0=p.x_star + 3.0, **KW)
    assert sw.shape == (3, 2) and sw.gap.shape == (3, 2, 6, 4)
    assert sw.axes["stepsize"] == ("0.01", "0.05", "stepsize[2]") and sw.axes["mode"] == ("mask", "gather")
    for i, alpha in enumerate([0.01, 0.05, sched]):
        for mode in ("mask", "gather"):
            point = {"stepsize": sw.axes["stepsize"][i], "mode": mode}
            assert_point(sw, point, p, stepsize=alpha, mode=mode, num_sampled=3,
                         x0=p.x_star + 3.0)


def test_algorithm_fields_x0_and_problems_bit_for_bit():
    p, q = offsets(), offsets(seed=3, d_max=30.0)
    x0s = [p.x_star + 3.0, p.x_star - 1.0]
    sw = fa.sweep(p, grid={"problem": [p, q], "x0": x0s, "algorithm.mu": [0.0, 0.7]},
                  algorithm=fa.algorithms.FedProx(0.1), num_sampled=3, stepsize=0.05, **KW)
    for i, prob in enumerate([p, q]):
        for j, x0 in enumerate(x0s):
            for mu in (0.0, 0.7):
                res = sw.results[(i * 2 + j) * 2 + (mu == 0.7)]
                ref = alone(prob, x0=x0, algorithm=fa.algorithms.FedProx(mu), num_sampled=3,
                            stepsize=0.05)
                assert ref.equals(res)
    # the server step x + eta (mean - x): once batched over the grid XLA may contract it into
    # a fused multiply-add where the lone program does not: equal to rounding, not bit for bit
    sw = fa.sweep(p, grid={"algorithm.server_stepsize": [1.0, 1.5]}, num_sampled=3,
                  stepsize=0.05, x0=p.x_star + 3.0, **KW)
    for eta, res in zip((1.0, 1.5), sw.results):
        ref = alone(p, num_sampled=3, stepsize=0.05, x0=p.x_star + 3.0,
                    algorithm=fa.algorithms.FedAvg(eta))
        assert ref.config == res.config
        np.testing.assert_allclose(res.x, ref.x, rtol=1e-13, atol=0)
        np.testing.assert_allclose(res.gap, ref.gap, rtol=1e-11, atol=1e-15)


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_gaussian_d5_chunks_progress_and_stateful_algorithm_bit_for_bit():
    p = fa.problems.quadratics(jax.random.key(1), n=6, d=5)
    seen = []
    kw = dict(num_sampled=2, x0=p.x_star + 1.0, trial_chunk=4, mode="gather",
              algorithm=fa.algorithms.Scaffold())
    sw = fa.sweep(p, grid={"stepsize": [0.02, 0.05], "oracle.C": [0.5, 2.0]},
                  progress=lambda done, total, secs: seen.append((done, total)), **kw, **KW)
    assert seen[-1] == (4 * 12 * 2, 4 * 12 * 2)  # 4 points x T x 2 chunks
    for a in (0.02, 0.05):
        for C in (0.5, 2.0):
            assert_point(sw, {"stepsize": a, "oracle.C": C}, p, stepsize=a,
                         oracle=fa.GaussianOracle(C, float(p.oracle.D)), **kw)


def test_one_compilation_per_shape():
    p = offsets(n=9)  # shapes no other test uses
    kw = dict(local_steps=2, rounds=10, trials=3, record_every=5, x0=p.x_star + 1.0)
    with count_compilations() as one_shape:  # first: it takes the process's one-off helpers
        fa.sweep(p, grid={"stepsize": [0.01, 0.02, 0.03, 0.04]}, num_sampled=4,
                 key=jax.random.key(0), **kw)
    with count_compilations() as first:
        fa.sweep(p, grid={"stepsize": [0.01, 0.02, 0.03, 0.04], "num_sampled": [2, 3]},
                 key=jax.random.key(0), **kw)
    with count_compilations() as again:  # other values, same shapes
        fa.sweep(p, grid={"stepsize": [0.05, 0.06, 0.07, 0.08], "num_sampled": [2, 3]},
                 key=jax.random.key(1), **kw)
    assert again == []
    assert 0 < len(first) <= 2 * len(one_shape)  # two shapes: no more per point


def test_a_field_that_is_not_an_array_varies_through_its_constructor():
    """``"sampler.num_sampled"`` (a static count) on an axis of a Simulation: each point is
    the sampler rebuilt with that S, bit for bit ``simulate(num_sampled=S)``, one program
    per S; a value the constructor refuses is its one-line error, and a field the
    constructor does not take is refused."""
    p = offsets(n=7)
    sim = fa.Simulation(p, num_sampled=2, local_steps=3, rounds=12, record_every=4)
    run = dict(key=jax.random.key(0), trials=6, x0=p.x_star + 3.0)
    sw = fa.sweep(sim, grid={"sampler.num_sampled": [2, 5], "stepsize": [0.05, 0.02]}, **run)
    assert sw.axes["sampler.num_sampled"] == (2, 5)
    for S in (2, 5):
        for alpha in (0.05, 0.02):
            ref = alone(p, num_sampled=S, x0=p.x_star + 3.0, stepsize=alpha)
            got = sw.point(**{"sampler.num_sampled": S, "stepsize": alpha})
            np.testing.assert_array_equal(got.x_final, ref.x_final)
            np.testing.assert_array_equal(got.gap, ref.gap)
    run["stepsize"] = 0.05
    with pytest.raises(ValueError, match=r"grid axis 'sampler.num_sampled' value 0: "
                                         r"num_sampled \(S=0\) must be >= 1"):
        fa.sweep(sim, grid={"sampler.num_sampled": [0]}, **run)
    with pytest.raises(ValueError, match="UniformWithoutReplacement has no field 'size'"):
        fa.sweep(sim, grid={"sampler.size": [3]}, **run)


def test_invalid_grids_are_refused():
    p = offsets()
    base = dict(num_sampled=3, x0=p.x_star, **KW)
    with pytest.raises(ValueError, match="not a setting a sweep can vary"):
        fa.sweep(p, grid={"rounds": [10, 20]}, stepsize=0.1, **base)
    with pytest.raises(ValueError, match="no values"):
        fa.sweep(p, grid={"stepsize": []}, **base)
    with pytest.raises(ValueError, match="both as a grid axis"):
        fa.sweep(p, grid={"stepsize": [0.1]}, stepsize=0.1, **base)
    with pytest.raises(ValueError, match="FedAvg has no field 'nu'"):
        fa.sweep(p, grid={"algorithm.nu": [0.1]}, stepsize=0.1, **base)
    with pytest.raises(ValueError, match="finite and > 0"):
        fa.sweep(p, grid={"stepsize": [0.1, -1.0]}, **base)


SHARDED = """
import jax, numpy as np, fedjax_abc as fa
assert len(jax.devices()) == 2
p = fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)
kw = dict(local_steps=3, rounds=12, trials=21, key=jax.random.key(0), record_every=4,
          num_sampled=3, x0=p.x_star + 3.0)
sw = fa.sweep(p, grid={"stepsize": [0.01, 0.05], "mode": ["mask", "gather"]}, **kw)
same = all(fa.simulate(p, stepsize=a, mode=m, devices=jax.devices()[:1], **kw).x_final.tobytes()
           == sw.point(stepsize=a, mode=m).x_final.tobytes()
           for a in (0.01, 0.05) for m in ("mask", "gather"))
print("@@", same, sw.results[0].config["devices"])
"""


@pytest.mark.slow
def test_sweep_sharded_over_two_devices_is_bit_identical():
    import os
    import subprocess
    import sys
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")][-1]
    assert line.startswith("@@ True") and "cpu:1" in line, line


def test_point_by_class_name_or_by_the_grid_value():
    p = offsets()
    algs = [fa.algorithms.FedAvg(), fa.algorithms.FedProx(mu=0.5)]
    sw = fa.sweep(p, grid={"algorithm": algs}, stepsize=0.05, num_sampled=3, x0=p.x_star + 3.0,
                  **KW)
    prox = alone(p, algorithm=algs[1], stepsize=0.05, num_sampled=3, x0=p.x_star + 3.0)
    assert prox.equals(sw.point(algorithm="FedProx"))
    assert prox.equals(sw.point(algorithm=fa.algorithms.FedProx(mu=0.5)))
    assert sw.point(algorithm="FedAvg") is sw.results[0]
    assert sw.point(algorithm=fa.algorithms.FedAvg()) is sw.results[0]
    with pytest.raises(ValueError, match="no grid point"):
        sw.point(algorithm="Scaffold")
    with pytest.raises(ValueError, match="no grid point"):
        sw.point(algorithm=fa.algorithms.FedProx(mu=0.25))


def test_point_of_an_array_axis_asks_for_its_label():
    p = offsets()
    trials = KW["trials"]
    starts = [np.full((trials, 1), 1.0), np.linspace(0.0, 3.0, trials)[:, None]]  # per trial
    sw = fa.sweep(p, grid={"x0": starts}, stepsize=0.05, num_sampled=3, **KW)
    assert sw.axes["x0"] == ("x0[0]", "x0[1]")
    assert sw.point(x0="x0[1]") is sw.results[1]
    with pytest.raises(ValueError, match=r"grid axis 'x0': an array value is named by its "
                                         r"coordinate label; give one of \['x0\[0\]', 'x0\[1\]'\]"):
        sw.point(x0=starts[1])


def test_point_by_class_name_must_be_unique():
    first, second = object(), object()  # stand-ins: point only looks up labels
    sw = fa.SweepResult(axes={"algorithm": ("FedAvg(server_stepsize=1)",
                                            "FedAvg(server_stepsize=0.5)")},
                        results=(first, second))
    assert sw.point(algorithm=fa.algorithms.FedAvg(server_stepsize=0.5)) is second
    assert sw.point(algorithm="FedAvg(server_stepsize=1)") is first
    with pytest.raises(ValueError, match="2 values of class FedAvg"):
        sw.point(algorithm="FedAvg")


def test_laws_of_local_steps_vary_as_data():
    """Geometric(p) local steps at two p's, each point bit for bit as simulate; other p's
    compile nothing new."""
    p = offsets()
    kw = dict(KW, x0=p.x_star + 1.0, num_sampled=3)
    del kw["local_steps"]
    laws = [fa.GeometricSteps(0.5, 6), fa.GeometricSteps(0.2, 6)]
    sw = fa.sweep(p, grid={"local_steps": laws}, stepsize=0.02, **kw)
    for law, res in zip(laws, sw.results):
        assert alone(p, **dict(kw, local_steps=law, stepsize=0.02)).equals(res)
    with count_compilations() as again:
        fa.sweep(p, grid={"local_steps": [fa.GeometricSteps(0.7, 6), fa.GeometricSteps(0.1, 6)]},
                 stepsize=0.02, **kw)
    assert again == []


def test_labels_name_the_grid_values():
    p = offsets()
    algs = [fa.algorithms.FedAvg(), fa.algorithms.FedProx(mu=0.5)]
    sw = fa.sweep(p, grid={"algorithm": algs, "stepsize": [0.05, 0.1]}, num_sampled=3,
                  x0=p.x_star + 3.0, labels={"algorithm": ["plain", "prox"]}, **KW)
    assert sw.axes == {"algorithm": ("plain", "prox"), "stepsize": (0.05, 0.1)}
    prox = alone(p, algorithm=algs[1], stepsize=0.1, num_sampled=3, x0=p.x_star + 3.0)
    assert prox.equals(sw.point(algorithm="prox", stepsize=0.1))
    assert set(sw.to_dataframe()["algorithm"]) == {"plain", "prox"}
    for labels, match in [({"algorithm": ["one"]}, r"1 labels for the axis's 2 values"),
                          ({"algorithm": ["a", "a"]}, r"must all differ"),
                          ({"mode": ["a", "b"]}, r"labels must be a dict: grid axis"),
                          ({"algorithm": [None, "b"]}, r"must be strings or numbers")]:
        with pytest.raises(ValueError, match=match):
            fa.sweep(p, grid={"algorithm": algs}, stepsize=0.05, num_sampled=3,
                     x0=p.x_star + 3.0, labels=labels, **KW)
