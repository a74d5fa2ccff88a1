"""Progress meters: what a run tells a meter (init, a step after every segment, close), what
the built-in meters write, that no meter changes a result, and the one-line errors."""

import re

import jax
import numpy as np
import pytest

import fedjax_abc as fa

FIELDS = ("gap", "grad_norm_sq", "x", "x_final", "diverged_at")


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)


def _kw(p, **kw):
    base = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=400, record_every=2,
                x0=p.x_star + 3.0, trials=10, trial_chunk=4, key=jax.random.key(0))
    base.update(kw)
    return base


class Recorder(fa.AbstractProgressMeter):
    """A user's meter: writes what it is told to a list; its state counts the steps."""

    log: list

    def init(self, total, label, done=0):
        self.log.append(("init", total, label, done))
        return 0

    def step(self, state, done):
        self.log.append(("step", done, state))
        return state + 1

    def close(self, state):
        self.log.append(("close", state))


def _same(a, b):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_a_meter_is_told_init_every_segment_and_close(problem):
    log = []
    res = fa.simulate(problem, **_kw(problem), progress=Recorder(log))
    _same(res, fa.simulate(problem, **_kw(problem)))
    total = 400 * 3  # rounds x three trial chunks of 4, 4, 2
    assert log[0] == ("init", total, "fedavg, 3 chunks of 4 trials", 0)
    steps = [entry for entry in log if entry[0] == "step"]
    assert [s[2] for s in steps] == list(range(len(steps)))  # the state threads through
    done = [s[1] for s in steps]
    assert all(a < b for a, b in zip(done, done[1:])) and done[-1] == total
    assert 400 in done and 800 in done  # every chunk's end is told
    assert log[-1] == ("close", len(steps)) and len(log) == len(steps) + 2


def test_close_is_called_when_the_run_stops(problem):
    class Stops(Recorder):
        def step(self, state, done):
            if state == 4:
                raise KeyboardInterrupt
            return super().step(state, done)

    log = []
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **_kw(problem), progress=Stops(log))
    assert log[-1] == ("close", 4)


def test_a_resumed_run_tells_init_what_ran_before(problem, tmp_path):
    path = tmp_path / "run.npz"
    log = []

    class StopsAtFive(Recorder):
        def step(self, state, done):
            if state == 5:  # after the sixth segment, which the checkpoint holds
                self.log.append(("stopped", done))
                raise KeyboardInterrupt
            return super().step(state, done)

    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **_kw(problem), checkpoint=path, checkpoint_every=0.0,
                    progress=StopsAtFive(log))
    assert log[-2][0] == "stopped"
    stopped = log[-2][1]
    log2 = []
    res = fa.simulate(problem, **_kw(problem), checkpoint=path, progress=Recorder(log2))
    assert log2[0] == ("init", 1200, "fedavg, 3 chunks of 4 trials", stopped)
    assert [s[1] for s in log2 if s[0] == "step"][-1] == 1200
    _same(res, fa.simulate(problem, **_kw(problem)))


def test_a_sweep_tells_one_meter_about_every_point(problem):
    log = []
    kw = _kw(problem)
    kw.pop("stepsize")
    res = fa.sweep(problem, grid={"stepsize": [0.01, 0.05]}, progress=Recorder(log), **kw)
    assert log[0] == ("init", 2 * 1200, "sweep of 2 points x 400 rounds", 0)
    done = [s[1] for s in log if s[0] == "step"]
    assert done[-1] == 2400 and all(a < b for a, b in zip(done, done[1:]))
    _same(res.results[1], fa.simulate(problem, **_kw(problem)))


def test_the_text_meter_writes_a_line_per_increase(problem, capsys):
    res = fa.simulate(problem, **_kw(problem), progress=fa.TextProgressMeter(0.25))
    _same(res, fa.simulate(problem, **_kw(problem)))
    lines = capsys.readouterr().err.strip().splitlines()
    pattern = re.compile(r"fedavg, 3 chunks of 4 trials: (\d+\.\d)% \((\d+)/1200 rounds\), \d+\.\d s elapsed, "
                         r"~(\d+\.\d|nan) s left$")
    matches = [pattern.match(line) for line in lines]
    assert all(matches), lines
    percent = [float(m.group(1)) for m in matches]
    assert percent[-1] == 100.0 and 3 <= len(percent) <= 4  # 25%, 50%, 75% (or so), 100%
    assert all(b - a >= 25.0 for a, b in zip(percent, percent[1:-1]))
    assert [int(m.group(2)) for m in matches] == [round(12 * p) for p in percent]


def test_true_is_a_tqdm_bar_and_a_callable_a_callback(problem, capsys):
    seen = []
    fa.simulate(problem, **_kw(problem, trials=4), progress=lambda d, t, s: seen.append((d, t)))
    assert seen[-1] == (400, 400) and all(isinstance(d, int) for d, _ in seen)
    fa.simulate(problem, **_kw(problem, trials=4), progress=True)
    assert "400/400" in capsys.readouterr().err


@pytest.mark.parametrize("make, match", [
    (lambda: fa.TextProgressMeter(0), r"TextProgressMeter minimum_increase must be a fraction"),
    (lambda: fa.TextProgressMeter(1.5), r"TextProgressMeter minimum_increase"),
    (lambda: fa.TqdmProgressMeter(-1.0),
     r"TqdmProgressMeter refresh_s \(seconds\) \(-1\) must be finite and >= 0"),
    (lambda: fa.CallbackProgressMeter(3), r"CallbackProgressMeter needs a callable, got 3"),
])
def test_bad_meters_are_refused_in_one_line(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("progress", ["yes", 1, fa.TextProgressMeter, None.__class__])
def test_a_progress_that_is_no_meter_is_refused_before_any_work(problem, progress):
    with pytest.raises(ValueError, match=r"progress must be True, False, a callback"):
        fa.simulate(problem, **_kw(problem), progress=progress)
    with pytest.raises(ValueError, match=r"progress must be True, False, a callback"):
        kw = _kw(problem)
        kw.pop("stepsize")
        fa.sweep(problem, grid={"stepsize": [0.05]}, progress=progress, **kw)


def test_the_meter_interface_is_abstract():
    with pytest.raises(TypeError):
        fa.AbstractProgressMeter()

    class Half(fa.AbstractProgressMeter):  # no close
        def init(self, total, label, done=0):
            return None

        def step(self, state, done):
            return None

    with pytest.raises(TypeError):
        Half()


# ------------------------------------------------------ reproduce all: the overall line


def test_overall_time_left_follows_the_pace_so_far():
    """A machine 3x slower than the reference: after the first experiment the time left is
    the reference's seconds still to come times 3, the running one counted by its time,
    once it overruns by its work still to do; nothing is estimated before a pace is
    measured."""
    from fedjax_abc.repro.common import Overall, clock

    now = [0.0]
    overall = Overall("abc", {"a": 10.0, "b": 20.0, "c": 70.0, "d": 5.0}, timer=lambda: now[0])
    overall.begin("a")
    assert overall.status(0.0) == "all 0/3, estimating..."  # nothing measured yet
    now[0] = 5.0  # half of a's work in 5 s, compilation included: not yet a pace
    assert overall.status(0.5) == "all 0/3, estimating..."
    now[0] = 30.0
    overall.finish("a")  # 30 s for 10: pace 3
    overall.begin("b")
    assert overall.status(0.0) == f"all 1/3, ~{clock(3 * 70 + 3 * 20)} left"
    now[0] = 60.0  # b 30 s in, whatever share of its work that was
    assert overall.status(0.9) == f"all 1/3, ~{clock(3 * 70 + 30)} left"
    now[0] = 130.0  # b overruns its 60 s: its own pace counts, and its work still to do
    pace = 130.0 / (10.0 + 20.0 * 0.99)
    assert overall.status(0.99) == f"all 1/3, ~{clock(pace * 70 + pace * 20 * 0.01)} left"
    unknown = Overall(["x", "y"], {})  # no reference durations: the count alone
    unknown.begin("x")
    assert unknown.status(0.5) == "all 0/2"


def test_every_experiment_of_reproduce_all_has_a_measured_duration():
    from fedjax_abc import cli
    from fedjax_abc.repro import runtime

    for scale in ("paper", "quick"):
        assert set(runtime.MEASURED_SECONDS[scale]) == set(cli.EXPERIMENTS), scale


def test_a_run_in_trial_chunks_says_so_in_its_label(problem):
    log = []
    kw = _kw(problem)
    fa.simulate(problem, progress=Recorder(log), **dict(kw, trials=10, trial_chunk=5))
    assert log[0][1:3] == (2 * kw["rounds"], "fedavg, 2 chunks of 5 trials")
