"""Two processes on this machine (``jax.distributed.initialize``, CPU, gloo collectives,
the coordinator on 127.0.0.1 at a free port) give the single-process run bit for bit: with
the trials sharded over both processes' devices, and with each process running its share
by global trial index. The commands are the devices guide's (``docs/guides/devices.md``,
``examples/multiprocess.py``)."""

import os
import pathlib
import socket
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "examples" / "multiprocess.py")
SMALL = ["--trials", "20", "--rounds", "30"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _two_processes(tmp_path, args, small=SMALL):
    """Runs ``args(i)`` in processes i = 0, 1 at once; returns their outputs."""
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, SCRIPT, "--coordinator", f"127.0.0.1:{port}",
                               "--processes", "2", "--id", str(i), *args(i), *small],
                              cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append(out)
        assert p.returncode == 0, out[-2000:]
    return outs


def _run(tmp_path, *args):
    subprocess.run([sys.executable, SCRIPT, *args], cwd=tmp_path, env=_env(), check=True,
                   capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_two_processes_give_the_single_process_run_bit_for_bit(tmp_path):
    outs = _two_processes(tmp_path, lambda i: ["--shard", "--out", "sharded.nc"])
    assert "all 20 trials sharded over 2 devices" in outs[0]
    outs = _two_processes(tmp_path, lambda i: ["--out", f"share{i}.nc"])
    assert "trials 10 ... 19 on 1 local device(s) of 2" in outs[1]
    _run(tmp_path, "--join", "share0.nc", "share1.nc", "--out", "joined.nc")
    _run(tmp_path, "--single", "--out", "single.nc", *SMALL)
    _run(tmp_path, "--compare", "single.nc", "sharded.nc", "joined.nc")


@pytest.mark.slow
def test_a_call_of_few_trials_still_shards_over_both_processes(tmp_path):
    """5 trials fill one device's 8, but every process must hold a share: both devices."""
    few = ["--trials", "5", "--rounds", "30"]
    outs = _two_processes(tmp_path, lambda i: ["--shard", "--out", "sharded.nc"], few)
    assert "all 5 trials sharded over 2 devices" in outs[0]
    _run(tmp_path, "--single", "--out", "single.nc", *few)
    _run(tmp_path, "--compare", "single.nc", "sharded.nc")


def test_shares_by_first_trial_concatenate_to_the_whole_run():
    import jax
    import numpy as np

    import fedjax_abc as fa

    p = fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)
    kw = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=12, x0=p.x_star + 3.0,
              key=jax.random.key(0), record_every=4)
    whole = fa.simulate(p, trials=13, **kw)
    a = fa.simulate(p, trials=7, **kw)
    b = fa.simulate(p, trials=6, first_trial=7, **kw)
    assert b.config["first_trial"] == 7 and "first_trial" not in a.config
    assert fa.SimResult.concatenate([a, b]).equals(whole)
    with pytest.raises(ValueError, match="follow each other"):
        fa.SimResult.concatenate([b, a])
    other = fa.simulate(p, trials=6, first_trial=7, **dict(kw, stepsize=0.04))
    with pytest.raises(ValueError, match=r"other settings: \['stepsize'\]"):
        fa.SimResult.concatenate([a, other])
    with pytest.raises(ValueError, match="first_trial"):
        fa.simulate(p, trials=6, first_trial=-1, **kw)
    assert np.all(b.x_final != a.x_final[:6])


def test_shares_of_other_values_under_the_same_names_are_refused(tmp_path):
    """The config names the problem, the oracle and 'schedule', not their values: shares of
    other data (another seed), another oracle constant, another schedule of the same
    alpha_0 or another record_x were joined into one run's result before. Their settings'
    digests now differ by name, also read back from files; the same settings join, also
    with each share's own x0 (which concatenate allows)."""
    import jax
    import numpy as np

    import fedjax_abc as fa

    p = fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)
    kw = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=12, x0=p.x_star + 3.0,
              key=jax.random.key(0), record_every=4, trials=4)
    a = fa.simulate(p, **kw)
    share = dict(kw, first_trial=4)
    other = fa.problems.huber_offsets(jax.random.key(7), n=8, d_max=10.0)
    assert other.name == p.name
    schedule = np.r_[0.05, np.full(11, 0.01)]
    cases = {
        "problem": fa.simulate(other, **share),
        "oracle": fa.simulate(p, oracle=fa.GaussianOracle(C=100.0), **share),
        "stepsize": fa.simulate(p, **dict(share, stepsize=np.r_[0.05, np.full(11, 0.02)])),
        "record_x": fa.simulate(p, record_x=False, **share),
    }
    first = fa.simulate(p, **dict(kw, stepsize=schedule))
    assert first.config["stepsize"] == cases["stepsize"].config["stepsize"] == "schedule"
    for name, b in cases.items():
        head = first if name == "stepsize" else a
        with pytest.raises(ValueError, match=rf"other settings: \['{name}'\]"):
            fa.SimResult.concatenate([head, b])
    loaded = fa.load(cases["problem"].save(tmp_path / "b.nc"))
    with pytest.raises(ValueError, match=r"other settings: \['problem'\]"):
        fa.SimResult.concatenate([fa.load(a.save(tmp_path / "a.nc")), loaded])
    own_x0 = fa.simulate(p, **dict(share, x0=np.full((4, 1), 7.0)))
    assert fa.SimResult.concatenate([a, own_x0]).trials == 8
