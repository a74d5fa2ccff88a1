"""Small loops compiled as one function on CPU devices of their own: the flag and its effect."""

import os
import subprocess
import sys

import pytest

from fedjax_abc._engine._xla_loops import LOOP_BYTES, OPT_OUT, loop_flags, set_loop_flags

OPTION = "xla_cpu_small_while_loop_byte_threshold"


@pytest.mark.parametrize("flags, expected", [
    ("", f"--xla_backend_extra_options={OPTION}=64"),
    ("--xla_force_host_platform_device_count=2",
     f"--xla_force_host_platform_device_count=2 --xla_backend_extra_options={OPTION}=64"),
    ("--xla_backend_extra_options=a=1 --x=2", f"--xla_backend_extra_options=a=1,{OPTION}=64 --x=2"),
    ("--xla_backend_extra_options= --x=2", f"--xla_backend_extra_options={OPTION}=64 --x=2"),
    (f"--xla_backend_extra_options={OPTION}=0", f"--xla_backend_extra_options={OPTION}=0"),
])
def test_loop_flags(flags, expected):
    assert loop_flags(flags, 64) == expected


def test_set_and_opt_out():
    env = {"XLA_FLAGS": "--x=1"}
    assert set_loop_flags(env) and env["XLA_FLAGS"] == loop_flags("--x=1", LOOP_BYTES)
    env = {"XLA_FLAGS": "--x=1", OPT_OUT: "0"}
    assert not set_loop_flags(env) and env["XLA_FLAGS"] == "--x=1"


# A loop of 8 kB per iteration: over XLA's default limit (1 kB), under the package's. Then a
# run of both modes whose bits the parent compares with its own (default XLA settings).
SCRIPT = """
import sys, fedjax_abc as fa, jax, jax.numpy as jnp, numpy as np
if sys.argv[1] == "cores":
    fa.use_cpu_cores(1)
f = jax.jit(lambda x: jax.lax.scan(lambda c, _: (jnp.sqrt(c) + 1.0, None), x, None, 100)[0])
print("native" if "xla_cpu_small_call" in f.lower(jnp.ones(1000)).compile().as_text() else "calls")
p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
for mode in ("mask", "gather"):
    res = fa.simulate(p, num_sampled=2, local_steps=3, stepsize=0.1, rounds=5, x0=1.0, trials=9,
                      key=jax.random.key(1), mode=mode, generator="splitmix")
    print(float(np.sum(res.gap)).hex())
"""


@pytest.mark.parametrize("how, opt_out, expected", [
    ("cores", "1", "native"), ("cores", "0", "calls"), ("plain", "1", "calls")])
def test_use_cpu_cores_makes_small_loops_native_same_numbers(how, opt_out, expected):
    import fedjax_abc as fa
    import jax
    import numpy as np

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env[OPT_OUT] = opt_out
    out = subprocess.run([sys.executable, "-c", SCRIPT, how], capture_output=True, text=True,
                         timeout=300, check=True, env=env).stdout.split()
    assert out[0] == expected
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
    for mode, bits in zip(("mask", "gather"), out[1:]):
        res = fa.simulate(p, num_sampled=2, local_steps=3, stepsize=0.1, rounds=5, x0=1.0,
                          trials=9, key=jax.random.key(1), mode=mode, generator="splitmix")
        assert float(np.sum(res.gap)).hex() == bits
