"""Run sizes: absurd ones fail at once, runs that cannot fit are refused before any work with
what to change, and every T gets a useful number of records by default.

Sweep grids (and grid files) too large for the memory are refused from their first point;
the reproduction records enough points for any number of rounds.
"""

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
import fedjax_abc._engine._memory as _memory
from fedjax_abc import cli
from fedjax_abc._engine._plan import default_record_every, recorded_rounds
from fedjax_abc.repro import common
from small_run import SETTINGS as KW, small_problem

KEY = jax.random.key(0)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(KEY, n=8, d_max=10.0)


def kwargs(p, **kw):
    base = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=12, x0=p.x_star + 1.0,
                trials=4, key=KEY)
    base.update(kw)
    return base


def no_work(kw: dict) -> list:
    """``kw`` with a progress callback that hears of every segment the run computes; the
    list it fills (empty where the run was refused before any work)."""
    ran = []
    kw["progress"] = lambda *a: ran.append(a)
    return ran


@pytest.mark.parametrize("change,names", [
    (dict(rounds=10 ** 12), ("rounds", "T=1000000000000")),
    (dict(rounds=10 ** 12, record_every=1), ("T=1000000000000",)),
    (dict(trials=10 ** 9), ("trials", "1000000000")),
    (dict(trials=10 ** 9, trial_chunk=1000), ("trials",)),
])
def test_absurd_sizes_fail_at_once(problem, change, names):
    kw = kwargs(problem, **change)
    ran = no_work(kw)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^memory: the run needs about [\d.]+ [kMGTPE]?B") as err:
        fa.simulate(problem, **kw)
    assert time.perf_counter() - start < 1.0 and ran == []
    message = str(err.value)
    assert "\n" not in message and "available" in message
    for name in names:
        assert name in message


@pytest.mark.parametrize("change", [dict(trials=10 ** 12), dict(trials=10 ** 12, trial_chunk=1000)])
def test_trial_counts_beyond_int32_fail_at_once(problem, change):
    """Trial indices are int32: 10^12 trials is refused before the memory estimate."""
    kw = kwargs(problem, **change)
    ran = no_work(kw)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"first_trial \+ trials \(1000000000000\) must be below 2\^31"):
        fa.simulate(problem, **kw)
    assert time.perf_counter() - start < 1.0 and ran == []


def test_results_too_large_names_record_x(problem, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(200 * 10 ** 6))
    kw = kwargs(problem, rounds=100_000, record_every=1, trials=100, record_x=True)
    ran = no_work(kw)
    # results: 2 copies x 8 bytes x 100 trials x 100001 records x (2 + d = 3) = 480 MB
    with pytest.raises(ValueError, match=r"record_x=False.*larger record_every.*fewer trials"):
        fa.simulate(problem, **kw)
    with pytest.raises(ValueError, match=r"about 3\d\d\.\d MB.*pass a larger record_every") as err:
        fa.simulate(problem, **dict(kw, record_x=False))
    assert "record_x" not in str(err.value) and ran == []


def test_a_memory_share_that_is_not_a_number_is_refused(problem, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", "2GB")
    with pytest.raises(ValueError, match=r"^FEDJAX_ABC_MEMORY_BYTES must be a number of bytes"):
        fa.simulate(problem, **kwargs(problem))


def test_working_set_too_large_names_trial_chunk(monkeypatch):
    """Mask mode, 40 clients x Q = 100 steps x d = 50 for 4096 trials: ~7 GB per round."""
    p = fa.problems.quadratics(KEY, n=40, d=50)
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 9))
    kw = dict(num_sampled=4, local_steps=100, stepsize=0.01, rounds=10, x0=np.zeros(50),
              trials=4096, key=KEY, record_x=False, mode="mask")
    with pytest.raises(ValueError, match=r"working set [\d.]+ GB.*smaller trial_chunk \(now 4096"):
        fa.simulate(p, **kw)
    assert _memory.estimate(**_estimate_args(trials=4096, per_call=4096)).call == \
        8 * _memory.estimate(**_estimate_args(trials=4096, per_call=512)).call


def _estimate_args(**kw):
    base = dict(trials=8, records=11, dim=50, itemsize=8, record_x=False, rounds=10, per_call=8,
                call_records=2, participants=40, local_steps=100, noise_words=5000,
                server_bytes=400, client_bytes=0, num_clients=40)
    base.update(kw)
    return base


def test_estimate_counts():
    e = _memory.estimate(**_estimate_args(record_x=True, client_bytes=400))
    assert e.results == 2 * 8 * 8 * (11 * (2 + 50) + 50)
    assert e.stepsizes == 3 * 8 * 10
    assert e.states == 2 * 8 * (400 + 40 * 400)
    assert e.call == 8 * 2 * 52 * 8 + 40 * 8 * (100 * 50 * 8 + 4 * 5000 + 6 * 50 * 8)
    assert e.host == e.results + e.stepsizes + e.states + e.call
    assert _memory.format_bytes(2.5e9) == "2.5 GB" and _memory.format_bytes(12) == "12 B"


def test_available_memory_is_read():
    available = _memory.available_bytes()
    assert available is None or available > 10 ** 6


def test_a_run_that_fits_runs(problem, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(200 * 10 ** 6))
    res = fa.simulate(problem, **kwargs(problem, rounds=1000, trials=8))
    assert res.gap.shape == (8, 1001)


# --------------------------------------------------------------------------- records


def _old_default(T):
    """The earlier rule: the smallest divisor k of T with T / k <= 1000."""
    return next(k for k in range(1, T + 1) if T % k == 0 and T // k <= 1000)


def test_default_records_for_a_prime_number_of_rounds():
    assert _old_default(10007) == 10007  # it gave 2 records
    k = default_record_every(10007)
    t = recorded_rounds(10007, k)
    assert 500 <= len(t) <= 1001 and t[0] == 0 and t[-1] == 10007
    assert np.all(np.diff(t)[:-1] == k) and 0 < t[-1] - t[-2] < k


def test_default_is_unchanged_where_it_was_useful():
    for T in list(range(1, 5001)) + [10_000, 20_000, 50_000, 100_000, 1_000_000]:
        old = _old_default(T)
        if T // old >= 100:
            assert default_record_every(T) == old, T
        t = recorded_rounds(T, default_record_every(T))
        assert t[-1] == T and len(t) <= 1001 and (len(t) >= 101 or len(t) == T + 1)


def test_default_is_fast_for_huge_T():
    start = time.perf_counter()
    k = default_record_every(10 ** 10 + 19)
    assert time.perf_counter() - start < 1.0 and -(-(10 ** 10 + 19) // k) <= 1000


def test_shorter_last_interval_gives_the_same_numbers(problem):
    """T = 1009 (prime): records every 2 rounds and at T, equal to a run recording every round."""
    kw = kwargs(problem, rounds=1009, trials=3)
    res = fa.simulate(problem, **kw)
    assert res.rounds.tolist() == list(range(0, 1009, 2)) + [1009]
    every = fa.simulate(problem, **kw, record_every=1)
    for name in ("gap", "grad_norm_sq", "x"):
        np.testing.assert_array_equal(getattr(res, name), getattr(every, name)[:, res.rounds])
    np.testing.assert_array_equal(res.x_final, every.x_final)
    with_progress = fa.simulate(problem, **kw, progress=lambda *a: None)
    np.testing.assert_array_equal(with_progress.gap, res.gap)


def test_explicit_record_every_must_still_divide(problem):
    with pytest.raises(ValueError, match=r"record_every \(4\) must divide rounds \(T=1009\).*None"):
        fa.simulate(problem, **kwargs(problem, rounds=1009, record_every=4))


def test_records_are_counted_as_recorded():
    from fedjax_abc._engine._plan import num_records, recorded_rounds
    for T in range(1, 40):
        for k in range(1, T + 1):
            assert num_records(T, k) == len(recorded_rounds(T, k)), (T, k)


_PEAK_SCRIPT = """
import sys
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import fedjax_abc as fa
fa.use_cpu_cores()


def high_water():  # the process's peak resident memory since the last reset, bytes
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))


p = fa.problems.quadratics(jax.random.key(0), n=10, d=20)
fa.simulate(p, num_sampled=2, local_steps=1, stepsize=0.01, rounds=20, x0=np.zeros(20),
            trials=4, key=jax.random.key(1), record_every=1, mode="gather", record_x=True)
with open("/proc/self/status") as f:
    now = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
with open("/proc/self/clear_refs", "w") as f:  # the peak restarts from the memory in use
    f.write("5")
fa.simulate(p, num_sampled=2, local_steps=1, stepsize=0.01, rounds=1000, x0=np.zeros(20),
            trials=500, key=jax.random.key(1), record_every=1, mode="gather",
            record_x=sys.argv[1] == "x")
print(high_water() - now)
"""


@pytest.mark.slow  # over 10 s: with the long checks
def test_the_check_counts_what_recorded_iterates_cost_the_host():
    """x_t of 500 trials x 1001 records x d = 20 (80 MB), sharded over the cores, raise the
    process's peak by no more than the estimate's results (the records twice: a copy and
    the joined arrays); while the device's copies stayed alive to the end, three copies
    were (240 MB)."""
    import subprocess
    import sys

    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak memory")

    def peak(arg):
        out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, arg], capture_output=True,
                             text=True, check=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
        return int(out.stdout.split()[-1])

    x_bytes = 500 * 1001 * 20 * 8
    est = _memory.estimate(trials=500, records=1001, dim=20, itemsize=8, record_x=True,
                           rounds=1000)
    extra = peak("x") - peak("no")
    assert extra > x_bytes  # the measurement sees the records at all
    assert extra <= 2 * x_bytes + 32e6 <= est.results + 32e6, (extra, est.results)  # 3x: 240e6


# ----------------------------------- records of the reproduction for any number of rounds


@pytest.mark.parametrize("T, target, k", [
    (50000, 500, 100), (100000, 100, 1000), (10000, 500, 20),  # the paper's T: as before
    (100, 500, 1), (60, 100, 1),        # fewer rounds than records: every round
    (1009, 500, None), (1009, 100, None),  # prime: no divisor gives 20..500 records
    (2 * 5003, 500, None),              # 2p: 5003 records or 2
    (1000, 500, 2), (999, 100, 27),    # 999 = 27 * 37: 37 records >= 20
])
def test_reproduce_records_enough_points_for_any_rounds(T, target, k):
    assert common.record_every(T, target) == k


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_reproduce_with_a_prime_number_of_rounds_draws_curves(tmp_path):
    out = tmp_path / "out"
    assert cli.main(["reproduce", "fig1", "--quick", "--trials", "2", "--rounds", "1009",
                     "--quiet", "--no-checkpoint", "--out", str(out)]) == 0
    doc = json.loads((out / "fig1.json").read_text())
    # simulate's default for T = 1009: every ceil(1009 / 1000) = 2 rounds, and T
    assert doc["rounds"] == list(range(0, 1009, 2)) + [1009]
    for S in ("1", "4", "8", "16"):
        assert len(doc["mean_gap"][S]) == 506


# --------------------------------------------------- sweep grids too large for the memory


@pytest.fixture(scope="module")
def problem6():
    return small_problem()


def _counted_schedules(values, calls: list) -> list:
    """Stepsize schedules t -> value, each appending to ``calls`` when a grid point's check
    evaluates it (once per point checked)."""
    def schedule(value):
        return lambda t: (calls.append(value), jnp.full(jnp.shape(t), value))[1]

    return [schedule(float(v)) for v in values]


def test_huge_sweep_grid_is_refused_before_its_points(problem6, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 9))
    calls = []
    # 2000 x 2000 points of 3 trials, 3 records, d = 1: at least 8 kB of bookkeeping each,
    # 4e6 x 8 kB = 32 GB > 1 GB
    grid = {"stepsize": _counted_schedules(np.linspace(0.01, 0.1, 2000), calls),
            "x0": [float(problem6.x_star[0]) + v for v in np.linspace(1.0, 2.0, 2000)]}
    with pytest.raises(ValueError, match=r"memory: the grid's 4,000,000 points \(2000 x 2000\) "
                                         r"need about .* GB for their results .*more than the "
                                         r"1\.0 GB available; pass fewer grid values"):
        fa.sweep(problem6, grid=grid, num_sampled=2, **KW)
    assert len(calls) == 1  # the first point only


def test_sweep_whose_points_fit_but_not_all_of_them_is_refused(problem6, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 9))
    calls = []
    # one point: 2 x 8 x 2000 trials x (1001 records x (2 + d) + d) = 96.128 MB, stepsizes
    # 3 x 8 x 1000 = 24 kB, bookkeeping 8 kB: 96.16 MB < 1 GB; 100 points: 9.6 GB
    kw = dict(KW, trials=2000, rounds=1000, record_every=1)
    with pytest.raises(ValueError, match=r"the grid's 100 points \(100\) need about 9\.6 GB .*"
                                         r"\(96\.2 MB each\).*record_x=False, a larger "
                                         r"record_every \(now k=1 for T=1000\) or fewer trials "
                                         r"\(now 2000\)"):
        fa.sweep(problem6, grid={"stepsize": _counted_schedules(np.linspace(0.01, 0.1, 100),
                                                               calls)},
                 num_sampled=2, x0=problem6.x_star + 2.0, **kw)
    assert len(calls) == 1  # the first point only


def test_sweep_that_fits_runs(problem6, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 9))
    sw = fa.sweep(problem6, grid={"stepsize": [0.05, 0.1], "local_steps": [1, 2]},
                  num_sampled=2, x0=problem6.x_star + 2.0,
                  **{k: v for k, v in KW.items() if k != "local_steps"})
    assert sw.shape == (2, 2)


def test_huge_grid_file_is_refused_before_its_first_part(tmp_path, monkeypatch, capsys):
    """Refused from the first point's size: checking the 18,000 points (a millisecond or
    more each) would take far longer than the call does."""
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 8))
    stepsizes = ", ".join(f"{v:.6g}" for v in np.linspace(0.001, 0.01, 3000))
    (tmp_path / "g.toml").write_text(
        'name = "g"\nseed = 0\ntrials = 3\nrounds = 8\nlocal_steps = 2\nx0_offset = 2.0\n'
        '[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\nseed = 0\n'
        f'[grid]\nnum_sampled = [1, 2, 3, 4, 5, 6]\nstepsize = [{stepsizes}]\n')
    out = tmp_path / "out"
    start = time.perf_counter()
    assert cli.main(["run", str(tmp_path / "g.toml"), "--out", str(out), "--quiet"]) == 1
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    # each point: 2 x 8 x 3 trials x (9 records x 2 + 1) + 3 x 8 x 8 stepsizes + 8000
    assert ("the grid's 18,000 points (6 x 3000) need about 163.9 MB for their results "
            "(9.1 kB each), more than the 100.0 MB available" in err) and err.count("\n") == 1
    assert seconds < 5.0 and os.listdir(out / "parts") == []
