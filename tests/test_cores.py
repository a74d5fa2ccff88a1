"""``fa.use_cpu_cores``: one JAX CPU device per core, before JAX starts; refused after."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import fedjax_abc as fa
from fedjax_abc._engine._cores import usable_cores

SCRIPT = """
import fedjax_abc as fa, jax, numpy as np
n = fa.use_cpu_cores(2)
p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
res = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, x0=1.0, trials=20,
                  key=jax.random.key(1), mode="gather")
print(n, len(jax.devices("cpu")), res.config["devices"], float(np.sum(res.gap)).hex())
"""


@pytest.mark.slow  # subprocesses that import JAX
def test_two_cpu_devices_in_a_fresh_process_same_numbers():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    assert out[:2] == ["2", "2"]
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
    one = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, x0=1.0, trials=20,
                      key=jax.random.key(1), mode="gather", devices=[jax.devices()[0]])
    assert float(one.gap.sum()).hex() == out[-1]  # sharded over 2 devices: the same bits


def test_refused_once_jax_has_run():
    jnp.ones(1).block_until_ready()
    with pytest.raises(RuntimeError, match="before any JAX computation"):
        fa.use_cpu_cores(2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_core_counts(bad):
    with pytest.raises(ValueError, match="cores must be an integer >= 1"):
        fa.use_cpu_cores(bad)


def test_usable_cores_is_positive():
    assert usable_cores() >= 1



REPLICAS = """
import json
import fedjax_abc as fa, jax
fa.use_cpu_cores(2)
from fedjax_abc._engine import _simulate
seen = []
segment = _simulate._run_first  # a run of one segment: its only program
def spy(problem, *args):
    arrays = [leaf for leaf in jax.tree_util.tree_leaves(problem) if isinstance(leaf, jax.Array)]
    seen.append(([len(a.sharding.device_set) for a in arrays], [id(a) for a in arrays]))
    return segment(problem, *args)
_simulate._run_first = spy
kw = dict(num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, x0=1.0, trials=20,
          key=jax.random.key(1), mode="gather")
small = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
gaps = [fa.simulate(small, **kw).gap.sum(), fa.simulate(small, **kw).gap.sum()]
_simulate._REPLICA_BYTES = 0  # as for components over the limit: jit copies them per call
gaps.append(fa.simulate(fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0),
                        **kw).gap.sum())
print(json.dumps(dict(devices=[s[0] for s in seen], same=seen[0][1] == seen[1][1],
                      gaps=[float(g).hex() for g in gaps])))
"""


def test_components_stay_on_both_devices_between_calls_up_to_a_size():
    out = json.loads(subprocess.run([sys.executable, "-c", REPLICAS], capture_output=True,
                                    text=True, timeout=300, check=True).stdout)
    two, again, big = out["devices"]
    assert two and set(two) == {2} and again == two  # copied to both devices once ...
    assert out["same"]  # ... and the second call got the first call's copies
    assert set(big) == {1}  # over the limit: left to jit, as before
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
    one = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, x0=1.0,
                      trials=20, key=jax.random.key(1), mode="gather",
                      devices=[jax.devices()[0]])
    assert out["gaps"] == [float(one.gap.sum()).hex()] * 3  # the same bits every way
