"""``fa.use_cpu_cores``: one JAX CPU device per core, before JAX starts; refused after."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import fedjax_abc as fa
from fedjax_abc._engine._cores import usable_cores

SCRIPT = """
import fedjax_abc as fa, jax, numpy as np
jax.config.update("jax_enable_x64", True)
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


# ------------------------------------------------------- importing the package sets nothing

def _fresh(code: str, warnings: str = "always", **env) -> subprocess.CompletedProcess:
    """``code`` in a new process without the tests' JAX settings (JAX's defaults), under the
    warning filter ``warnings``."""
    import os
    environ = {k: v for k, v in os.environ.items()
               if k not in ("XLA_FLAGS", "FEDJAX_ABC_CPU_CORES", "JAX_ENABLE_X64",
                            "PYTHONWARNINGS")}
    environ.update(env)
    return subprocess.run([sys.executable, "-W", warnings, "-c", code], capture_output=True,
                          text=True, timeout=300, env=environ)


DEVICES = ("print(len(jax.devices('cpu')), 'small_while' in os.environ.get('XLA_FLAGS', ''), "
           "jax.config.jax_enable_x64)")
IMPORT = "import fedjax_abc as fa, jax, os; "


def test_the_import_changes_no_jax_setting():
    out = _fresh(IMPORT + "print(os.environ.get('XLA_FLAGS')); " + DEVICES)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "1", "False", "False"]  # JAX's defaults
    assert "Warning" not in out.stderr


@pytest.mark.skipif(usable_cores() < 2, reason="needs two usable cores")
def test_the_readme_set_up_gives_every_core_and_float64():
    out = _fresh(IMPORT + "jax.config.update('jax_enable_x64', True); fa.use_cpu_cores(); "
                 + DEVICES)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(usable_cores()), "True", "True"]


@pytest.mark.parametrize("env, code, expected", [
    ({"FEDJAX_ABC_CPU_CORES": "1"}, IMPORT + "fa.use_cpu_cores(); " + DEVICES,
     ["1", "False", "False"]),
    ({"FEDJAX_ABC_CPU_CORES": "3"}, IMPORT + "fa.use_cpu_cores(); " + DEVICES,
     ["3", "True", "False"]),
    ({"FEDJAX_ABC_CPU_CORES": "1"}, "from fedjax_abc import cli; cli._start_up(); " + IMPORT
     + DEVICES, ["1", "False", "True"]),  # the command's start-up: float64, and the choice
    ({}, IMPORT + "fa.use_cpu_cores(3); " + DEVICES, ["3", "True", "False"]),
])
def test_the_devices_are_what_use_cpu_cores_says(env, code, expected):
    out = _fresh(code, **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == expected
    assert "UserWarning" not in out.stderr


RUN = ("jax.config.update('jax_enable_x64', True); "
       "p = fa.problems.huber_offsets(jax.random.key(0), n=4); "
       "kw = dict(num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, x0=0.0, trials=3, "
       "key=jax.random.key(0)); fa.simulate(p, **kw); fa.simulate(p, **kw); ")


@pytest.mark.skipif(usable_cores() < 2, reason="needs two usable cores")
def test_one_device_of_several_cores_warns_once_and_what_to_call():
    out = _fresh(IMPORT + RUN + "fa.simulate(p, **kw); " + DEVICES, warnings="default")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("UserWarning") == 1  # three runs from two lines, one warning
    assert "call fa.use_cpu_cores() right after the imports" in out.stderr
    # a choice made, one device included, warns of nothing
    for chosen in ("fa.use_cpu_cores(1); ", "jax.config.update('jax_num_cpu_devices', 1); "):
        quiet = _fresh(IMPORT + chosen + RUN + DEVICES)
        assert quiet.returncode == 0 and "UserWarning" not in quiet.stderr, quiet.stderr


def test_float64_without_x64_is_refused_naming_the_fix():
    out = _fresh(IMPORT + "p = fa.problems.quadratics(jax.random.key(0), n=4, d=2)")
    assert out.returncode != 0
    assert ("needs JAX's 64-bit mode, which is off: call "
            "jax.config.update(\"jax_enable_x64\", True)") in out.stderr
    built = ("jax.config.update('jax_enable_x64', True); "
             "p = fa.problems.quadratics(jax.random.key(0), n=4, d=2); "
             "jax.config.update('jax_enable_x64', False); "
             "fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, x0=0.0, "
             "key=jax.random.key(0))")
    out = _fresh(IMPORT + built)
    assert out.returncode != 0
    assert "dtype='float64' (the default) needs JAX's 64-bit mode" in out.stderr


def test_a_bad_core_count_in_the_environment_is_refused():
    out = _fresh(IMPORT + "fa.use_cpu_cores()", FEDJAX_ABC_CPU_CORES="many")
    assert out.returncode != 0
    assert "FEDJAX_ABC_CPU_CORES must be an integer >= 1, got 'many'" in out.stderr


CONSTANT = ("import fedjax_abc as fa, jax; from fedjax_abc._engine._run import check_call; "
            "jax.config.update('jax_enable_x64', True); fa.use_cpu_cores(); "
            "p = fa.problems.huber_offsets(jax.random.key(0), n=4); "
            "sim = fa.Simulation(p, num_sampled=2, local_steps=3, rounds=4, mode='gather'); "
            "run = check_call(sim.components, sim.spec, stepsize=0.1, x0=0.0, "
            "key=jax.random.key(0), trials=8); "
            "print(type(run.components.problem) is not fa.Problem)")


@pytest.mark.slow  # subprocesses that import JAX
@pytest.mark.parametrize("cores, constant", [("1", "False"), ("2", "True")])
def test_the_constant_minima_follow_the_device_count(cores, constant):
    # one CPU device: loops run as calls, where the lighter step is split over the threads
    out = _fresh(CONSTANT, FEDJAX_ABC_CPU_CORES=cores)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [constant]


# ------------------------------------------------------- the command's compilation cache


def test_the_commands_compilation_cache_folder():
    from fedjax_abc.repro.common import jit_cache_folder

    home = os.path.join(os.path.expanduser("~"), ".cache", "fedjax_abc", "jit")
    assert jit_cache_folder({}) == home
    assert jit_cache_folder({"FEDJAX_ABC_JIT_CACHE": "/tmp/mine"}) == "/tmp/mine"
    assert jit_cache_folder({"FEDJAX_ABC_JIT_CACHE": "off"}) is None
    assert jit_cache_folder({"JAX_COMPILATION_CACHE_DIR": "/tmp/jax",  # JAX reads its own
                             "FEDJAX_ABC_JIT_CACHE": "/tmp/mine"}) is None


def test_the_command_keeps_its_programs_in_the_cache(tmp_path):
    code = ("from fedjax_abc import cli; cli._start_up(); import jax, fedjax_abc as fa; "
            "p = fa.problems.quadratics(jax.random.key(0), n=3, d=2); "
            "fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=3, "
            "x0=[0.0, 0.0], key=jax.random.key(0)); print(jax.config.jax_compilation_cache_dir)")
    out = _fresh(code, JAX_COMPILATION_CACHE_DIR="", FEDJAX_ABC_JIT_CACHE=str(tmp_path),
                 JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(tmp_path)
    assert any(tmp_path.iterdir())  # a compiled program was written there
