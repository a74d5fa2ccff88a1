"""Small loops compiled as one function on CPU devices of their own: the flag and its effect."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._engine._xla_loops import (LOOP_BYTES, cpu_vector_bits, loop_flags,
                                           set_loop_flags, vector_flags)

OPTION = "xla_cpu_small_while_loop_byte_threshold"
OPTIONS = f"{OPTION}=64,xla_cpu_disable_tiled_emitter=true"


@pytest.mark.parametrize("flags, expected", [
    ("", f"--xla_backend_extra_options={OPTIONS}"),
    ("--xla_force_host_platform_device_count=2",
     f"--xla_force_host_platform_device_count=2 --xla_backend_extra_options={OPTIONS}"),
    ("--xla_backend_extra_options=a=1 --x=2", f"--xla_backend_extra_options=a=1,{OPTIONS} --x=2"),
    ("--xla_backend_extra_options= --x=2", f"--xla_backend_extra_options={OPTIONS} --x=2"),
    (f"--xla_backend_extra_options={OPTION}=0", f"--xla_backend_extra_options={OPTION}=0"),
])
def test_loop_flags(flags, expected):
    assert loop_flags(flags, 64) == expected


def test_set_loop_flags():
    env = {"XLA_FLAGS": "--x=1"}
    set_loop_flags(env)
    assert env["XLA_FLAGS"] == loop_flags("--x=1", LOOP_BYTES)
    env = {}
    set_loop_flags(env)
    assert env["XLA_FLAGS"] == loop_flags("", LOOP_BYTES)


@pytest.mark.parametrize("flags, bits, expected", [
    ("", 512, "--xla_cpu_prefer_vector_width=512"),
    ("--x=1", 512, "--x=1 --xla_cpu_prefer_vector_width=512"),
    ("--x=1", 256, "--x=1"),
    ("--xla_cpu_prefer_vector_width=256", 512, "--xla_cpu_prefer_vector_width=256"),  # the user's
])
def test_vector_flags(flags, bits, expected):
    assert vector_flags(flags, bits) == expected


def test_cpu_vector_bits_reads_the_cpus_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw\n")
    assert cpu_vector_bits(str(info)) == 512
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512_bf16x\n")
    assert cpu_vector_bits(str(info)) == 256  # a flag that only begins with avx512
    assert cpu_vector_bits(str(tmp_path / "absent")) == 256


@pytest.mark.parametrize("bad", ["yes", 1, 0])
def test_native_loops_must_be_a_bool_or_none(bad):
    with pytest.raises(ValueError, match="native_loops must be True, False or None"):
        fa.use_cpu_cores(1, native_loops=bad)


# A loop of 8 kB per iteration: over XLA's default limit (1 kB), under the package's. Then a
# run of both modes whose bits the parent compares with its own (default XLA settings).
SCRIPT = """
import sys, fedjax_abc as fa, jax, jax.numpy as jnp, numpy as np
how = sys.argv[1]
if how in ("native", "cores"):
    fa.use_cpu_cores(1, native_loops=how == "native")
elif how == "calls2":
    fa.use_cpu_cores(2, native_loops=False)
elif how.startswith("default"):  # default1, default2: native loops on more than one device
    fa.use_cpu_cores(int(how[-1]))
f = jax.jit(lambda x: jax.lax.scan(lambda c, _: (jnp.sqrt(c) + 1.0, None), x, None, 100)[0])
print("native" if "xla_cpu_small_call" in f.lower(jnp.ones(1000)).compile().as_text() else "calls")

def steps(a, idx, x):  # a gathered (4, 1000, 1) loop invariant, as gather mode's client data
    off = jax.vmap(jax.vmap(lambda i: a[i]))(idx)
    y = jnp.broadcast_to(x, (4,) + x.shape)
    return jax.lax.fori_loop(0, 10, lambda l, y: y - 0.1 * jnp.sqrt(jnp.abs(y - off)), y)
hlo = jax.jit(steps).lower(jnp.ones((40, 1)), jnp.zeros((4, 1000), jnp.int32),
                           jnp.ones((1000, 1))).compile().as_text()
print("copied" if "wrapped_copy" in hlo else "in-place")
p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
for mode in ("mask", "gather"):
    for dtype in ("float64", "float32"):
        res = fa.simulate(p, num_sampled=2, local_steps=3, stepsize=0.1, rounds=5, x0=1.0,
                          trials=21, key=jax.random.key(1), mode=mode, generator="splitmix",
                          dtype=dtype)
        print(float(np.sum(res.gap)).hex())
"""


def _script(code, *args, flags=None) -> list:
    """The words a fresh process running ``code`` prints, with ``XLA_FLAGS`` = ``flags``
    (None: unset, the package's own settings)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if flags is not None:
        env["XLA_FLAGS"] = flags
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, check=True, env=env).stdout.split()


@pytest.fixture(scope="module")
def here():
    """This process's bits of the script's four runs (the package's XLA settings)."""
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
    return [float(np.sum(fa.simulate(p, num_sampled=2, local_steps=3, stepsize=0.1, rounds=5,
                                     x0=1.0, trials=21, key=jax.random.key(1), mode=mode,
                                     generator="splitmix", dtype=dtype).gap)).hex()
            for mode in ("mask", "gather") for dtype in ("float64", "float32")]


@pytest.mark.parametrize("how, expected", [
    ("native", "native"), ("cores", "calls"),
    # a plain import sets nothing: JAX's one CPU device, loops as calls
    ("plain", "calls"), ("default2", "native"),
    ("default1", "calls"), ("calls2", "calls")])
def test_native_loops_compiled_as_one_function_same_numbers(how, expected, here):
    out = _script(SCRIPT, how)
    assert out[0] == expected
    if expected == "native":  # the layout copy of a gathered loop invariant is a bitcast
        assert out[1] == "in-place"
    assert out[2:] == here


# the theorem checks' d > 1 problem (fedjax_abc.repro.paper.QUAD): S = n in mask mode
QUAD = """
import os, fedjax_abc as fa, jax, numpy as np
fa.use_cpu_cores()  # the README's set-up: on a CPU with AVX-512, 512-bit vectors
print("wide" if "--xla_cpu_prefer_vector_width=512" in os.environ.get("XLA_FLAGS", "") else "256")
p = fa.problems.quadratics(jax.random.key(0), n=16, d=10, C=1.0, D=0.1)
for S, mode in ((16, "mask"), (4, "gather")):
    res = fa.simulate(p, num_sampled=S, local_steps=5, stepsize=1e-2, rounds=40, trials=21,
                      x0=np.asarray(p.x_star) + 1.0, key=jax.random.key(3), mode=mode)
    print(res.x_final.tobytes().hex()[:4000], float(np.sum(res.gap)).hex())
"""


@pytest.mark.slow  # over 10 s: with the long checks
def test_the_vector_width_changes_no_bit(here):
    """This process runs with the package's width (512 bits on a CPU with AVX-512), the
    scripts with XLA's default of 256 bits: the same numbers on problem (27) and on the
    theorem checks' quadratics."""
    if cpu_vector_bits() != 512:
        pytest.skip("needs a CPU with AVX-512 (both widths are 256 bits elsewhere)")
    assert "--xla_cpu_prefer_vector_width=512" in os.environ.get("XLA_FLAGS", "")
    narrow = "--xla_cpu_prefer_vector_width=256"
    assert _script(SCRIPT, "plain", flags=narrow)[2:] == here
    out, mine = _script(QUAD, flags=narrow), _script(QUAD)
    assert out[0] == "256" and mine[0] == "wide"
    assert out[1:] == mine[1:] and len(out) == 5
