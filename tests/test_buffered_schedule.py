"""The Buffered schedule (FedBuff, FedAsync) through the one driver of every schedule:
checkpoints resume bit for bit, trials sharded over two devices give one device's bits,
a sweep over a clock law is one program and one over the buffer one per shape, and the
staleness record is a vector a record that the tables and files carry."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from conftest import count_backend_compilations

D = 2


@pytest.fixture(scope="module")
def problem():
    return fa.problems.quadratics(jax.random.key(0), n=12, d=D)


def schedule(buffer=2, mean=1.0, concurrency=4):
    return fa.timing.Buffered(fa.timing.FedBuff(buffer),
                              fa.timing.Clock(fa.timing.Exponential(mean)), concurrency)


KW = dict(local_steps=2, stepsize=0.2, x0=jnp.ones(D), key=jax.random.key(3))


def test_checkpoint_resumes_bit_for_bit(problem, tmp_path):
    kw = dict(KW, rounds=40, record_every=2, trials=6, trial_chunk=3, schedule=schedule())
    straight = fa.simulate(problem, **kw)
    calls = []

    def stop(done, total, secs):
        calls.append(done)
        if len(calls) == 4:
            raise KeyboardInterrupt

    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **kw, checkpoint=path, progress=stop)
    resumed = fa.simulate(problem, **kw, checkpoint=path)
    assert resumed.equals(straight)
    assert np.all(straight.metrics["staleness"][:, -1].sum(-1) == 2 * 40)  # K a step


def test_first_trial_and_trial_counts(problem):
    kw = dict(KW, rounds=20, schedule=schedule())
    whole = fa.simulate(problem, **kw, trials=7)
    tail = fa.simulate(problem, **kw, trials=3, first_trial=4)
    np.testing.assert_array_equal(tail.gap, whole.gap[4:])
    np.testing.assert_array_equal(tail.metrics["staleness"], whole.metrics["staleness"][4:])
    np.testing.assert_array_equal(tail.metrics["time"], whole.metrics["time"][4:])


TWO_DEVICES = """
import fedjax_abc as fa, jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
fa.use_cpu_cores(2)
p = fa.problems.quadratics(jax.random.key(0), n=12, d=2)
s = fa.timing.Buffered(fa.timing.FedBuff(2), fa.timing.Clock(fa.timing.Exponential(1.0)), 4)
res = fa.simulate(p, local_steps=2, stepsize=0.2, x0=jnp.ones(2), key=jax.random.key(3),
                  rounds=20, trials=16, schedule=s)
print(len(jax.devices("cpu")), res.gap.tobytes().hex()[:4000] == "" or
      float(np.sum(res.gap)).hex(), float(np.sum(res.metrics["time"])).hex())
"""


@pytest.mark.slow  # a subprocess that imports JAX
def test_two_devices_give_one_devices_bits(problem):
    out = subprocess.run([sys.executable, "-c", TWO_DEVICES], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    one = fa.simulate(problem, **KW, rounds=20, trials=16, schedule=schedule(),
                      devices=[jax.devices()[0]])
    assert out[0] == "2"
    assert out[1:] == [float(np.sum(one.gap)).hex(), float(np.sum(one.metrics["time"])).hex()]


def test_a_sweep_over_a_law_is_one_program_and_over_the_buffer_one_per_shape(problem):
    sim = fa.Simulation(problem, local_steps=2, rounds=10, record_every=5, schedule=schedule())
    call = dict(key=jax.random.key(3), x0=jnp.ones(D), stepsize=0.2, trials=3)
    fa.sweep(sim, grid={"schedule.clock.compute.mean": [0.7, 1.5, 3.0]}, **call)
    with count_backend_compilations() as events:
        laws = fa.sweep(sim, grid={"schedule.clock.compute.mean": [0.5, 1.0, 2.0]}, **call)
    assert events == []  # other laws of the same shape: the program above
    own = fa.simulate(problem, **dict(KW, stepsize=0.2), rounds=10, record_every=5, trials=3,
                      schedule=schedule(mean=2.0))
    np.testing.assert_array_equal(laws.gap[2], own.gap)
    np.testing.assert_array_equal(laws.metrics["time"][2], own.metrics["time"])
    buffers = fa.sweep(sim, grid={"schedule": [schedule(1), schedule(2), schedule(3)]}, **call)
    np.testing.assert_array_equal(buffers.gap[1], laws.gap[1])
    with count_backend_compilations() as events:  # each buffer a shape: its programs again
        again = fa.sweep(sim, grid={"schedule": [schedule(1, 3.0), schedule(2, 3.0),
                                                 schedule(3, 3.0)]}, **call)
    assert events == []
    np.testing.assert_allclose(again.metrics["time"], 3.0 * buffers.metrics["time"], rtol=1e-12)


def test_the_staleness_record_in_tables_and_files(problem, tmp_path):
    res = fa.simulate(problem, **KW, rounds=10, record_every=5, trials=2,
                      schedule=schedule(concurrency=3))
    counts = res.metrics["staleness"]
    assert counts.shape == (2, 3, 13) and counts.dtype == np.int32
    frame = res.to_dataframe()
    np.testing.assert_array_equal(frame["staleness_0"].to_numpy(), counts[..., 0].ravel())
    assert res.to_xarray()["staleness"].dims == ("trial", "round", "staleness_bin")
    assert fa.load(res.save(tmp_path / "r.nc")).equals(res)
    summary = res.to_dataframe(summary=True)
    assert "staleness_12" in set(summary["quantity"])


def test_bad_settings_one_line(problem):
    with pytest.raises(ValueError, match="leave num_sampled and sampler out"):
        fa.simulate(problem, **KW, rounds=4, num_sampled=3, schedule=schedule())
    with pytest.raises(ValueError, match=r"concurrency \(C=20\) must be at most"):
        fa.simulate(problem, **KW, rounds=4, schedule=schedule(concurrency=20))
    with pytest.raises(ValueError, match="larger than the clients in flight"):
        schedule(buffer=5, concurrency=4)
    with pytest.raises(ValueError, match="keeps client states"):
        fa.simulate(problem, **KW, rounds=4, schedule=schedule(),
                    algorithm=fa.algorithms.Scaffold())
