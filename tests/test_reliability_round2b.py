"""Nothing silently wrong, round two (continued): a prime number of rounds in the
reproduction, a sweep too large for the memory, two runs on one checkpoint path, a full
disk, and bad arguments of the public surface, each refused in one line naming it.
"""

import json
import os
import time

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


def test_theorem2_check_takes_the_default_records():
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)
    r = fa.theory.theorem2_check(p, L=1.0, C=1.0, D=0.0, num_sampled=2, local_steps=2,
                                 rounds=1009, trials=2, key=jax.random.key(1),
                                 record_every=None, mode="gather")
    assert r["record_every"] == 2 and r["argmin_round"] % 2 == 0


# ----------------------------------------------------------- huge sweep grids (item 9)


def _counted_schedules(values, calls: list) -> list:
    """Stepsize schedules t -> value, each appending to ``calls`` when a grid point's check
    evaluates it (once per point checked)."""
    def schedule(value):
        return lambda t: (calls.append(value), jnp.full(jnp.shape(t), value))[1]

    return [schedule(float(v)) for v in values]


def test_huge_sweep_grid_is_refused_before_its_points(problem, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 9))
    calls = []
    # 2000 x 2000 points of 3 trials, 3 records, d = 1: at least 8 kB of bookkeeping each,
    # 4e6 x 8 kB = 32 GB > 1 GB
    grid = {"stepsize": _counted_schedules(np.linspace(0.01, 0.1, 2000), calls),
            "x0": [float(problem.x_star[0]) + v for v in np.linspace(1.0, 2.0, 2000)]}
    with pytest.raises(ValueError, match=r"memory: the grid's 4,000,000 points \(2000 x 2000\) "
                                         r"need about .* GB for their results .*more than the "
                                         r"1\.0 GB available; pass fewer grid values"):
        fa.sweep(problem, grid=grid, num_sampled=2, **KW)
    assert len(calls) == 1  # the first point only


def test_sweep_whose_points_fit_but_not_all_of_them_is_refused(problem, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 9))
    calls = []
    # one point: 2 x 8 x 2000 trials x (1001 records x (2 + d) + d) = 96.128 MB, stepsizes
    # 3 x 8 x 1000 = 24 kB, bookkeeping 8 kB: 96.16 MB < 1 GB; 100 points: 9.6 GB
    kw = dict(KW, trials=2000, rounds=1000, record_every=1)
    with pytest.raises(ValueError, match=r"the grid's 100 points \(100\) need about 9\.6 GB .*"
                                         r"\(96\.2 MB each\).*record_x=False, a larger "
                                         r"record_every \(now k=1 for T=1000\) or fewer trials "
                                         r"\(now 2000\)"):
        fa.sweep(problem, grid={"stepsize": _counted_schedules(np.linspace(0.01, 0.1, 100),
                                                               calls)},
                 num_sampled=2, x0=problem.x_star + 2.0, **kw)
    assert len(calls) == 1  # the first point only


def test_sweep_that_fits_runs(problem, monkeypatch):
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(10 ** 9))
    sw = fa.sweep(problem, grid={"stepsize": [0.05, 0.1], "local_steps": [1, 2]},
                  num_sampled=2, x0=problem.x_star + 2.0,
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

    calls, usage = [], shutil.disk_usage(tmp_path)
    # 3 trials x (3 records x 5 values + 1): 384 bytes of results, 64 kB of headers
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda folder: usage._replace(free=100_000))
    with pytest.raises(OSError, match=r"checkpoint \(.*c\.npz\) cannot be written: it takes "
                                      r"about 6\d\.\d kB, twice that while a save replaces the "
                                      r"last one, and its disk has 100\.0 kB free"):
        _sim(problem, 0.05, tmp_path / "c.npz", progress=lambda *a: calls.append(a))
    assert calls == [] and os.listdir(tmp_path) == []
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda folder: usage._replace(free=10 ** 6))
    assert _sim(problem, 0.05, tmp_path / "c.npz").trials == 3


# ------------------------------------------------- bad arguments of the public surface (item 10)

X = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.0], [1.5]])]
Y = [np.array([0, 1]), np.array([1, 1, 0])]


def _sim_args(problem, **kw):
    args = dict(num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0, **KW)
    args.update(kw)
    return args


@pytest.mark.parametrize("kw, match", [
    (dict(stepsize="0.1"), r"stepsize must be a number, an array of T values or a schedule "
                           r"t -> alpha_t, got '0\.1'"),
    (dict(stepsize=0.05 + 1j), r"stepsize must be a number, .*got \(0\.05\+1j\)"),
    (dict(stepsize=lambda t: "a"), r"stepsize schedule t -> alpha_t cannot be evaluated on "
                                   r"t = 0, \.\.\., 7: ValueError: could not convert"),
    (dict(stepsize=lambda t, u: 0.1), r"cannot be evaluated on t = 0, \.\.\., 7: TypeError"),
    (dict(x0="zero"), r"x0 must be an array of real numbers, got 'zero'"),
    (dict(x0=[[1.0], [1.0, 2.0]]), r"x0 must be an array of real numbers"),
    (dict(x0=np.array([1 + 1j])), r"x0 must be an array of real numbers"),
    (dict(progress="yes"), r"progress must be True, False, a callback"),
    (dict(progress=1), r"progress must be True, False, a callback"),
    (dict(devices=["cpu"]), r"devices must be JAX devices \(e\.g\. jax\.devices\(\)\), got 'cpu'"),
    (dict(devices=jax.devices()[0]), r"devices must be a list of JAX devices"),
])
def test_simulate_refuses_bad_arguments_in_one_line(problem, kw, match):
    with pytest.raises(ValueError, match=match) as err:
        fa.simulate(problem, **_sim_args(problem, **kw))
    assert "\n" not in str(err.value)
    # the sweep checks its points with the same function
    if "stepsize" in kw:
        with pytest.raises(ValueError, match=match):
            fa.sweep(problem, grid={"stepsize": [kw["stepsize"]]},
                     **{k: v for k, v in _sim_args(problem).items() if k != "stepsize"})


@pytest.mark.parametrize("fn, error, match", [
    (lambda: fa.stepsize_array(0.1, 0), ValueError, r"rounds \(T\) must be an integer >= 1, got 0"),
    (lambda: fa.stepsize_array(0.1, "3"), ValueError, r"rounds \(T\) must be an integer >= 1, got '3'"),
    (lambda: fa.summarize("abc"), ValueError, r"summarize needs an array of numbers"),
    (lambda: fa.summarize(np.zeros((3, 3)), axis=5), ValueError, r"axis \(5\) must be an axis "
                                                                 r"of the 2-D values"),
    (lambda: fa.GaussianOracle(C="1"), ValueError, r"GaussianOracle needs C >= 0 and D >= 0, "
                                                   r"got C='1'.*C must be a number"),
    (lambda: fa.GaussianOracle(C=[1.0, 2.0]), ValueError, r"C must be a number"),
    (lambda: fa.GaussianOracle(D=None), ValueError, r"D must be a number, got None"),
    (lambda: fa.RademacherOracle(magnitude=3), ValueError, r"magnitude must be a function"),
])
def test_components_refuse_bad_arguments(fn, error, match):
    with pytest.raises(error, match=match):
        fn()


def test_load_and_save_name_the_path(problem, tmp_path):
    res = fa.simulate(problem, **_sim_args(problem))
    with pytest.raises(FileNotFoundError, match=r"^load: no result file at .*nope\.nc$"):
        fa.load(tmp_path / "nope.nc")
    with pytest.raises(IsADirectoryError, match=r"is a folder, not a result file"):
        fa.load(tmp_path)
    (tmp_path / "t.nc").write_text("hello")
    with pytest.raises(ValueError, match=r"t\.nc cannot be read as a netCDF result file") as err:
        fa.load(tmp_path / "t.nc")
    assert "\n" not in str(err.value)
    for bad in (None, 123):
        with pytest.raises(TypeError, match=rf"save: path must be a file path .*got {bad}"):
            res.save(bad)
    with pytest.raises(ValueError, match=r"save: .* is a folder; give a file path, e\.g\. "):
        res.save(tmp_path)
    # a missing folder is made, as for a checkpoint
    assert fa.load(res.save(tmp_path / "new" / "sub" / "r.nc")).equals(res)
    with pytest.raises(TypeError, match=r"concatenate takes SimResults, got a int"):
        fa.SimResult.concatenate([res, 3])
    with pytest.raises(ValueError, match=r"summary must be True or False, got 'yes'"):
        res.to_dataframe(summary="yes")


@pytest.mark.parametrize("fn, match", [
    (lambda: fa.problems.huber_offsets(jax.random.key(0), n=4, d_max="20"),
     r"d_max \(Dmax\) must be a number, got '20'"),
    (lambda: fa.problems.huber_offsets(0, n=4), r"key must be a single JAX PRNG key, e\.g\. "
                                                r"jax\.random\.key\(0\), got 0"),
    (lambda: fa.problems.huber_offsets(offsets=[[0.0, 1.0]]),
     r"offsets must be a list of n >= 2 numbers \(one per client\), got float64 values of "
     r"shape \(1, 2\)"),
    (lambda: fa.problems.huber_offsets(offsets=["a", "b"]), r"offsets must be a list of n"),
    (lambda: fa.problems.quadratics(None, n=4, d=3), r"key must be a single JAX PRNG key"),
    (lambda: fa.problems.quadratics(jax.random.key(0), n=4, d=3, curvature=1.0),
     r"curvature must be a pair \(a_min, a_max\), got 1\.0"),
    (lambda: fa.problems.quadratics(jax.random.key(0), n=4, d=3, spread="1"),
     r"spread must be a number"),
    (lambda: fa.problems.bgd_counterexample(oracle="x"),
     r"oracle must be a fedjax_abc\.AbstractOracle or None, got 'x'"),
    (lambda: fa.problems.bgd_counterexample(search_radius=-1.0),
     r"search_radius \(-1\) must be finite and > 0"),
    (lambda: fa.make_problem(lambda p, x: jnp.sum((x - p) ** 2), jnp.zeros(4), fa.ExactOracle(),
                             dim="1"), r"dim \(d='1'\) must be an integer >= 1"),
    (lambda: fa.make_problem(lambda p, x: jnp.sum((x - p) ** 2), jnp.zeros(4), None),
     r"oracle must be a fedjax_abc\.AbstractOracle \(e\.g\. "),
    (lambda: fa.make_problem(lambda p, x: jnp.sum((x - p) ** 2), jnp.zeros(4), fa.ExactOracle(),
                             x_star="0"), r"x_star must be a number or an array of numbers, got '0'"),
])
def test_problem_constructors_refuse_bad_arguments(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


def test_problem_fields_are_checked_when_made(problem):
    import dataclasses

    fields = {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)}
    with pytest.raises(ValueError, match=r"Problem\.loss must be a function .*got 3"):
        fa.Problem(**dict(fields, loss=3))
    with pytest.raises(ValueError, match=r"Problem\.oracle must be a fedjax_abc\.AbstractOracle, "
                                         r"got 'o'"):
        fa.Problem(**dict(fields, oracle="o"))
    # too few f_i*: refused before sigma_f_star or a round could read them (item 4)
    with pytest.raises(ValueError, match=r"Problem\.local_minima must have shape \(n=6,\) "
                                         r"\(one f_i\* per client\), got \(5,\)"):
        dataclasses.replace(problem, local_minima=problem.local_minima[:-1])
    with pytest.raises(ValueError, match=r"Problem\.x_star must have shape \(d,\), got \(\)"):
        dataclasses.replace(problem, x_star=jnp.asarray(1.0))
    nan_star = dataclasses.replace(problem, f_star=jnp.asarray(np.nan))  # made, not run
    with pytest.raises(ValueError, match=r"Problem\.f_star must be finite numbers, got nan"):
        fa.simulate(nan_star, **_sim_args(problem))


@pytest.mark.parametrize("fn, match", [
    (lambda: fa.problems.softmax_regression(X, Y, l2="0.1"), r"l2 must be a number, got '0\.1'"),
    (lambda: fa.problems.softmax_regression(X, Y, num_classes="2"),
     r"num_classes \(K\) must be an integer >= 2, got '2'"),
    (lambda: fa.problems.softmax_regression({"a": X[0]}, {"a": Y[0]}),
     r"features must be a list of n per-client arrays, got dict"),
    (lambda: fa.problems.softmax_regression([X[0], np.array([["a"], ["b"], ["c"]])], Y),
     r"client 1: features must be an array of numbers"),
    (lambda: fa.problems.mlp(jax.random.key(0), X, Y, width=0),
     r"MLP width must be an integer >= 1, got 0"),
    (lambda: fa.problems.mlp(jax.random.key(0), X, Y, depth=-1),
     r"MLP depth must be an integer >= 0, got -1"),
    (lambda: fa.problems.mlp(0, X, Y, width=4), r"key must be a single JAX PRNG key"),
    (lambda: fa.problems.mlp(jax.random.key(0), X, Y, width=4, solver_steps=0),
     r"solver_steps must be an integer >= 1, got 0"),
    (lambda: fa.problems.learning_problem("softmax", X, Y),
     r"model must be a fedjax_abc\.problems\.SoftmaxRegression, LogisticRegression, MLP or EquinoxModel"),
    (lambda: fa.problems.SoftmaxRegression(0, 2),
     r"SoftmaxRegression num_features \(p\) must be an integer >= 1, got 0"),
    (lambda: fa.problems.SoftmaxRegression(2, 1),
     r"SoftmaxRegression num_classes \(K\) must be an integer >= 2, got 1"),
    (lambda: fa.problems.LogisticRegression(2.0),
     r"LogisticRegression num_features \(p\) must be an integer >= 1, got 2\.0"),
    (lambda: fa.data.split(np.zeros((4, 1)), np.zeros(4, int), [np.array([0, 1]), np.array([1, 5])]),
     r"parts\[1\] holds index 5 outside 0\.\.3 \(the 4 samples\)"),
    (lambda: fa.data.split(np.zeros((4, 1)), np.zeros(4, int), 2),
     r"parts must be a list of index arrays"),
])
def test_learning_constructors_refuse_bad_arguments(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


def test_evaluate_refuses_test_data_the_model_cannot_read(problem):
    lg = fa.problems.logistic_regression(X, Y, l2=0.1)
    for fn in (lambda *a: fa.problems.evaluate(lg, lg.x_star, *a),
               lambda *a: fa.problems.held_out_metrics(lg, *a)):
        with pytest.raises(ValueError, match=r"features have 3 columns; the model takes p=1"):
            fn(np.zeros((2, 3)), np.array([0, 1]))
        with pytest.raises(ValueError, match=r"hold no test samples \(m = 0\)"):
            fn(np.zeros((0, 1)), np.zeros(0, int))
        with pytest.raises(ValueError, match=r"features must be finite"):
            fn(np.array([[np.nan], [1.0]]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"take a learning problem or its model"):
        fa.problems.evaluate(problem, problem.x_star, np.zeros((2, 1)), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"take a learning problem or its model"):
        fa.problems.held_out_metrics(problem, np.zeros((2, 1)), np.array([0, 1]))


def test_theory_checks_refuse_a_string_for_a_number(problem):
    with pytest.raises(ValueError, match=r"p must be a number, got '0\.6'"):
        fa.theory.theorem3_check(problem, L=1.0, C=1.0, num_sampled=2, local_steps=2, rounds=8,
                                 trials=2, key=jax.random.key(0), alpha0=None, p="0.6")


GRID = ('name = "g"\nseed = 0\ntrials = 3\nrounds = 8\nrecord_every = 4\nlocal_steps = 2\n'
        'x0_offset = 2.0\n{extra}[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\n'
        'seed = 0\n{table}[grid]\n{grid}\n')


def _grid(extra="", table="", grid="stepsize = [0.01, 0.02]\nnum_sampled = [2]"):
    return GRID.format(extra=extra, table=table, grid=grid)


@pytest.mark.parametrize("text, match", [
    (_grid().replace("trials = 3", 'trials = "3"'), r"trials must be an integer >= 1, got '3'"),
    (_grid().replace("rounds = 8", "rounds = 8.5"), r"rounds must be an integer >= 1, got 8\.5"),
    (_grid().replace("seed = 0\ntrials", "seed = -1\ntrials"),
     r"seed must be an integer >= 0, got -1"),
    (_grid().replace("n = 6", "n = 6\nwidth = 3"),
     r"\[problem\]: huber_offsets takes no argument 'width' \(its arguments: n, d_max, offsets\)"),
    (_grid(table='[algorithm]\nname = "FedProx"\nmuu = 0.1\n'),
     r"\[algorithm\]: FedProx takes no argument 'muu' \(its arguments: mu\)"),
    (_grid().replace("d_max = 10.0\nseed = 0", 'd_max = 10.0\nseed = "x"'),
     r"\[problem\] seed must be an integer in \[0, 2\^32\), got 'x'"),
    (_grid(grid="num_sampled = [2, 3]"), r"give stepsize = \.\.\. or a stepsize grid axis"),
    (_grid(table='[sampler]\nname = "Bernoulli"\np = 0.5\n'),
     r"\[sampler\] and num_sampled both choose the clients of a round: give one of them"),
    (_grid(extra="x0 = [1.0]\n"), r"give x0 or x0_offset, not both"),
])
def test_grid_file_settings_are_refused_in_one_line(tmp_path, capsys, text, match):
    import re

    (tmp_path / "g.toml").write_text(text)
    out = tmp_path / "out"
    start = time.perf_counter()
    assert cli.main(["run", str(tmp_path / "g.toml"), "--out", str(out), "--quiet"]) == 1
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    assert err.startswith("fedjax-abc: error: ") and err.count("\n") == 1
    assert re.search(match, err), err
    assert not os.path.exists(out / "parts") or os.listdir(out / "parts") == []


def test_reproduce_refuses_a_theorem3_exponent_outside_its_range(tmp_path, capsys):
    assert cli.main(["reproduce", "thm3", "--quick", "--set", "p=2", "--quiet",
                     "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "--set p: Theorem 3's decay exponent must be in (1/2, 1], got 2" in err
    assert not os.path.exists(tmp_path / "thm3.json")


class _BrokenLocalStep(fa.algorithms.AbstractLocalSGD):
    """Local SGD whose local step fails while the run's program is traced."""

    def init(self, x0):
        return fa.algorithms.FedAvg().init(x0)

    def server_update(self, server, mean_message, info):
        return type(server)(mean_message)

    def local_step(self, server, y, local, gradient, stepsize):
        raise RuntimeError("a bug in the user's algorithm")


def test_run_stopped_before_its_first_round_leaves_no_claim(problem, tmp_path):
    path = tmp_path / "c.npz"
    with pytest.raises(RuntimeError, match="a bug in the user's algorithm"):
        _sim(problem, 0.05, path, algorithm=_BrokenLocalStep())  # fails while compiling
    assert not path.exists()  # the claim is gone: the mended call is not refused
    assert _sim(problem, 0.1, path).trials == 3


@pytest.mark.parametrize("make, match", [
    (lambda: fa.UniformWithoutReplacement(0), r"num_sampled \(S=0\) must be >= 1"),
    (lambda: fa.UniformWithoutReplacement(2.5), r"num_sampled \(S=2.5\) must be an integer"),
    (lambda: fa.UniformWithoutReplacement("2"), r"num_sampled \(S='2'\) must be an integer"),
    (lambda: fa.WithReplacement(0), r"num_sampled \(S=0\) must be >= 1"),
    (lambda: fa.Bernoulli("0.5"), r"p='0.5'\) must be a number in \(0, 1\]"),
    (lambda: fa.Bernoulli([0.5, 0.5]), r"must be a number in \(0, 1\]"),
    (lambda: fa.sample_mask(fa.UniformWithoutReplacement(2), 0, 5), r"single JAX PRNG key"),
    (lambda: fa.sample_mask(fa.UniformWithoutReplacement(6), jax.random.key(0), 5),
     r"num_sampled \(S=6\) must be in \[1, n=5\]"),
    (lambda: fa.sample_mask(fa.UniformWithoutReplacement(2), jax.random.key(0), 0),
     r"n must be an integer >= 1, got 0"),
])
def test_sampler_constructors_and_sample_mask_refuse_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_sample_mask_still_draws_s_of_n():
    mask = np.asarray(fa.sample_mask(fa.UniformWithoutReplacement(2), jax.random.key(0), 5))
    assert sorted(mask.tolist()) == [0.0, 0.0, 0.0, 1.0, 1.0]
