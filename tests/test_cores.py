"""``fa.use_cpu_cores``: one JAX CPU device per core, before JAX starts; refused after."""

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
