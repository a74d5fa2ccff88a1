"""Nothing silently wrong, round two (continued): a prime number of rounds in the
reproduction, a sweep too large for the memory, two runs on one checkpoint path, a full
disk, and bad arguments of the public surface, each refused in one line naming it.
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import common

KW = dict(local_steps=2, rounds=8, trials=3, key=jax.random.key(0), record_every=4)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)


# --------------------------------------------------------- prime rounds in reproduce (item 8)


@pytest.mark.parametrize("T, target, k", [
    (50000, 500, 100), (100000, 100, 1000), (10000, 500, 20),  # the paper's T: as before
    (100, 500, 1), (60, 100, 1),        # fewer rounds than records: every round
    (1009, 500, None), (1009, 100, None),  # prime: no divisor gives 20..500 records
    (2 * 5003, 500, None),              # 2p: 5003 records or 2
    (1000, 500, 2), (999, 100, 27),    # 999 = 27 * 37: 37 records >= 20
])
def test_reproduce_records_enough_points_for_any_rounds(T, target, k):
    assert common.record_every(T, target) == k


def test_reproduce_with_a_prime_number_of_rounds_draws_curves(tmp_path):
    out = tmp_path / "out"
    assert cli.main(["reproduce", "fig1", "--quick", "--trials", "2", "--rounds", "1009",
                     "--quiet", "--no-checkpoint", "--out", str(out)]) == 0
    doc = json.loads((out / "fig1.json").read_text())
    # simulate's default for T = 1009: every ceil(1009 / 1000) = 2 rounds, and T
    assert doc["rounds"] == list(range(0, 1009, 2)) + [1009]
    for S in ("1", "4", "8", "16"):
        assert len(doc["mean_gap"][S]) == 506


def test_theorem2_check_takes_the_default_records():
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)
    r = fa.theory.theorem2_check(p, L=1.0, C=1.0, D=0.0, num_sampled=2, local_steps=2,
                                 rounds=1009, trials=2, key=jax.random.key(1),
                                 record_every=None, mode="gather")
    assert r["record_every"] == 2 and r["argmin_round"] % 2 == 0


# ----------------------------------------------------------- huge sweep grids (item 9)


def _count_checks(monkeypatch, limit=5):
    """Makes sweep's point check raise once it ran ``limit`` times (the grid's size was not
    checked before its points)."""
    from fedjax_abc._engine import _sweep

    calls, real = [], _sweep._checked

    def counted(*args, **kw):
        calls.append(1)
        if len(calls) > limit:
            raise AssertionError(f"{len(calls)} grid points checked before the grid's size")
        return real(*args, **kw)

    monkeypatch.setattr(_sweep, "_checked", counted)
    return calls


def test_huge_sweep_grid_is_refused_before_its_points(problem, monkeypatch):
    from fedjax_abc._engine import _memory

    monkeypatch.setattr(_memory, "available_bytes", lambda: 10 ** 9)
    calls = _count_checks(monkeypatch)
    # 2000 x 2000 points of 3 trials, 3 records, d = 1: at least 8 kB of bookkeeping each,
    # 4e6 x 8 kB = 32 GB > 1 GB
    grid = {"stepsize": list(np.linspace(0.01, 0.1, 2000)),
            "x0": [float(problem.x_star[0]) + v for v in np.linspace(1.0, 2.0, 2000)]}
    with pytest.raises(ValueError, match=r"memory: the grid's 4,000,000 points \(2000 x 2000\) "
                                         r"need about .* GB for their results .*more than the "
                                         r"1\.0 GB available; pass fewer grid values"):
        fa.sweep(problem, grid=grid, num_sampled=2, **KW)
    assert len(calls) == 1  # the first point only


def test_sweep_whose_points_fit_but_not_all_of_them_is_refused(problem, monkeypatch):
    from fedjax_abc._engine import _memory

    monkeypatch.setattr(_memory, "available_bytes", lambda: 10 ** 9)
    _count_checks(monkeypatch)
    # one point: 2 x 8 x 2000 trials x (1001 records x (2 + d) + d) = 96.128 MB, stepsizes
    # 3 x 8 x 1000 = 24 kB, bookkeeping 8 kB: 96.16 MB < 1 GB; 100 points: 9.6 GB
    kw = dict(KW, trials=2000, rounds=1000, record_every=1)
    with pytest.raises(ValueError, match=r"the grid's 100 points \(100\) need about 9\.6 GB .*"
                                         r"\(96\.2 MB each\).*record_x=False, a larger "
                                         r"record_every \(now k=1 for T=1000\) or fewer trials "
                                         r"\(now 2000\)"):
        fa.sweep(problem, grid={"stepsize": list(np.linspace(0.01, 0.1, 100))}, num_sampled=2,
                 x0=problem.x_star + 2.0, **kw)


def test_sweep_that_fits_runs(problem, monkeypatch):
    from fedjax_abc._engine import _memory

    monkeypatch.setattr(_memory, "available_bytes", lambda: 10 ** 9)
    sw = fa.sweep(problem, grid={"stepsize": [0.05, 0.1], "local_steps": [1, 2]},
                  num_sampled=2, x0=problem.x_star + 2.0,
                  **{k: v for k, v in KW.items() if k != "local_steps"})
    assert sw.shape == (2, 2)


def test_huge_grid_file_is_refused_before_its_first_part(tmp_path, monkeypatch, capsys):
    from fedjax_abc._engine import _memory

    monkeypatch.setattr(_memory, "available_bytes", lambda: 10 ** 8)
    calls = _count_checks(monkeypatch, limit=0)
    stepsizes = ", ".join(f"{v:.6g}" for v in np.linspace(0.001, 0.01, 3000))
    (tmp_path / "g.toml").write_text(
        'name = "g"\nseed = 0\ntrials = 3\nrounds = 8\nlocal_steps = 2\nx0_offset = 2.0\n'
        '[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\nseed = 0\n'
        f'[grid]\nnum_sampled = [1, 2, 3, 4, 5, 6]\nstepsize = [{stepsizes}]\n')
    out = tmp_path / "out"
    assert cli.main(["run", str(tmp_path / "g.toml"), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    # each point: 2 x 8 x 3 trials x (9 records x 2 + 1) + 3 x 8 x 8 stepsizes + 8000
    assert ("the grid's 18,000 points (6 x 3000) need about 163.9 MB for their results "
            "(9.1 kB each), more than the 100.0 MB available" in err) and err.count("\n") == 1
    assert calls == [] and os.listdir(out / "parts") == []


# ------------------------------------------------ two runs on one checkpoint path (item 3)


def _sim(problem, stepsize, path, **kw):
    return fa.simulate(problem, num_sampled=2, stepsize=stepsize, x0=problem.x_star + 2.0,
                       checkpoint=path, **dict(KW, **kw))


def test_second_run_started_on_the_path_of_a_running_one_is_refused(problem, tmp_path):
    path, seen = tmp_path / "c.npz", []

    def start_another(done, total, secs):  # while the first run goes on, before any save
        if not seen:
            with pytest.raises(ValueError) as err:
                _sim(problem, 0.1, path)
            seen.append(str(err.value))

    first = _sim(problem, 0.05, path, progress=start_another)
    assert len(seen) == 1
    assert seen[0].startswith(f"checkpoint ({path}) was written for another run: stepsize differ")
    assert "\n" not in seen[0]
    # the first run's checkpoint is whole: the same call returns its result
    assert _sim(problem, 0.05, path).equals(first)


def test_interrupted_run_is_not_overwritten_by_other_settings(problem, tmp_path):
    path = tmp_path / "c.npz"

    def stop(done, total, secs):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _sim(problem, 0.05, path, progress=stop)
    with pytest.raises(ValueError, match=r"was written for another run: key differ; delete it"):
        _sim(problem, 0.05, path, key=jax.random.key(1))
    # the interrupted run resumes, and gives the uninterrupted run's numbers
    assert _sim(problem, 0.05, path).equals(_sim(problem, 0.05, None))


def test_save_never_replaces_another_runs_checkpoint(problem, tmp_path):
    path, other = tmp_path / "c.npz", []

    def take_over(done, total, secs):  # the file removed and another run's put there
        if not other:
            os.remove(path)
            other.append(_sim(problem, 0.1, path))

    with pytest.warns(RuntimeWarning, match=r"checkpoint \(.*c\.npz\) now holds another run's "
                                            r"\(stepsize differ\): it is kept"):
        first = _sim(problem, 0.05, path, progress=take_over)
    assert not first.equals(other[0])
    assert _sim(problem, 0.1, path).equals(other[0])  # the other run's complete file


def test_checkpoint_on_a_full_disk_is_refused_before_the_run(problem, tmp_path, monkeypatch):
    import shutil

    from fedjax_abc._engine import _checkpoint

    calls, usage = [], shutil.disk_usage(tmp_path)
    # 3 trials x (3 records x 5 values + 1): 384 bytes of results, 64 kB of headers
    monkeypatch.setattr(_checkpoint.shutil, "disk_usage",
                        lambda folder: usage._replace(free=100_000))
    with pytest.raises(OSError, match=r"checkpoint \(.*c\.npz\) cannot be written: it takes "
                                      r"about 6\d\.\d kB, twice that while a save replaces the "
                                      r"last one, and its disk has 100\.0 kB free"):
        _sim(problem, 0.05, tmp_path / "c.npz", progress=lambda *a: calls.append(a))
    assert calls == [] and os.listdir(tmp_path) == []
    monkeypatch.setattr(_checkpoint.shutil, "disk_usage",
                        lambda folder: usage._replace(free=10 ** 6))
    assert _sim(problem, 0.05, tmp_path / "c.npz").trials == 3
