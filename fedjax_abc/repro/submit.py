"""A grid's parts as a job array through submitit: ``fedjax-abc run GRID --submit slurm``.

Each array task is ``run --part I --of N`` (:func:`fedjax_abc.repro.grid.run_grid` with a
share of the parts) in a process of its own: on Slurm through submitit's Slurm executor,
on a workstation (``--submit local``) through its local executor, the same tasks as local
processes. A task saves each part when it is done; preempted or timed out, it is requeued
(submitit's checkpointing) and resumes at its first part not saved. The task that saves
the last part joins them all; ``fedjax-abc merge`` does it later. submitit is the
``slurm`` extra.

Executor settings come from the command line or the grid file's ``[slurm]`` table
(``partition``, ``time_min``, ``cpus_per_task``, ``gpus_per_task``, ``mem_gb``,
``array_parallelism``), the command line winning; they change where the parts run, not
their numbers (they are not part of a part's fingerprint). This module imports submitit
(the ``slurm`` extra): the command imports it only for ``--submit``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import Callable, Optional

import submitit

__all__ = ["FAILED", "FINISHED", "SETTINGS", "Task", "executor_parameters", "submit", "wait"]

# [slurm] table key -> (submitit parameter, type); cluster-neutral names where submitit has one
SETTINGS = {
    "partition": ("slurm_partition", str),
    "time_min": ("timeout_min", int),
    "cpus_per_task": ("cpus_per_task", int),
    "gpus_per_task": ("gpus_per_node", int),
    "mem_gb": ("mem_gb", int),
    "array_parallelism": ("slurm_array_parallelism", int),
}


def executor_parameters(table: dict, where: str = "[slurm]") -> dict:
    """submitit's ``update_parameters`` keywords from a ``[slurm]`` table (ValueError naming
    an unknown key or a value of the wrong kind)."""
    out = {}
    for key, value in table.items():
        if key not in SETTINGS:
            raise ValueError(f"{where}: unknown key {key!r}; known: {sorted(SETTINGS)}")
        name, kind = SETTINGS[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{where} {key} must be an integer >= 1, got {value!r}")
        if kind is str and (not isinstance(value, str) or not value):
            raise ValueError(f"{where} {key} must be a name, got {value!r}")
        out[name] = value
    return out


@dataclasses.dataclass(frozen=True)
class Task(submitit.helpers.Checkpointable):
    """One array task: the parts c with c mod N = I of a grid file (picklable); requeued
    by submitit when preempted or timed out (its saved parts are kept)."""

    grid: str
    out: str
    trials: Optional[int]
    rounds: Optional[int]
    part: int
    of: int

    def __call__(self) -> int:
        from fedjax_abc.repro import common
        from fedjax_abc.repro import grid as grid_module

        common.start_up()  # as the command sets JAX up

        spec = grid_module.load_spec(self.grid, trials=self.trials, rounds=self.rounds)
        return grid_module.run_grid(spec, self.out, None, self.part, self.of)["ran"]


def submit(grid: str, out: str, trials: Optional[int], rounds: Optional[int], tasks: int,
           cluster: str, parameters: dict) -> list:
    """Submits ``tasks`` array tasks sharing the grid's parts; returns submitit's jobs.

    ``cluster``: "slurm" or "local"; ``parameters``: submitit's executor parameters
    (:func:`executor_parameters`). The executor's files (scripts, logs, and the pickled
    tasks each job unpickles and runs) go to ``<out>/submitit``, made readable and
    writable by its owner alone: whoever can write there can run code as the user.
    """
    if cluster not in ("slurm", "local"):
        raise ValueError(f"--submit must be 'slurm' or 'local', got {cluster!r}")
    folder = private_folder(os.path.join(out, "submitit"))
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    name = os.path.splitext(os.path.basename(grid))[0]
    parameters = dict({"timeout_min": 60, "name": f"fedjax-abc-{name}"}, **parameters)
    if cluster == "local":  # the workstation's own settings: no partition, no GPUs asked for
        parameters = {k: v for k, v in parameters.items()
                      if k in ("timeout_min", "name", "cpus_per_task")}
    executor.update_parameters(**parameters)
    return executor.submit_array([Task(os.path.abspath(grid), os.path.abspath(out), trials,
                                       rounds, i, tasks) for i in range(tasks)])


def private_folder(folder: str) -> str:
    """``folder`` made (mode 0o700) for submitit's pickles, which its jobs unpickle and run;
    OSError (one line) where it exists and others may write in it: whoever can write there
    can run code as the user."""
    import stat

    os.makedirs(folder, mode=0o700, exist_ok=True)
    mode = os.stat(folder).st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(f"{folder} holds the pickled tasks the jobs run, and others may write in "
                      f"it (mode {stat.filemode(mode)}): whoever can write there can run code "
                      f"as you; make it private (chmod 700 {folder}) or use another --out")
    return folder


# submitit's states of a task that ended well (local and Slurm), and of one that did not
FINISHED = ("DONE", "FINISHED", "COMPLETED")
FAILED = ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "INTERRUPTED", "NODE_FAIL",
          "BOOT_FAIL", "DEADLINE")


def failed_jobs(jobs: list) -> list:
    """The ended jobs that did not end well: a state other than finished, or finished with
    an exception (a local job that raised is FINISHED in submitit's states)."""
    def raised(job) -> bool:
        try:
            return job.exception() is not None
        except Exception:  # noqa: BLE001 - no result to read: it did not end well either
            return True

    return [job for job in jobs if job.state not in FINISHED or raised(job)]


def failure(job) -> str:
    """One line on how a failed job ended: its exception's last line, or its state."""
    try:
        error = job.exception()
    except Exception as err:  # noqa: BLE001 - the result could not be read
        error = err
    if error is None:
        return f"ended {job.state}"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b", line)]
    return (raised or lines or [type(error).__name__])[-1]


def wait(jobs: list, report: Callable[[str], None], interval: float = 2.0) -> dict:
    """Waits for the jobs, reporting ``done d, running r, failed f of N`` when it changes;
    returns {state: count} at the end (submitit's states)."""
    last = None
    while True:
        states = [job.state for job in jobs]
        done = sum(s in FINISHED for s in states)
        failed = sum(s in FAILED for s in states)
        running = states.count("RUNNING")
        line = f"tasks: {done} done, {running} running, {failed} failed of {len(jobs)}"
        if line != last:
            report(line)
            last = line
        if done + failed == len(jobs):
            return {s: states.count(s) for s in set(states)}
        time.sleep(interval)
