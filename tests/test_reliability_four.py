"""Reliability, round four: each case an audit ran from the user's side gets a clear error
before any work, or the right result.

- ``simulate_async`` checks a rule or clock edited with ``eqx.tree_at`` as ``simulate`` does
  (the constructor's error), a number put in where an array belongs runs as the array would,
  float32 runs, swapped ``key`` and ``x0`` are named in one line;
- a clock's speed factors are finite and > 0 (made, edited or swept), and a step of no work
  takes no time at an infinite speed factor (not NaN);
- a NumPy generator made at module level and read inside a sampler or oracle is refused;
- sizes checked before allocation (``on_time_grid``), bands kept above 0 on a log axis,
  time curves of several runs on one grid.
"""

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from small_run import small_problem, small_run

KEY = jax.random.key(1)
RNG = np.random.default_rng(0)  # made at module level, read inside the components below


@pytest.fixture(scope="module")
def quad():
    return fa.problems.quadratics(jax.random.key(0), n=8, d=2)


def async_args(**kw):
    args = dict(concurrency=4, local_steps=2, stepsize=0.1, steps=12, trials=2, key=KEY,
                x0=jnp.ones(2), record_every=4)
    args.update(kw)
    return args


def run_async(problem, rule=None, clock=None, **kw):
    rule = fa.timing.FedBuff(buffer=2) if rule is None else rule
    clock = fa.timing.Clock(fa.timing.Exponential(1.0)) if clock is None else clock
    return fa.timing.simulate_async(problem, rule, clock, **async_args(**kw))


def one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------- simulate_async re-checks tree_at edits


@pytest.mark.parametrize("edit, match", [
    (lambda: eqx.tree_at(lambda r: r.server_stepsize, fa.timing.FedBuff(2), jnp.asarray(-1.0)),
     r"server_stepsize \(eta_g\) must be > 0, got -1\.0"),
    (lambda: eqx.tree_at(lambda r: r.mixing, fa.timing.FedAsync(0.5), jnp.asarray(1.5)),
     r"mixing \(a=1\.5\) must be in \(0, 1\]"),
    (lambda: eqx.tree_at(lambda r: r.mixing, fa.timing.FedAsync(0.5), jnp.asarray(-0.5)),
     r"mixing \(a\) must be > 0, got -0\.5"),
])
def test_async_refuses_a_rule_edited_out_of_range(quad, edit, match):
    rule = edit()
    with pytest.raises(ValueError, match=match) as err:
        run_async(quad, rule)
    one_line(err)
    # the constructor says the same
    with pytest.raises(ValueError, match=match.split(",")[0].split(" must")[0]):
        if isinstance(rule, fa.timing.FedBuff):
            fa.timing.FedBuff(2, server_stepsize=float(rule.server_stepsize))
        else:
            fa.timing.FedAsync(float(rule.mixing))


@pytest.mark.parametrize("where, value, match", [
    (lambda c: c.compute.mean, -1.0, r"Exponential's mean \(-1\.0\) must be finite and > 0"),
    (lambda c: c.communication.value, -2.0, r"Constant's value \(-2\.0\) must be finite and >= 0"),
    (lambda c: c.speed, -np.ones(8), r"Clock's speed factors must be finite and > 0, got -1\.0 "
                                     r"for client 0"),
    (lambda c: c.speed, np.zeros(8), r"Clock's speed factors must be finite and > 0, got 0\.0"),
    (lambda c: c.speed, np.full(8, np.inf), r"Clock's speed factors must be finite and > 0, "
                                            r"got inf"),
])
def test_async_refuses_a_clock_edited_out_of_range(quad, where, value, match):
    clock = fa.timing.Clock(fa.timing.Exponential(1.0), speed=np.ones(8),
                            communication=fa.timing.Constant(0.5))
    edited = eqx.tree_at(where, clock, jnp.asarray(value))
    with pytest.raises(ValueError, match=match) as err:
        run_async(quad, clock=edited)
    one_line(err)
    # and so does a synchronous run, the clock inside a timed sampler edited in its Simulation
    sim = fa.Simulation(quad, sampler=fa.timing.Timed(fa.UniformWithoutReplacement(3), clock),
                        local_steps=2, rounds=4, record_every=2)
    edited_sim = eqx.tree_at(lambda s: where(s.components.sampler.clock), sim, jnp.asarray(value))
    with pytest.raises(ValueError, match=match):
        edited_sim.run(key=KEY, x0=jnp.ones(2), trials=2, stepsize=0.1)


def test_clock_speed_factors_must_be_positive_however_given(quad):
    with pytest.raises(ValueError, match=r"speed factors must be finite and > 0, got the "
                                         r"constant law 0\.0"):
        fa.timing.Clock(speed=fa.timing.Constant(0.0))
    edited = eqx.tree_at(lambda c: c.speed.value, fa.timing.Clock(speed=fa.timing.Constant(2.0)),
                         jnp.asarray(0.0))
    with pytest.raises(ValueError, match=r"the constant law 0\.0"):
        run_async(quad, clock=edited)
    # a sweep axis over the given factors: the point's value named, on one line
    with pytest.raises(ValueError, match=r"grid axis 'clock\.speed' value .*speed factors must "
                                         r"be finite and > 0, got -1\.0") as err:
        fa.timing.sweep_async(quad, fa.timing.FedBuff(2), fa.timing.Clock(speed=np.ones(8)),
                              grid={"clock.speed": [np.ones(8), -np.ones(8)]},
                              **async_args())
    one_line(err)
    # and a synchronous sweep over a timed sampler's factors
    timed = fa.timing.Timed(fa.UniformWithoutReplacement(3), fa.timing.Clock(speed=np.ones(8)))
    with pytest.raises(ValueError, match=r"speed factors must be finite and > 0, got 0\.0"):
        fa.sweep(quad, grid={"sampler.clock.speed": [np.ones(8), np.zeros(8)]}, sampler=timed,
                 local_steps=2, stepsize=0.1, rounds=4, trials=2, key=KEY, x0=jnp.ones(2))


def test_no_work_at_an_infinite_speed_factor_takes_no_time():
    """A speed law that overflows to inf (Pareto of shape 0.01 at the top word) times a step
    of no time: the duration is the communication alone, never NaN."""
    clock = fa.timing.Clock(fa.timing.Constant(0.0), speed=fa.timing.Pareto(1.0, 0.01),
                            communication=fa.timing.Constant(1.5))
    top = jnp.full((4,), 2 ** 32 - 1, jnp.uint32)
    speed = clock.speeds(top, jnp.float64)
    assert np.all(np.isinf(np.asarray(speed)))
    assert np.array_equal(np.asarray(clock.durations(jnp.stack([top, top]), 3, speed)),
                          np.full(4, 1.5))
    # a step of some time at an infinite factor takes forever (inf), not NaN
    slow = fa.timing.Clock(fa.timing.Constant(1.0), speed=fa.timing.Pareto(1.0, 0.01))
    assert np.all(np.isposinf(np.asarray(slow.durations(jnp.stack([top, top]), 3, speed))))


def test_async_takes_a_python_number_put_into_a_rule(quad):
    """eqx.tree_at(..., 0.5) puts a float where the constructor makes an array: the run is
    the one of the array (not an AttributeError from inside the rule)."""
    rule = fa.timing.FedAsync(0.3)
    edited = eqx.tree_at(lambda r: r.mixing, rule, 0.5)
    a = run_async(quad, edited)
    b = run_async(quad, fa.timing.FedAsync(0.5))
    assert np.array_equal(a.gap, b.gap)
    clock = eqx.tree_at(lambda c: c.compute.mean, fa.timing.Clock(fa.timing.Exponential(1.0)), 2)
    c = run_async(quad, rule, clock)
    d = run_async(quad, rule, fa.timing.Clock(fa.timing.Exponential(2.0)))
    assert np.array_equal(c.metrics["time"], d.metrics["time"])
    with pytest.raises(ValueError, match=r"mixing \(a=2\) must be in \(0, 1\]"):
        run_async(quad, eqx.tree_at(lambda r: r.mixing, rule, 2.0))


def test_async_runs_in_float32(quad):
    out = run_async(quad, dtype="float32")
    assert out.config["dtype"] == "float32" and np.all(np.isfinite(out.gap))
    ref = run_async(quad)
    np.testing.assert_allclose(out.gap, ref.gap, rtol=1e-3, atol=1e-5)


def test_swapped_key_and_x0_are_named(quad):
    with pytest.raises(ValueError, match=r"are key and x0 swapped\?") as err:
        run_async(quad, key=jnp.ones(2), x0=KEY)
    one_line(err)
    with pytest.raises(ValueError, match=r"x0 must be an array of real numbers, got a JAX PRNG "
                                         r"key: are key and x0 swapped\?") as err:
        fa.simulate(quad, num_sampled=2, local_steps=2, stepsize=0.1, rounds=4, trials=2,
                    key=jnp.ones(2), x0=KEY)
    one_line(err)


# ---------------------------------------------- a generator made at module level, read inside


class ModuleGeneratorSampler(fa.AbstractStatelessSampler):
    distinct_slots = False
    num_sampled = 2

    def num_slots(self, n):
        return 2

    def from_words(self, words, n):
        idx = RNG.choice(n, 2, replace=False)  # once, at trace time
        return jnp.asarray(idx, jnp.int32), jnp.full((2,), n / 2)


def _noise_of(shape):
    return RNG.normal(size=shape)  # a helper of the module, reading its generator


class ModuleGeneratorOracle(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jnp.asarray(_noise_of(shape), dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


def closure_oracle():
    rng = np.random.RandomState(3)

    class ClosureOracle(fa.AbstractOracle):
        def noise(self, key, shape, dtype):
            return jnp.asarray(rng.standard_normal(shape), dtype)

        def gradient(self, problem, client, x, z):
            return problem.local_grad(client, x) + z

    return ClosureOracle()


def test_a_generator_made_outside_the_component_is_refused(quad):
    p = small_problem()
    with pytest.raises(ValueError, match=r"ModuleGeneratorSampler draws from the Generator "
                                         r"test_reliability_four\.RNG .*made outside it, when "
                                         r"traced: the draw is made once") as err:
        small_run(p, sampler=ModuleGeneratorSampler())
    one_line(err)
    with pytest.raises(ValueError, match=r"ModuleGeneratorOracle draws from the Generator "
                                         r"test_reliability_four\.RNG \(read by "
                                         r"test_reliability_four\._noise_of\)"):
        small_run(p, oracle=ModuleGeneratorOracle())
    with pytest.raises(ValueError, match=r"ClosureOracle draws from the RandomState a variable "
                                         r"of .*closure_oracle"):
        small_run(p, oracle=closure_oracle())
    # the asynchronous engine checks a user's oracle too
    with pytest.raises(ValueError, match=r"ModuleGeneratorOracle draws from the Generator"):
        run_async(quad, oracle=ModuleGeneratorOracle())
    # a generator used outside any trace is left alone
    assert RNG.integers(10) >= 0


# -------------------------------------------------------- sizes, plots, the x64 error first


def test_a_time_grid_too_large_is_refused_before_it_is_made(quad, monkeypatch):
    res = run_async(quad)
    monkeypatch.setenv("FEDJAX_ABC_MEMORY_BYTES", str(2 ** 30))  # 1 GB available
    with pytest.raises(ValueError, match=r"a time grid of 1,000,000,000 points for 2 trials needs "
                                         r"about 40\.0 GB, more than the 1\.1 GB available: ask "
                                         r"for fewer points") as err:
        res.on_time_grid(points=10 ** 9)
    one_line(err)
    with pytest.raises(ValueError, match=r"needs about"):
        res.summary_on_time_grid("gap", points=10 ** 9)
    assert res.on_time_grid(points=50).values.shape == (2, 50)


def test_time_curves_of_several_runs_share_a_grid_and_bands_stay_above_zero(quad):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    slow = run_async(quad, clock=fa.timing.Clock(fa.timing.Exponential(3.0)), trials=3)
    fast = run_async(quad, trials=3)
    horizon = min(r.metrics["time"][:, -1].min() for r in (slow, fast))
    times = np.linspace(0.0, horizon, 40)
    fig, ax = plt.subplots()
    for r in (slow, fast):
        r.plot(x="time", ax=ax, times=times)
    ends = [line.get_xdata()[-1] for line in ax.get_lines()]
    assert ends == [horizon, horizon]
    # every band's lower edge is above 0, at least a tenth of the mean, on the log axis
    for line, band in zip(ax.get_lines(), ax.collections):
        lower = band.get_paths()[0].vertices[:, 1]
        assert lower.min() > 0 and lower.min() >= 0.1 * line.get_ydata().min() - 1e-300
    plt.close(fig)
    with pytest.raises(ValueError, match=r"times \(a grid of simulated times\) goes with "
                                         r"x='time'"):
        fast.plot(times=times)


def test_a_band_that_reaches_zero_is_drawn_a_decade_below_the_mean():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from fedjax_abc._engine._plot import plot_band

    fig, ax = plt.subplots()
    mean = np.array([1.0, 1e-2, 1e-4])
    plot_band(ax, np.arange(3), mean, np.array([0.5, 2e-2, 1e-3]))  # the last two reach 0
    ys = ax.collections[0].get_paths()[0].vertices[:, 1]  # the band's outline
    for edge in (0.5, 1e-3, 1e-5):  # 1 - 0.5, then a tenth of the means 1e-2 and 1e-4
        assert np.isclose(ys, edge, rtol=1e-9, atol=0).any(), (edge, ys)
    assert ys.min() == pytest.approx(1e-5)
    plt.close(fig)


X64_OFF = """
import warnings, jax
import fedjax_abc as fa
warnings.simplefilter("always")
try:
    fa.problems.{builder}
except ValueError as err:
    print("@@", err)
"""


@pytest.mark.parametrize("builder", ["huber_offsets(jax.random.key(0), n=10)",
                                     "quadratics(jax.random.key(0), n=4, d=2)"])
def test_without_x64_the_builder_names_the_fix_before_any_jax_warning(builder):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64", "PYTHONWARNINGS")}
    out = subprocess.run([sys.executable, "-c", X64_OFF.format(builder=builder)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert "@@ fa.problems." in out.stdout and "needs JAX's 64-bit mode" in out.stdout
    assert "for a float32 run too" in out.stdout
    assert "Warning" not in out.stderr  # no truncation warning of JAX's before the error


# ------------------------------------------------------------------------ the grid runner

GRID = ('name = "{name}"\nseed = 0\ntrials = 3\nrounds = 8\nrecord_every = 4\nlocal_steps = 2\n'
        'x0_offset = 2.0\n[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\nseed = 0\n'
        '[grid]\nnum_sampled = [2, 3]\nstepsize = [0.01, 0.02]\n')


def _grid_file(tmp_path, name="g"):
    path = tmp_path / "grid.toml"
    path.write_text(GRID.format(name=name))
    return path


@pytest.mark.parametrize("name", ["../../victim", "/tmp/victim", "a/b", "..", "a\\\\b"])
def test_a_grid_name_that_is_a_path_is_refused_and_nothing_is_written(tmp_path, monkeypatch,
                                                                      capsys, name):
    from fedjax_abc import cli

    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    path = _grid_file(tmp_path, name)
    assert cli.main(["run", str(path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "must be a plain folder name" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.toml", "work"]
    assert list(work.iterdir()) == []


def test_a_results_folder_that_leads_outside_is_refused(tmp_path, monkeypatch, capsys):
    from fedjax_abc import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "results" / "g")  # results/g -> elsewhere
    path = _grid_file(tmp_path)
    assert cli.main(["run", str(path), "--quiet"]) == 1
    assert "resolves to" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


class _Parts:
    """A grid's progress that records the parts started (``task`` is called as a part
    starts to run) and calls ``at_start(label)`` then."""

    def __init__(self, at_start=None):
        self.started, self.at_start = [], at_start

    def plan(self, work):
        pass

    def task(self, label, work, unit):
        self.started.append(label)
        if self.at_start is not None:
            self.at_start(label)
        return None

    def finish_task(self):
        pass


def test_a_part_is_checked_against_the_free_space_before_it_runs(tmp_path, monkeypatch,
                                                                 capsys):
    import collections
    import shutil

    from fedjax_abc import cli
    from fedjax_abc.repro import grid

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10 ** 9, 10 ** 9, 1000))
    out = tmp_path / "out"
    assert cli.main(["run", str(_grid_file(tmp_path)), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"part 1/2 of the grid ({out / 'parts' / '0.nc'}) cannot be written: it takes " \
           f"about" in err and "free" in err and err.count("\n") == 1
    parts = _Parts()
    with pytest.raises(OSError, match="cannot be written"):
        grid.run_grid(grid.load_spec(str(_grid_file(tmp_path))), str(out), parts)
    assert parts.started == []  # nothing computed that could not be kept


def test_a_part_whose_save_fails_is_kept_and_saved_again(tmp_path):
    """The parts' folder gone while the first part is computed (a disk unmounted, filled):
    the part is kept in memory, the failure names its file, and the save is tried again;
    given back the folder in the meantime, nothing is computed twice."""
    import shutil

    from fedjax_abc.repro import grid

    out = tmp_path / "out"
    parts = out / "parts"

    def parts_folder_lost(label):
        if label.startswith("part 1/"):  # the folder replaced by a file: no save can go there
            shutil.rmtree(parts)
            parts.write_text("not a folder")

    def folder_back(text):
        messages.append(text)
        parts.unlink()
        parts.mkdir()

    messages = []
    spec = grid.load_spec(str(_grid_file(tmp_path)))
    progress = _Parts(parts_folder_lost)
    done = grid.run_grid(spec, str(out), progress, say=folder_back, waits=(0.0, 0.0))
    assert len(progress.started) == 2 and done["joined"] and (parts / "0.nc").exists()
    (message,) = messages
    assert message.startswith(f"part 1/2 was computed but could not be saved to "
                              f"{parts / '0.nc'}: ") and "it is kept in memory and saved " \
                                                         "again in 0 s" in message
    # a folder that stays lost: after the last try, one line naming the file
    messages.clear()
    again = tmp_path / "again"
    parts = again / "parts"
    with pytest.raises(OSError) as err:
        grid.run_grid(spec, str(again), _Parts(parts_folder_lost), say=messages.append,
                      waits=(0.0, 0.0))
    assert len(messages) == 2 and all(f"could not be saved to {parts / '0.nc'}" in m
                                      for m in messages)
    assert str(err.value).startswith(f"part 1/2 was computed but could not be saved to "
                                      f"{parts / '0.nc'}: ") and "(tried 3 times)" in str(err.value)
    assert "\n" not in str(err.value)


def test_damaged_and_foreign_files_are_named(tmp_path, capsys):
    from fedjax_abc import cli

    path = _grid_file(tmp_path)
    out = tmp_path / "out"
    (out / "parts").mkdir(parents=True)
    (out / "grid.json").write_bytes(b"\x00\xff garbage")
    assert cli.main(["run", str(path), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{out / 'grid.json'} is damaged" in err and err.count("\n") == 1
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    assert cli.main(["run", str(binary), "--out", str(tmp_path / "o2"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{binary} is not a grid file: not text" in err and err.count("\n") == 1
    speeds = tmp_path / "speeds.txt"
    speeds.write_bytes(b"\xff\xfe\x00 1.0")
    with pytest.raises(ValueError, match=f"{speeds}: not a text file of speed factors") as e:
        fa.timing.speeds_from_file(speeds)
    one_line(e)
    with pytest.raises(ValueError, match=r"cannot read the speed file .*missing\.txt"):
        fa.timing.speeds_from_file(tmp_path / "missing.txt")


def test_merge_after_the_parts_were_joined_rewrites_nothing(tmp_path, capsys):
    from fedjax_abc import cli

    path, out = _grid_file(tmp_path), tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert cli.main(["merge", str(path), "--out", str(out)]) == 0
    assert "already joined" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()} == before
    (out / "summary.csv").unlink()  # an output gone: joined again
    assert cli.main(["merge", str(path), "--out", str(out)]) == 0
    assert "wrote result.nc, summary.csv" in capsys.readouterr().out


def test_submitit_folder_is_private(tmp_path):
    import stat

    submit = pytest.importorskip("fedjax_abc.repro.submit")
    folder = submit.private_folder(str(tmp_path / "out" / "submitit"))
    assert stat.S_IMODE((tmp_path / "out" / "submitit").stat().st_mode) & 0o077 == 0
    (tmp_path / "out" / "submitit").chmod(0o777)
    with pytest.raises(OSError, match=r"others may write in it .*whoever can write there can "
                                      r"run code as you"):
        submit.private_folder(folder)


# ----------------------------------------------------------------------- the command line


def test_help_states_each_default_once_and_no_doubled_percent(capsys):
    from fedjax_abc import cli

    for command in ("reproduce", "compare", "report", "run"):
        assert cli.main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "(default: None)" not in text and "(default: False)" not in text, command
        assert "%%" not in text, command
    assert cli.main(["compare", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "reported on fresh ones with 95% intervals" in text
    assert "output folder (default: results)" in text  # a default the text does not state


def test_ctrl_c_while_the_command_starts_stops_it(tmp_path):
    """Ctrl-C in the first second or two (JAX being imported): the command stops with the
    interrupted status and line, instead of running on or printing an import's traceback."""
    import signal
    import subprocess
    import sys
    import time

    for delay in (0.6, 1.5):
        proc = subprocess.Popen([sys.executable, "-c", "import sys, fedjax_abc_cli; "
                                 "sys.exit(fedjax_abc_cli.main())", "reproduce", "fig1",
                                 "--quick", "--no-checkpoint", "--out", str(tmp_path / "o")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        start = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (delay, err[-2000:])
        assert "fedjax-abc: interrupted" in err and "Traceback" not in err, err[-2000:]
        assert time.perf_counter() - start < 20
        assert not (tmp_path / "o" / "fig1.json").exists()


def test_ctrl_c_inside_a_garbage_collector_callback_is_not_lost():
    """JAX runs a callback at every collection; a KeyboardInterrupt raised inside one is
    printed and dropped by Python, and the command went on. The command's handler sends the
    same Ctrl-C again once out of it."""
    import gc
    import signal
    import time

    from fedjax_abc import cli

    fired = []

    def callback(phase, info):
        if phase == "start" and not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside the callback
            fired.append("after")

    restore = cli._catch_ctrl_c()  # as the command does
    gc.callbacks.append(callback)
    try:
        with pytest.raises(KeyboardInterrupt):
            gc.collect()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        gc.callbacks.remove(callback)
        restore()
    assert fired == [True, "after"]  # the callback itself was not broken off


# ------------------------------------------------------ reproduce: time left, time taken


def test_rounds_read_back_from_a_checkpoint_count_for_no_rate():
    """A run resumed at 60 of 100 rounds: nothing is estimated until this process has
    computed something, then the time left is the work left over this process's rate (the
    60 rounds read back in no time would make it 4x too short)."""
    import io
    import time

    from fedjax_abc.repro import common

    progress = common.Progress("fig1", stream=io.StringIO())
    progress.plan(100.0)
    meter = progress.task("S=4", 100.0)
    state = meter.init(100, "fedavg", 60)
    line = progress.line()
    assert "rounds 60/100" in line and "estimating..." in line and "left" not in line
    progress.start = time.perf_counter() - 40.0  # 40 s since the command started
    meter.step(state, 70)
    time.sleep(0.02)
    meter.step(state, 80)  # 20 rounds computed here in 40 s: 20 left take 40 s more
    line = progress.line()
    assert "~0:40 left" in line and "rounds/s" in line and "client-steps" not in line
    progress.finish_task()
    assert progress.computed == pytest.approx(20.0)  # of the run's 100: 80 done, 20 here
    # a run read back whole reports nothing: done, none of it computed here
    progress.task("S=8", 100.0)
    progress.finish_task()
    assert progress.done == 200.0 and progress.computed == pytest.approx(20.0)


def test_an_experiment_read_back_gives_the_overall_line_no_pace():
    from fedjax_abc.repro.common import Overall, clock

    now = [0.0]
    overall = Overall(["a", "b"], {"a": 100.0, "b": 100.0}, timer=lambda: now[0])
    overall.begin("a")
    now[0] = 1.0
    overall.finish("a", computed=0.0)  # read back from checkpoints in 1 s
    overall.begin("b")
    assert overall.status(0.3, 0.0) == "all 1/2, estimating..."  # 30% read back, none run
    now[0] = 71.0  # 70 s for b's 35% computed so far (its first 30% read back)
    line = overall.status(0.65, 0.35)
    pace = 70.0 / 35.0
    assert line == f"all 1/2, ~{clock(pace * 100 * 0.35)} left"


def _fake_runner(name, seconds=0.0, stop=False):
    """An experiment that takes ``seconds`` (or stops, as Ctrl-C would) and writes one file;
    its run keeps a checkpoint, as ``simulate(checkpoint=...)`` does."""
    import time

    def run(settings, progress):
        progress.plan(1.0)
        callback = progress.task("only run", 1.0)
        checkpoint = settings.checkpoint_file(name, "only run")
        os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
        with open(checkpoint, "ab"):
            pass
        time.sleep(seconds)
        if stop:
            raise KeyboardInterrupt
        callback(1, 1, seconds)
        progress.finish_task()
        return {"config": {"scale": "quick", "trials": 3, "rounds": 10, "precision": "float64",
                           "seed": 0}}

    def write(doc, out):
        from fedjax_abc.repro import common

        return [common.write_json(f"{out}/{name}.json", doc)]

    return run, write


def test_reproduce_all_states_its_experiments_and_sums_the_time_of_resumed_runs(
        tmp_path, monkeypatch, capsys):
    import json

    from fedjax_abc import cli
    from fedjax_abc.repro import runtime
    from fedjax_abc.repro.common import clock

    out = tmp_path / "out"
    monkeypatch.setattr(cli, "_start_up", lambda: None)
    # the first run stops in table2, after fig1 was written
    monkeypatch.setattr(cli, "_runner", lambda name: _fake_runner(
        name, 0.2 if name == "fig1" else 0.1, stop=name == "table2"))
    assert cli.main(["reproduce", "all", "--quick", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(f"reproduce {len(cli.EXPERIMENTS)} experiments: "
                            + ", ".join(cli.EXPERIMENTS))
    reference = sum(runtime.MEASURED_SECONDS["quick"].values())
    assert f"about {clock(reference)} at --quick in the reference run" in first
    fig1_first = json.loads((out / "fig1.json").read_text())["config"]["wall_seconds"]
    assert fig1_first >= 0.2
    # the rerun reads fig1 back in no time, finishes table2 and the rest
    monkeypatch.setattr(cli, "_runner", lambda name: _fake_runner(name, 0.0))
    assert cli.main(["reproduce", "all", "--quick", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    fig1 = json.loads((out / "fig1.json").read_text())["config"]
    table2 = json.loads((out / "table2.json").read_text())["config"]
    assert fig1["wall_seconds"] >= fig1_first and fig1["runs"] == 2  # both runs counted
    assert table2["runs"] == 2 and table2["wall_seconds"] >= 0.1
    assert "with the earlier runs it resumed" in err.splitlines()[-2]
    assert not (out / "checkpoints").exists()  # the notes went with the checkpoints
    # the report shows the time of every run, marked resumed
    from test_report import _fig1, _write

    from fedjax_abc.repro import report

    doc = _fig1()
    doc["config"].update(wall_seconds=fig1["wall_seconds"] + 52.0, runs=fig1["runs"])
    (tmp_path / "report").mkdir()
    results = _write(tmp_path / "report", [doc])
    row = next(line for line in report.render(str(results), str(tmp_path / "r.md")).splitlines()
               if line.startswith("| fig1 |"))
    assert "| 52 s (2 runs, resumed) |" in row


def test_a_quick_report_says_what_it_could_not_estimate(tmp_path):
    """A fig3 whose D_Q values are all negative (a quick scale): no log-log slope, said so
    in words, never 'nan +/- nan'."""
    from test_report import _fig3, _write

    from fedjax_abc.repro import report

    doc = _fig3()
    doc["D_Q"]["mean"] = [-0.2, -0.1, -0.3, -0.2]
    doc["config"]["scale"] = "quick"
    text = report.render(str(_write(tmp_path, [doc])), str(tmp_path / "r.md"))
    import re

    assert not re.search(r"\bnan\b", text)
    assert "b not estimated (0 of the 4 values are positive with a standard error; a log-log " \
           "fit needs 3)" in text


# ------------------------------------------------------------------------------ the site


def test_the_docs_extra_builds_the_site_with_math_on_every_page(tmp_path):
    """``pip install -e ".[docs]"`` brings what ``mkdocs build --strict`` imports (the
    notebook pages' nbconvert, a signature formatter), and every page loads MathJax: the
    notebooks' LaTeX is typeset, not shown raw."""
    import importlib.util
    import pathlib
    import re
    import subprocess
    import sys

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    root = pathlib.Path(__file__).resolve().parents[1]
    with open(root / "pyproject.toml", "rb") as fh:
        extra = tomllib.load(fh)["project"]["optional-dependencies"]["docs"]
    names = {re.split(r"[<>=\[ ]", req)[0].lower() for req in extra}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings", "nbconvert", "nbformat"} <= names
    assert names & {"black", "ruff"}  # mkdocstrings formats separate signatures with one
    config = (root / "mkdocs.yml").read_text()
    assert "pymdownx.arithmatex" in config and "mathjax" in config.lower()
    if not all(importlib.util.find_spec(m) for m in ("mkdocs", "material",
                                                     "mkdocstrings_handlers", "nbconvert")):
        pytest.skip("the docs extra is not installed here")
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(site)], cwd=root, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Formatting signatures requires" not in out.stderr
    pages = sorted(site.rglob("index.html"))
    assert pages and all("mathjax" in p.read_text().lower() for p in pages)
    import json

    with_math = 0
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        if re.search(r"\$[^$\s][^$]*\$", text):  # LaTeX in its prose
            with_math += 1
            page = (site / "notebooks" / nb.stem / "index.html").read_text()
            assert 'class="arithmatex"' in page, nb.name
    assert with_math >= 1


def test_simulate_rechecks_a_component_edited_before_the_call():
    import equinox as eqx
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=5.0)
    bad = eqx.tree_at(lambda a: a.mu, fa.algorithms.FedProx(mu=0.1), -1.0)
    with pytest.raises(ValueError, match="mu must be >= 0") as err:
        fa.simulate(p, num_sampled=2, local_steps=1, stepsize=1e-2, rounds=2, x0=0.0,
                    key=jax.random.key(1), algorithm=bad)
    assert "\n" not in str(err.value)
