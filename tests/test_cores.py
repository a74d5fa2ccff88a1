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
        fa.use_cpu_cores(len(jax.devices("cpu")) + 1)  # another count than the running one


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
small = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
sim = fa.Simulation(small, num_sampled=2, local_steps=2, rounds=4, mode="gather",
                    devices=jax.devices())
# a progress meter cuts the run into several calls: the components are copied to both
# devices once for them all
kw = dict(x0=1.0, trials=20, key=jax.random.key(1), stepsize=0.1, progress=lambda *a: None)
results = [sim.run(**kw), sim.run(**kw)]
print(json.dumps(dict(devices=[len(r.config["devices"]) for r in results],
                      gaps=[float(r.gap.sum()).hex() for r in results])))
"""


def test_a_simulation_over_both_devices_has_one_devices_bits():
    out = json.loads(subprocess.run([sys.executable, "-c", REPLICAS], capture_output=True,
                                    text=True, timeout=300, check=True).stdout)
    assert out["devices"] == [2, 2]
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
    one = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, x0=1.0,
                      trials=20, key=jax.random.key(1), mode="gather",
                      devices=[jax.devices()[0]])
    assert out["gaps"] == [float(one.gap.sum()).hex()] * 2  # the same bits every way


# ------------------------------------------------------------ every core by default

def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    import os
    environ = {k: v for k, v in os.environ.items()
               if k not in ("XLA_FLAGS", "FEDJAX_ABC_CPU_CORES")}
    environ.update(env)
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                          text=True, timeout=300, env=environ)


DEVICES = ("import fedjax_abc as fa, jax, os; "
           "print(len(jax.devices('cpu')), 'small_while' in os.environ.get('XLA_FLAGS', ''))")


@pytest.mark.skipif(usable_cores() < 2, reason="needs two usable cores")
def test_import_makes_every_core_a_device_with_native_loops():
    out = _fresh(DEVICES)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(usable_cores()), "True"]
    assert "UserWarning" not in out.stderr


@pytest.mark.parametrize("env, code, expected", [
    ({"FEDJAX_ABC_CPU_CORES": "1"}, DEVICES, ["1", "False"]),
    ({"FEDJAX_ABC_CPU_CORES": "3"}, DEVICES, ["3", "True"]),
    ({"FEDJAX_ABC_CPU_CORES": "1"}, "from fedjax_abc import cli; cli._start_up(); " + DEVICES,
     ["1", "False"]),  # the command's start-up keeps the choice
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=3"}, DEVICES, ["3", "False"]),
    ({}, "import jax; jax.config.update('jax_num_cpu_devices', 3); " + DEVICES, ["3", "False"]),
    ({}, "import fedjax_abc as fa, jax, os; fa.use_cpu_cores(1); "
         "print(len(jax.devices('cpu')), 'small_while' in os.environ.get('XLA_FLAGS', ''))",
     ["1", "False"]),
])
def test_a_users_choice_of_devices_is_kept(env, code, expected):
    out = _fresh(code, **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == expected
    assert "UserWarning" not in out.stderr


@pytest.mark.skipif(usable_cores() < 2, reason="needs two usable cores")
def test_one_warning_when_jax_ran_before_the_import():
    out = _fresh("import jax; jax.numpy.zeros(1).block_until_ready(); " + DEVICES)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "False"]
    assert out.stderr.count("UserWarning") == 1
    assert "before any JAX computation" in out.stderr


def test_a_bad_core_count_in_the_environment_is_refused():
    out = _fresh("import fedjax_abc", FEDJAX_ABC_CPU_CORES="many")
    assert out.returncode != 0
    assert "FEDJAX_ABC_CPU_CORES must be an integer >= 1, got 'many'" in out.stderr


CONSTANT = ("import fedjax_abc as fa, jax; from fedjax_abc._engine._run import checked; "
            "p = fa.problems.huber_offsets(jax.random.key(0), n=4); "
            "run = checked(p, 2, 3, 0.1, 4, 0.0, 8, jax.random.key(0), None, 'gather', None, "
            "None, None, 'float64', None, True, None); print(type(run.problem) is not fa.Problem)")


@pytest.mark.slow  # subprocesses that import JAX
@pytest.mark.parametrize("cores, constant", [("1", "False"), ("2", "True")])
def test_the_constant_minima_follow_the_device_count(cores, constant):
    # one CPU device: loops run as calls, where the lighter step is split over the threads
    out = _fresh(CONSTANT, FEDJAX_ABC_CPU_CORES=cores)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [constant]
