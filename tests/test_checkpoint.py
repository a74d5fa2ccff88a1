"""simulate(..., checkpoint=PATH): an interrupted run resumes to the uninterrupted result, bit for bit.

Interruptions are made where a user's Ctrl-C lands: in the progress callback (after a
segment), or inside a segment call (before it returns). The file is checked on disk: an
atomic ``.npz`` without pickles, kept when complete; a file of another run is refused.

A path that cannot be written, or a disk without room for the file, is refused before the
run; so are a changed component class and a second run on the path of a running or
interrupted one; a save never replaces another run's checkpoint.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

import fedjax_abc as fa
import fedjax_abc._engine._checkpoint as _checkpoint
from fedjax_abc._engine._plan import make_plan
from fedjax_abc import cli
from fedjax_abc.repro import common
from small_run import SETTINGS as KW, small_problem

FIELDS = ("gap", "grad_norm_sq", "x", "x_final", "diverged_at", "rounds")


def offsets_problem(n=8, seed=0):
    return fa.problems.huber_offsets(jax.random.key(seed), n=n, d_max=10.0)


def settings(p, **kw):
    base = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=400, record_every=2,
                x0=p.x_star + 3.0, trials=10, trial_chunk=4, key=jax.random.key(0))
    base.update(kw)
    return base


def assert_same(a, b):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def stop_after(count):
    """A progress callback that raises KeyboardInterrupt at its ``count``-th call."""
    calls = []

    def callback(done, total, secs):
        calls.append(done)
        if len(calls) == count:
            raise KeyboardInterrupt

    return callback


@pytest.fixture(scope="module")
def problem():
    return offsets_problem()


@pytest.mark.parametrize("algorithm", [None, fa.algorithms.Scaffold(server_stepsize=0.8)],
                         ids=["fedavg", "scaffold"])
@pytest.mark.parametrize("stop", [5, 100, 130])  # chunk 1; its last segment; chunk 2
def test_interrupted_run_resumes_bit_for_bit(problem, tmp_path, capsys, algorithm, stop):
    kw = settings(problem, algorithm=algorithm)
    reference = fa.simulate(problem, **kw)
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **kw, checkpoint=path, progress=stop_after(stop))
    assert path.exists() and os.listdir(tmp_path) == ["run.npz"]  # no temporary file left
    assert path.stat().st_mode & 0o044 == 0o644 & ~_umask() & 0o044  # as any file written here
    err = capsys.readouterr().err.strip().splitlines()
    chunk = 1 if stop <= 100 else 2
    t = 4 * stop if stop <= 100 else 4 * (stop - 100)  # 100 segments of 4 rounds per chunk
    assert len(err) == 1 and f"round {t} of chunk {chunk} of 3" in err[0] and str(path) in err[0]
    resumed = fa.simulate(problem, **kw, checkpoint=path)
    assert_same(resumed, reference)


CTRL_C_SCRIPT = """
import signal, sys, time, jax, fedjax_abc as fa
signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job ignores it
p = fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)
kw = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=4000, x0=p.x_star + 3.0,
          trials=10, trial_chunk=4, key=jax.random.key(0), record_every=20)
lines = []
def progress(done, *args):
    print(done, flush=True)
    lines.append(done)
    if len(lines) == 150:  # wait for the parent's SIGINT: a fast run could end before it
        time.sleep(120)
fa.simulate(p, **kw, checkpoint=sys.argv[1], progress=progress)
"""


@pytest.mark.slow  # a subprocess importing JAX, interrupted mid-run: 120 s bound under load
def test_ctrl_c_in_another_process(problem, tmp_path):
    """A real SIGINT: one line on stderr says where; the same call here resumes bit for bit."""
    path = tmp_path / "run.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, str(path)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for count, _ in enumerate(proc.stdout, 1):
        if count == 150:  # chunk 2
            proc.send_signal(signal.SIGINT)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and path.exists()
    lines = [ln for ln in err.splitlines() if ln.startswith("fedjax_abc.simulate: stopped at")]
    assert len(lines) == 1 and "of chunk 2 of 3" in lines[0] and str(path) in lines[0]
    kw = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=4000, x0=problem.x_star + 3.0,
              trials=10, trial_chunk=4, key=jax.random.key(0), record_every=20)
    assert_same(fa.simulate(problem, **kw, checkpoint=path), fa.simulate(problem, **kw))


def test_interrupt_between_segments(problem, tmp_path):
    """Ctrl-C in the middle of a run (raised where the progress callback hears of the
    seventh segment): the run resumes from the segment it stopped after."""
    kw = settings(problem)
    reference = fa.simulate(problem, **kw)
    calls = []

    def interrupted(done, total, secs):
        calls.append(done)
        if len(calls) == 7:
            raise KeyboardInterrupt

    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **kw, checkpoint=path, progress=interrupted)
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(str(z["header"]))
    assert (header["chunk"], header["segment"], header["complete"]) == (0, 7, False)
    assert_same(fa.simulate(problem, **kw, checkpoint=path), reference)


def test_saved_file_mid_run_resumes(problem, tmp_path):
    """The file as it stands on disk mid-run (as after a hard kill) resumes bit for bit."""
    kw = settings(problem, algorithm=fa.algorithms.Scaffold(), rounds=200, record_every=4,
                  checkpoint_every=0.0)  # saved after every segment
    path, copy = tmp_path / "run.npz", tmp_path / "killed.npz"
    calls = []

    def snapshot(done, total, secs):
        calls.append(done)
        if len(calls) == 70:  # chunk 2, segment 20
            shutil.copy(path, copy)

    reference = fa.simulate(problem, **kw, checkpoint=path, progress=snapshot)
    with np.load(copy, allow_pickle=False) as z:
        header = json.loads(str(z["header"]))
    assert (header["chunk"], header["segment"]) == (1, 20)
    assert_same(fa.simulate(problem, **kw, checkpoint=copy), reference)


def test_complete_file_is_kept_and_returns_the_result(problem, tmp_path):
    kw = settings(problem, rounds=40, trials=5, trial_chunk=None)
    path = tmp_path / "run.npz"
    first = fa.simulate(problem, **kw, checkpoint=path)
    with np.load(path, allow_pickle=False) as z:
        assert json.loads(str(z["header"]))["complete"] is True
    # a run reports every segment to its progress callback: none may be reported
    never = lambda *a: pytest.fail("ran again")  # noqa: E731
    assert_same(fa.simulate(problem, **kw, checkpoint=path, progress=never), first)


def test_short_last_interval_resumes(problem, tmp_path):
    """A prime T with the default record_every: the shorter last interval is a segment too."""
    kw = settings(problem, rounds=1009, record_every=None, trials=3, trial_chunk=None)
    reference = fa.simulate(problem, **kw)
    assert reference.rounds[-2:].tolist() == [1008, 1009]
    path = tmp_path / "run.npz"
    segments = make_plan(1009, 2, 3, np.float64, jax.local_devices(), True).segments()
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **kw, checkpoint=path, progress=stop_after(len(segments) - 1))
    assert_same(fa.simulate(problem, **kw, checkpoint=path), reference)


@pytest.mark.parametrize("change,setting", [
    (dict(stepsize=0.04), "stepsize"),
    (dict(key=jax.random.key(1)), "key"),
    (dict(x0=np.full((10, 1), 1.0)), "x0"),
    (dict(local_steps=2), "local_steps (Q)"),
    (dict(trial_chunk=5), "trial_chunk"),
    (dict(algorithm=fa.algorithms.FedAvg(server_stepsize=0.5)), "algorithm"),
    (dict(mode="gather"), "mode"),
    (dict(dtype="float32"), "dtype"),
    (dict(transform=fa.transforms.dp_fedavg(0.5, 1.0)), "transform"),
    (dict(local_steps=fa.UniformSteps(3)), "local_steps"),
    (dict(pad_trials=False), "pad_trials"),
])
def test_checkpoint_of_another_run_is_refused(problem, tmp_path, change, setting):
    kw = settings(problem, rounds=40)
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **kw, checkpoint=path, progress=stop_after(3))
    never = lambda *a: pytest.fail("started")  # noqa: E731
    with pytest.raises(ValueError, match=r"written for another run: ") as err:
        fa.simulate(problem, **dict(kw, **change), checkpoint=path, progress=never)
    message = str(err.value)
    assert "\n" not in message and setting in message.split("another run: ")[1]


def test_other_problem_data_is_refused(problem, tmp_path):
    kw = settings(problem, rounds=40, trials=3, trial_chunk=None)
    path = tmp_path / "run.npz"
    fa.simulate(problem, **kw, checkpoint=path)
    other = offsets_problem(seed=5)
    with pytest.raises(ValueError, match=r"another run: problem differ"):
        fa.simulate(other, **dict(kw, x0=problem.x_star + 3.0), checkpoint=path)


def test_a_checkpoint_of_other_library_code_is_refused(problem, tmp_path):
    """fedjax_abc's version stays one across changes of its code: a checkpoint written by
    other code of the package (whose numbers may differ; here its header says so, as a
    file written before a change of the package would) is refused, naming it."""
    kw = settings(problem, rounds=40, trials=3, trial_chunk=None)
    path = tmp_path / "run.npz"
    fa.simulate(problem, **kw, checkpoint=path)
    fa.simulate(problem, **kw, checkpoint=path)  # the same code: read back
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays["header"]))
    assert len(header["fingerprint"]["fedjax_abc code"]) == 64  # a SHA-256 of the sources
    header["fingerprint"]["fedjax_abc code"] = "0" * 64
    arrays["header"] = np.asarray(json.dumps(header))
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ValueError, match=r"another run: fedjax_abc code differ"):
        fa.simulate(problem, **kw, checkpoint=path)


def test_a_complete_file_of_another_transform_is_refused(problem, tmp_path):
    kw = settings(problem, rounds=40, trials=3, trial_chunk=None)
    path = tmp_path / "run.npz"
    fa.simulate(problem, **kw, checkpoint=path)  # complete, without a transform
    for transform in (fa.transforms.dp_fedavg(0.5, 1.0), fa.transforms.QSGD(2)):
        with pytest.raises(ValueError, match=r"another run: .*transform"):
            fa.simulate(problem, **kw, transform=transform, checkpoint=path)
    path = tmp_path / "qsgd.npz"
    fa.simulate(problem, **kw, transform=fa.transforms.QSGD(2), checkpoint=path)
    with pytest.raises(ValueError, match=r"another run: .*transform"):
        fa.simulate(problem, **kw, transform=fa.transforms.QSGD(4), checkpoint=path)


def test_a_field_added_to_a_component_is_in_the_fingerprint(problem, tmp_path):
    import equinox as eqx

    class Scaled(fa.transforms.Clip):  # a user's transform with a setting of its own
        scale: float = eqx.field(static=True, default=1.0)

        def __init__(self, norm, scale=1.0):
            super().__init__(norm)
            self.scale = scale

    kw = settings(problem, rounds=40, trials=3, trial_chunk=None)
    path = tmp_path / "run.npz"
    fa.simulate(problem, **kw, transform=Scaled(1.0, 1.0), checkpoint=path)
    with pytest.raises(ValueError, match=r"another run: transform differ;"):
        fa.simulate(problem, **kw, transform=Scaled(1.0, 2.0), checkpoint=path)


def test_a_failing_save_loses_no_result(problem, tmp_path):
    import shutil

    kw = settings(problem, rounds=40, trials=3, trial_chunk=None)
    folder = tmp_path / "gone"
    path = folder / "run.npz"
    calls = []

    def remove_folder_at_the_end(done, total, secs):  # the folder goes after the work
        calls.append(done)
        if done == total:
            shutil.rmtree(folder)
            folder.write_text("a file where the folder was: nothing can be saved there")

    with pytest.warns(RuntimeWarning, match=r"checkpoint \(.*gone.run\.npz\) could not be "
                                            r"saved .*result is returned"):
        res = fa.simulate(problem, **kw, checkpoint=path, progress=remove_folder_at_the_end)
    assert calls and folder.is_file()
    assert_same(res, fa.simulate(problem, **kw))


def test_not_a_checkpoint(problem, tmp_path):
    path = tmp_path / "run.npz"
    path.write_text("hello")
    with pytest.raises(ValueError, match=r"not a fedjax_abc checkpoint"):
        fa.simulate(problem, **settings(problem, rounds=40), checkpoint=path)
    with pytest.raises(ValueError, match=r"checkpoint .* is a folder"):
        fa.simulate(problem, **settings(problem, rounds=40), checkpoint=tmp_path)


def test_digest_is_stable_and_sees_closures():
    """Functions are described by code and closure, not by their address."""
    def make(c):
        return lambda x: c * x

    assert _checkpoint.digest(make(2.0)) == _checkpoint.digest(make(2.0))
    assert _checkpoint.digest(make(2.0)) != _checkpoint.digest(make(3.0))
    a, b = fa.algorithms.FedOpt(__import__("optax").adam(0.1)), fa.algorithms.FedOpt(
        __import__("optax").adam(0.2))
    assert _checkpoint.digest(a) != _checkpoint.digest(b)


def test_cli_rerun_resumes(tmp_path, monkeypatch):
    """reproduce fig1, stopped in its second run, then rerun: the same JSON numbers."""
    args = ["reproduce", "fig1", "--quick", "--trials", "3", "--rounds", "100", "--quiet"]
    assert cli.main(args + ["--out", str(tmp_path / "ref"), "--no-checkpoint"]) == 0
    original, calls = common.Progress.task, []

    def task(self, desc, work):
        inner = original(self, desc, work)

        def callback(*a):
            calls.append(desc)
            if desc == "S=4" and calls.count("S=4") == 30:
                raise KeyboardInterrupt
            inner(*a)

        return callback

    out = tmp_path / "out"
    monkeypatch.setattr(common.Progress, "task", task)
    assert cli.main(args + ["--out", str(out)]) == 130
    # the runs' checkpoints, and the time the stopped run took (the rerun adds it to its own)
    assert sorted(os.listdir(out / "checkpoints" / "fig1")) == ["S=1.npz", "S=4.npz",
                                                                 common.ELAPSED_FILE]
    monkeypatch.setattr(common.Progress, "task", original)
    assert cli.main(args + ["--out", str(out)]) == 0
    assert not (out / "checkpoints").exists()
    ref, got = (json.loads((d / "fig1.json").read_text()) for d in (tmp_path / "ref", out))
    for key in ("mean_gap", "ci95_gap", "final_gap", "rounds", "diverged"):
        assert got[key] == ref[key], key


def test_cli_all_resumes_the_finished_experiments_from_their_checkpoints(tmp_path,
                                                                        monkeypatch):
    """reproduce all, stopped in its second experiment, then rerun: the first is read back
    from its checkpoints (kept until every experiment is written; deleted after each one
    before, so a rerun computed it again), with the same numbers."""
    monkeypatch.setattr(cli, "EXPERIMENTS", ("fig1", "remark4"))
    args = ["reproduce", "all", "--quick", "--trials", "3", "--rounds", "100", "--quiet"]
    out = tmp_path / "out"
    real_runner = cli._runner

    def stopped(name):
        run, write = real_runner(name)
        if name != "remark4":
            return run, write

        def stop(settings, progress):
            raise KeyboardInterrupt

        return stop, write

    monkeypatch.setattr(cli, "_runner", stopped)
    assert cli.main(args + ["--out", str(out)]) == 130
    first = json.loads((out / "fig1.json").read_text())
    assert os.listdir(out / "checkpoints" / "fig1")  # kept: the experiment is written
    monkeypatch.setattr(cli, "_runner", real_runner)
    ran = []
    original = common.Progress.task

    def task(self, desc, work):
        inner = original(self, desc, work)
        return lambda *a: (ran.append((self.label, desc)), inner(*a))

    monkeypatch.setattr(common.Progress, "task", task)
    assert cli.main(args + ["--out", str(out)]) == 0
    assert not [r for r in ran if r[0] == "fig1"]  # read back, not run
    assert not (out / "checkpoints").exists()
    again = json.loads((out / "fig1.json").read_text())
    for key in ("mean_gap", "ci95_gap", "final_gap", "rounds", "diverged"):
        assert again[key] == first[key], key


def test_cli_help_documents_checkpoint(capsys):
    assert cli.main(["reproduce", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--checkpoint DIR" in text and "resumes" in text and "<out>/checkpoints" in text


# ----------------------------------------- unwritable paths and changed component classes


@pytest.fixture(scope="module")
def problem6():
    return small_problem()


ORACLE = '''
import jax
import fedjax_abc as fa


class ScaledNoise(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + {} * z
'''


def _module(path, name, text):
    import importlib.util

    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(problem, oracle, path, **kw):
    return fa.simulate(problem, num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0,
                       oracle=oracle, checkpoint=path, **dict(KW, **kw))


def test_unwritable_checkpoint_is_refused_before_the_run(problem6, tmp_path):
    (tmp_path / "file").write_text("")
    calls = []
    with pytest.raises(OSError, match=r"checkpoint \(.*file/c\.npz\) cannot be written"):
        fa.simulate(problem6, num_sampled=2, stepsize=0.05, x0=problem6.x_star + 2.0,
                    checkpoint=tmp_path / "file" / "c.npz",
                    progress=lambda *a: calls.append(a), **KW)
    assert calls == []  # refused before the first round
    # a folder that does not exist yet is made
    res = fa.simulate(problem6, num_sampled=2, stepsize=0.05, x0=problem6.x_star + 2.0,
                      checkpoint=tmp_path / "new" / "c.npz", **KW)
    assert os.path.exists(tmp_path / "new" / "c.npz") and res.trials == 3
    assert [n for n in os.listdir(tmp_path / "new")] == ["c.npz"]  # the probe is removed


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_checkpoint_folder_is_refused(problem6, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(OSError, match="cannot be written"):
            _run(problem6, None, folder / "c.npz")
    finally:
        folder.chmod(0o700)


def test_checkpoint_refuses_a_changed_component_class(problem6, tmp_path):
    source, path = tmp_path / "user_oracles.py", tmp_path / "c.npz"
    old = _module(source, "user_oracles", ORACLE.format("0.1")).ScaledNoise()
    first = _run(problem6, old, path)
    # the same code: the complete checkpoint is the result
    same = _module(source, "user_oracles", ORACLE.format("0.1")).ScaledNoise()
    assert _run(problem6, same, path).equals(first)
    new = _module(source, "user_oracles", ORACLE.format("0.2")).ScaledNoise()
    with pytest.raises(ValueError, match=r"another run: code of user_oracles\.ScaledNoise differ"):
        _run(problem6, new, path)
    assert not _run(problem6, new, tmp_path / "d.npz").equals(first)  # it does change the numbers


def test_checkpoint_refuses_a_changed_class_without_source(problem6, tmp_path):
    def make(scale):
        namespace = {"__name__": "session"}
        exec(ORACLE.format(scale), namespace)  # no file: the methods' bytecode is compared
        return namespace["ScaledNoise"]()

    path = tmp_path / "c.npz"
    first = _run(problem6, make("0.1"), path)
    assert _run(problem6, make("0.1"), path).equals(first)
    with pytest.raises(ValueError, match=r"code of session\.ScaledNoise differ"):
        _run(problem6, make("0.2"), path)


# ------------------------------------------- two runs on one checkpoint path, a full disk


def _sim(problem, stepsize, path, **kw):
    return fa.simulate(problem, num_sampled=2, stepsize=stepsize, x0=problem.x_star + 2.0,
                       checkpoint=path, **dict(KW, **kw))


def test_second_run_started_on_the_path_of_a_running_one_is_refused(problem6, tmp_path):
    path, seen = tmp_path / "c.npz", []

    def start_another(done, total, secs):  # while the first run goes on, before any save
        if not seen:
            with pytest.raises(ValueError) as err:
                _sim(problem6, 0.1, path)
            seen.append(str(err.value))

    first = _sim(problem6, 0.05, path, progress=start_another)
    assert len(seen) == 1
    assert seen[0].startswith(f"checkpoint ({path}) was written for another run: stepsize differ")
    assert "\n" not in seen[0]
    # the first run's checkpoint is whole: the same call returns its result
    assert _sim(problem6, 0.05, path).equals(first)


def test_interrupted_run_is_not_overwritten_by_other_settings(problem6, tmp_path):
    path = tmp_path / "c.npz"

    def stop(done, total, secs):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _sim(problem6, 0.05, path, progress=stop)
    with pytest.raises(ValueError, match=r"was written for another run: key differ; delete it"):
        _sim(problem6, 0.05, path, key=jax.random.key(1))
    # the interrupted run resumes, and gives the uninterrupted run's numbers
    assert _sim(problem6, 0.05, path).equals(_sim(problem6, 0.05, None))


def test_save_never_replaces_another_runs_checkpoint(problem6, tmp_path):
    path, other = tmp_path / "c.npz", []

    def take_over(done, total, secs):  # the file removed and another run's put there
        if not other:
            os.remove(path)
            other.append(_sim(problem6, 0.1, path))

    with pytest.warns(RuntimeWarning, match=r"checkpoint \(.*c\.npz\) now holds another run's "
                                            r"\(stepsize differ\): it is kept"):
        first = _sim(problem6, 0.05, path, progress=take_over)
    assert not first.equals(other[0])
    assert _sim(problem6, 0.1, path).equals(other[0])  # the other run's complete file


def test_checkpoint_on_a_full_disk_is_refused_before_the_run(problem6, tmp_path, monkeypatch):
    import shutil

    calls, usage = [], shutil.disk_usage(tmp_path)
    # 3 trials x (3 records x 5 values + 1): 384 bytes of results, 64 kB of headers
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda folder: usage._replace(free=100_000))
    with pytest.raises(OSError, match=r"checkpoint \(.*c\.npz\) cannot be written: it takes "
                                      r"about 6\d\.\d kB, twice that while a save replaces the "
                                      r"last one, and its disk has 100\.0 kB free"):
        _sim(problem6, 0.05, tmp_path / "c.npz", progress=lambda *a: calls.append(a))
    assert calls == [] and os.listdir(tmp_path) == []
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda folder: usage._replace(free=10 ** 6))
    assert _sim(problem6, 0.05, tmp_path / "c.npz").trials == 3


class _BrokenLocalStep(fa.algorithms.AbstractLocalSGD):
    """Local SGD whose local step fails while the run's program is traced."""

    reads_scale = False

    def init(self, x0):
        return fa.algorithms.FedAvg().init(x0)

    def server_update(self, server, mean_message, info):
        return type(server)(mean_message)

    def local_step(self, server, y, local, gradient, stepsize):
        raise RuntimeError("a bug in the user's algorithm")


def test_run_stopped_before_its_first_round_leaves_no_claim(problem6, tmp_path):
    path = tmp_path / "c.npz"
    with pytest.raises(RuntimeError, match="a bug in the user's algorithm"):
        _sim(problem6, 0.05, path, algorithm=_BrokenLocalStep())  # fails while compiling
    assert not path.exists()  # the claim is gone: the mended call is not refused
    assert _sim(problem6, 0.1, path).trials == 3
