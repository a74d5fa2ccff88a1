"""``fedjax-abc run GRID.toml``: the example grids run at reduced scale, write the labelled
result, the summary and the plots, give simulate's numbers, and resume where they stopped.
Parts written by another grid are not resumed, and bad settings of a grid file are refused in
one line.

The algorithms example (three parts, about 17 s) is behind the slow marker."""

import os
import pathlib
import time

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import grid

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "grids").glob("*.toml"))
SMALL = ["--trials", "8", "--rounds", "20", "--quiet"]


def test_two_example_grids_ship():
    assert [p.name for p in EXAMPLES] == ["algorithms.toml", "table2_stepsizes.toml"]


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) for p in EXAMPLES],
                         ids=lambda p: p.stem)  # 11 s and more each
def test_example_grid_runs_and_resumes(path, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)] + SMALL) == 0
    spec = grid.load_spec(str(path), trials=8, rounds=20)
    res = fa.load(out / "result.nc")
    assert isinstance(res, fa.SweepResult) and list(res.axes) == list(spec.doc["grid"])
    assert res.gap.shape[-2] == 8 and res.rounds[-1] == 20
    if "algorithm" in res.axes:  # a component's table is labelled by its name and arguments
        assert res.axes["algorithm"] == ("FedAvg", "FedProx(mu=0.1)", "Scaffold")
    for name in ["summary.csv", "curves.png"] + [f"final_{a.replace('.', '_')}.png"
                                                  for a in res.axes]:
        assert (out / name).stat().st_size > 0, name
    # the last grid point is simulate's, bit for bit (to rounding where eta_g != 1)
    doc, last = spec.doc, res.results[-1]
    point = res.points[-1]
    table = dict(doc["problem"], **({"d_max": point["problem.d_max"]}
                                    if "problem.d_max" in point else {}))
    problem = fa.problems.huber_offsets(jax.random.key(table["seed"]), n=table["n"],
                                        d_max=table["d_max"])
    algorithm = getattr(fa.algorithms, doc["grid"]["algorithm"][-1]["name"])() \
        if "algorithm" in point else None
    ref = fa.simulate(problem, key=jax.random.key(doc["seed"]), trials=8, rounds=20,
                      local_steps=doc["local_steps"], mode=doc["mode"], record_x=False,
                      num_sampled=point.get("num_sampled", doc.get("num_sampled")),
                      stepsize=point.get("stepsize", doc.get("stepsize")),
                      x0=problem.x_star + point.get("x0_offset", doc.get("x0_offset", 0.0)),
                      algorithm=algorithm, record_every=doc.get("record_every"))
    assert ref.equals(last)
    # an interruption after the first part: the rerun loads it and runs the others
    parts = sorted(os.listdir(out / "parts"))
    for name in parts[1:]:
        os.remove(out / "parts" / name)
    os.remove(out / "result.nc")
    capsys.readouterr()
    assert cli.main(["run", str(path), "--out", str(out)] + SMALL) == 0
    assert f"{len(parts)} parts, 1 resumed" in capsys.readouterr().out
    assert fa.load(out / "result.nc").equals(res)
    # other settings in the same folder are refused
    assert cli.main(["run", str(path), "--out", str(out), "--trials", "9", "--quiet"]) == 1


def test_bad_grid_files_are_refused(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('trials = 8\nrounds = 10\nlocal_steps = 2\nstepsize = 0.1\n'
                   '[problem]\nname = "huber_offsets"\nseed = 0\n[grid]\nrounds = [1, 2]\n')
    assert cli.main(["run", str(bad), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert "not a setting a sweep can vary" in capsys.readouterr().err
    bad.write_text('trials = 8\nbogus = 1\n')
    assert cli.main(["run", str(bad), "--quiet"]) == 1
    assert "unknown keys ['bogus']" in capsys.readouterr().err


# ------------------------------------------------------------ a job array over the parts

ARRAY_GRID = """name = "array"
seed = 0
trials = 8
rounds = 12
record_every = 4
local_steps = 2
mode = "gather"
x0_offset = 3.0

[problem]
name = "huber_offsets"
n = 10
d_max = 20.0
seed = 0

[grid]
num_sampled = [2, 3, 5]
stepsize = [1e-3, 4e-3]
"""


def test_a_job_array_merges_to_the_one_process_result(tmp_path, capsys, monkeypatch):
    """A 3 x 2 grid (three parts) run as two tasks: the first leaves parts for the other,
    merge names them and writes nothing; the second task's last part joins them: the
    single process's result.nc, bit for bit. A Slurm array's variables set the share."""
    path = tmp_path / "array.toml"
    path.write_text(ARRAY_GRID)
    whole, shared = tmp_path / "whole", tmp_path / "shared"
    assert cli.main(["run", str(path), "--out", str(whole), "--quiet"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")  # ids 1..2: task 0 of 2 runs parts 0 and 2
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    assert cli.main(["run", str(path), "--out", str(shared), "--quiet"]) == 0
    assert "parts 1 of 3 wait for other tasks" in capsys.readouterr().out
    assert sorted(os.listdir(shared / "parts")) == ["0.nc", "2.nc"]
    assert cli.main(["merge", str(path), "--out", str(shared)]) == 1
    assert "parts 1 of 3 are not saved yet" in capsys.readouterr().err
    assert not (shared / "result.nc").exists()
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    assert cli.main(["run", str(path), "--out", str(shared), "--part", "1", "--of", "2",
                     "--quiet"]) == 0
    assert "3 parts, 2 resumed" in capsys.readouterr().out
    assert fa.load(shared / "result.nc").equals(fa.load(whole / "result.nc"))
    os.remove(shared / "result.nc")
    assert cli.main(["merge", str(path), "--out", str(shared)]) == 0
    assert fa.load(shared / "result.nc").equals(fa.load(whole / "result.nc"))


def test_merge_says_what_to_give_and_writes_nothing_where_there_is_nothing(tmp_path, capsys):
    """A task's hint names the merge that joins its parts (folder, trials); a merge of an
    empty folder writes nothing there; one given other trials names what differs."""
    path, out = _array_grid(tmp_path), tmp_path / "shared"
    assert cli.main(["run", str(path), "--out", str(out), "--part", "0", "--of", "2",
                     "--trials", "4", "--quiet"]) == 0
    assert f"merge {path} --out {out} --trials 4' joins them" in capsys.readouterr().out
    empty = tmp_path / "empty"
    assert cli.main(["merge", str(path), "--out", str(empty)]) == 1
    assert "holds no parts of a grid run" in capsys.readouterr().err
    assert not empty.exists()
    assert cli.main(["merge", str(path), "--out", str(out)]) == 1  # the tasks had 4 trials
    assert "other settings (trials differ" in capsys.readouterr().err


def test_the_task_that_ends_last_joins_parts_saved_while_it_ran(tmp_path):
    """Task 1 of 2 computes its part while task 0 runs and saves the other: task 1, ending
    last, joins both (it looked at task 0's part only before running its own, and neither
    task joined)."""
    spec = grid.load_spec(str(_array_grid(tmp_path)))
    out = str(tmp_path / "out")
    seen = {}

    class OtherTaskMeanwhile:
        """Task 1's progress: as its first part starts, task 0 runs all of its own."""

        def plan(self, work):
            pass

        def task(self, label, work, unit):
            if not seen:
                seen["task 0"] = None
                seen["task 0"] = grid.run_grid(spec, out, None, 0, 2)
            return None

        def finish_task(self):
            pass

    last = grid.run_grid(spec, out, OtherTaskMeanwhile(), 1, 2)
    assert seen["task 0"]["result"] is None and seen["task 0"]["missing"] == [1]
    assert last["missing"] == [] and last["result"] is not None
    assert os.path.exists(os.path.join(out, "result.nc"))


@pytest.mark.parametrize("part, of, env, message", [
    (None, 2, {}, "together"), (2, 2, {}, "must be in"),
    (None, None, {"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "2"}, "integers"),
    (None, None, {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0",
                  "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, "steps of 2"),
])
def test_a_bad_task_share_is_one_line(part, of, env, message):
    with pytest.raises(ValueError, match=message):
        grid.task_share(part, of, env)
    assert grid.task_share(None, None, {}) == (None, None)


def test_a_stepped_slurm_array_shares_every_part():
    """--array=2-8:2 runs tasks 2, 4, 6, 8: shares 0-3 of 4 (read as 0, 2 and out of range
    before, so that parts 1 and 3 never ran)."""
    env = {"SLURM_ARRAY_TASK_MIN": "2", "SLURM_ARRAY_TASK_STEP": "2",
           "SLURM_ARRAY_TASK_COUNT": "4"}
    shares = [grid.task_share(None, None, dict(env, SLURM_ARRAY_TASK_ID=str(t)))
              for t in (2, 4, 6, 8)]
    assert shares == [(0, 4), (1, 4), (2, 4), (3, 4)]


# ------------------------------------------------- submitted through submitit (the slurm extra)

FAKE_SLURM = ROOT / "tests" / "fake_slurm"  # stand-ins for sbatch, sacct, srun and scancel
try:  # submitit sets up its loggers on sys.stdout/err when imported: here, not in a test's
    import submitit  # noqa: F401  (capsys closes its streams after the test)
except ImportError:
    pass


def _array_grid(tmp_path, slurm: str = "") -> pathlib.Path:
    path = tmp_path / "array.toml"
    path.write_text(ARRAY_GRID + slurm)
    return path


def _on_fake_slurm(monkeypatch, tmp_path, run: bool):
    state = tmp_path / "slurm_state"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{FAKE_SLURM}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_STATE", str(state))
    monkeypatch.setenv("FAKE_SLURM_RUN", "1" if run else "0")


def test_submission_asks_slurm_for_what_the_file_and_the_options_say(tmp_path, monkeypatch,
                                                                       capsys):
    """submitit's Slurm executor writes the array job: 2 tasks, 2 at once, the [slurm]
    table's partition and time, the command line's cores; nothing runs here."""
    pytest.importorskip("submitit")
    _on_fake_slurm(monkeypatch, tmp_path, run=False)
    path = _array_grid(tmp_path, '\n[slurm]\npartition = "gpu"\ntime_min = 30\n'
                                 'cpus_per_task = 1\n')
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out), "--submit", "slurm", "--tasks", "2",
                     "--cpus-per-task", "2", "--array-parallelism", "2"]) == 0
    assert "2 tasks submitted (slurm, jobs 4242_0..4242_1) for 3 parts" in capsys.readouterr().out
    script = (out / "submitit" / "4242_submission.sh").read_text()
    for line in ("#SBATCH --array=0-1%2", "#SBATCH --partition=gpu", "#SBATCH --time=30",
                 "#SBATCH --cpus-per-task=2"):
        assert line in script, line
    assert cli.main(["run", str(path), "--out", str(out), "--submit", "slurm",
                     "--part", "0", "--of", "2"]) == 1
    assert "no --part or --of" in capsys.readouterr().err


def test_bad_executor_settings_are_one_line(tmp_path):
    submit = pytest.importorskip("fedjax_abc.repro.submit")
    with pytest.raises(ValueError, match="unknown key 'queue'"):
        submit.executor_parameters({"queue": "x"})
    with pytest.raises(ValueError, match="time_min must be an integer >= 1"):
        submit.executor_parameters({"time_min": 0})
    assert submit.executor_parameters({"partition": "a", "gpus_per_task": 1}) == {
        "slurm_partition": "a", "gpus_per_node": 1}


def test_a_task_that_raised_is_not_counted_done():
    """A local job that raised ends in submitit's state FINISHED: the run counted it done
    and then said its parts were not saved; it is a failed task, and so is a task whose
    result cannot be read."""
    submit = pytest.importorskip("fedjax_abc.repro.submit")

    class Job:
        def __init__(self, state, error=None, unreadable=False):
            self.state, self.error, self.unreadable = state, error, unreadable

        def exception(self):
            if self.unreadable:
                raise RuntimeError("no result file")
            return self.error

    good, raised = Job("FINISHED"), Job("FINISHED", ValueError("bad grid"))
    jobs = [good, raised, Job("COMPLETED", unreadable=True), Job("BOOT_FAIL")]
    assert submit.failed_jobs(jobs) == jobs[1:]
    assert submit.failed_jobs([good]) == []


def test_a_preempted_task_is_requeued_as_itself():
    """submitit calls checkpoint() on preemption or timeout: the same task is submitted
    again, and it resumes at its first part not saved (the grid's own resume)."""
    submit = pytest.importorskip("fedjax_abc.repro.submit")
    task = submit.Task("g.toml", "out", 8, None, 1, 3)
    again = task.checkpoint()
    assert again.function == task and again.args == () and again.kwargs == {}


@pytest.mark.slow  # two array tasks, each a fresh process importing JAX: about 20-30 s
@pytest.mark.parametrize("cluster", ["slurm", "local"])
def test_submitted_tasks_merge_to_the_one_process_result(cluster, tmp_path, monkeypatch,
                                                         capsys):
    """The 3-part grid as 2 array tasks through submitit's real Slurm executor (stand-in
    sbatch and sacct run them as local processes) or its local one: waited for, reported
    and joined; result.nc is the single process's, bit for bit."""
    pytest.importorskip("submitit")
    path = _array_grid(tmp_path)
    whole, shared = tmp_path / "whole", tmp_path / "shared"
    assert cli.main(["run", str(path), "--out", str(whole), "--quiet"]) == 0
    if cluster == "slurm":
        _on_fake_slurm(monkeypatch, tmp_path, run=True)
    assert cli.main(["run", str(path), "--out", str(shared), "--submit", cluster, "--tasks",
                     "2", "--wait"]) == 0
    captured = capsys.readouterr()
    assert "6 grid points from 3 parts" in captured.out
    assert "tasks: 2 done, 0 running, 0 failed of 2" in captured.err
    assert fa.load(shared / "result.nc").equals(fa.load(whole / "result.nc"))


# ------------------------------------------------------------------- the Slurm job scripts

SBATCH = sorted((ROOT / "examples" / "slurm").glob("*.sbatch"))


@pytest.mark.parametrize("script", SBATCH, ids=lambda p: p.name)
def test_a_job_script_parses_and_names_what_exists(script):
    """bash parses it; its #SBATCH lines come before its first command; its paths are
    relative to the repository root; the files and options it uses exist."""
    import subprocess

    subprocess.run(["bash", "-n", str(script)], check=True)
    lines = [line for line in script.read_text().splitlines() if line.strip()]
    body = [i for i, line in enumerate(lines) if not line.startswith("#")]
    assert all(not line.startswith("#SBATCH") for line in lines[body[0]:])
    text = script.read_text()
    assert "/home/" not in text and "/work/" not in text and "/tmp/" not in text
    for path in ("examples/multiprocess.py", "examples/grids/table2_stepsizes.toml"):
        if path in text:
            assert (ROOT / path).exists(), path
    if "fedjax-abc run" in text:
        args = cli.build_parser().parse_args(["run", "g.toml", "--out", "results/g", "--quiet"])
        assert args.command == "run" and args.part is None  # the array's variables decide
    if "multiprocess.py" in text:
        for option in ("--coordinator", "--processes", "--id", "--shard", "--out"):
            assert option in text and option in (ROOT / "examples" / "multiprocess.py").read_text()


@pytest.mark.slow  # two tasks, each a fresh process importing JAX: about 20 s
def test_the_array_script_run_as_slurm_would_gives_the_one_process_result(tmp_path):
    """grid_array.sbatch run by bash twice with a two-task array's variables, from the
    repository's layout: its result.nc is the single process's, bit for bit."""
    import shutil
    import subprocess

    (tmp_path / "examples" / "slurm").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "slurm" / "grid_array.sbatch", tmp_path / "examples" / "slurm")
    path = tmp_path / "array.toml"
    path.write_text(ARRAY_GRID)
    for task in (0, 1):
        env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN="0",
                   SLURM_ARRAY_TASK_COUNT="2", SLURM_CPUS_PER_TASK="1", JAX_PLATFORMS="cpu")
        subprocess.run(["bash", "examples/slurm/grid_array.sbatch", "array.toml"], cwd=tmp_path,
                       env=env, check=True)
    whole = tmp_path / "whole"
    assert cli.main(["run", str(path), "--out", str(whole), "--quiet"]) == 0
    a, b = fa.load(tmp_path / "results" / "array" / "result.nc"), fa.load(whole / "result.nc")
    assert a.axes == b.axes  # the numbers bit for bit (the config names one device, not two)
    for one, other in zip(a.results, b.results):
        for name in ("gap", "grad_norm_sq", "x_final"):
            np.testing.assert_array_equal(getattr(one, name), getattr(other, name))


# ------------------------------------------------------------------ parts of another grid


PARTS_GRID = ('name = "g"\nseed = 0\ntrials = 3\nrounds = 8\nrecord_every = 4\nlocal_steps = 2\n'
              'x0_offset = 2.0\n[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\nseed = 0\n'
              '[grid]\nnum_sampled = [2, 3]\nstepsize = [{}, 0.02]\n')


def test_grid_refuses_parts_of_another_grid(tmp_path, capsys):
    from fedjax_abc import cli

    a, b, out = tmp_path / "a.toml", tmp_path / "b.toml", tmp_path / "out"
    a.write_text(PARTS_GRID.format("0.01"))
    b.write_text(PARTS_GRID.format("0.04"))
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 0
    first = fa.load(out / "result.nc")
    # grid b in a's folder, a's record of its settings gone: a's parts are not b's
    os.remove(out / "grid.json")
    capsys.readouterr()
    assert cli.main(["run", str(b), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "0.nc was not written by this grid" in err and err.count("\n") == 1
    # grid a again: its own parts are resumed, the same numbers
    os.remove(out / "grid.json")
    os.remove(out / "result.nc")  # else nothing to join again: a's result is there
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 0
    assert "2 parts, 2 resumed" in capsys.readouterr().out
    assert fa.load(out / "result.nc").equals(first)
    # parts computed under another JAX version (another node's software) are not taken
    import jax
    saved = jax.__version__
    try:
        jax.__version__ = "0.0.1-other-node"
        assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 1
    finally:
        jax.__version__ = saved
    assert "0.nc was not written by this grid" in capsys.readouterr().err
    # a part without a fingerprint (an earlier version's) is not taken on trust either
    part = fa.load(out / "parts" / "1.nc")
    part.save(out / "parts" / "1.nc")
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 1
    assert "1.nc was not written by this grid" in capsys.readouterr().err


# ------------------------------------------------------------ bad settings of a grid file


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
    (_grid(extra="stepsize = 0.01\n"),
     r"stepsize given both as a setting and as a grid axis: give each in one place"),
    (_grid().replace("d_max = 10.0\nseed = 0", "d_max = 10.0"),
     r"\[problem\] needs seed = K: huber_offsets draws its data from jax.random.key\(K\)"),
    (_grid(grid='stepsize = [0.01]\nsampler = ["UniformWithoutReplacement"]'),
     r"\[sampler\]: UniformWithoutReplacement needs 'num_sampled'"),
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


@pytest.mark.slow  # a task killed and run again, each a fresh process: about 20 s
def test_a_task_killed_midway_and_run_again_gives_the_same_result(tmp_path):
    """A task (all three parts) killed once its first part is saved, then run again as a
    requeued task would be: it resumes at the second part, and the joined result is the
    uninterrupted run's, bit for bit."""
    import signal
    import subprocess
    import sys
    import time

    path = _array_grid(tmp_path)
    whole, shared = tmp_path / "whole", tmp_path / "shared"
    assert cli.main(["run", str(path), "--out", str(whole), "--quiet"]) == 0
    command = [sys.executable, "-m", "fedjax_abc", "run", str(path), "--out", str(shared),
               "--part", "0", "--of", "1", "--quiet"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    task = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (shared / "parts" / "0.nc").exists():
        assert task.poll() is None and time.monotonic() < deadline, task.communicate()
        time.sleep(0.05)
    task.send_signal(signal.SIGKILL)  # preempted: no chance to clean up
    task.wait()
    if (shared / "result.nc").exists():
        pytest.skip("the task finished every part before it could be killed")
    again = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert "resumed" in again.stdout and "3 parts" in again.stdout
    assert fa.load(shared / "result.nc").equals(fa.load(whole / "result.nc"))


def test_local_steps_may_be_a_grid_axis_alone(tmp_path, capsys):
    """``local_steps`` on the grid and not at the top: each point is simulate's with its Q,
    bit for bit (a grid file once required it at the top and refused it in both places)."""
    text = _grid(grid="stepsize = [0.01]\nnum_sampled = [2]\nlocal_steps = [1, 3]")
    (tmp_path / "g.toml").write_text(text.replace("local_steps = 2\n", "", 1))
    out = tmp_path / "out"
    assert cli.main(["run", str(tmp_path / "g.toml"), "--out", str(out), "--quiet"]) == 0
    res = fa.load(out / "result.nc")
    assert res.axes["local_steps"] == (1, 3)
    problem = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)
    for Q in (1, 3):
        ref = fa.simulate(problem, key=jax.random.key(0), trials=3, rounds=8, record_every=4,
                          local_steps=Q, num_sampled=2, stepsize=0.01, record_x=False,
                          x0=problem.x_star + 2.0)
        np.testing.assert_array_equal(res.point(local_steps=Q, stepsize=0.01,
                                                num_sampled=2).gap, ref.gap)
