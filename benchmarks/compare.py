"""The package at an earlier commit and now, run side by side: what the changes cost or gained.

Usage (from the repository root)::

    python benchmarks/compare.py cd43869 --json benchmarks/results/compare.json
    python benchmarks/compare.py HEAD~1 --only trials --quick
    python benchmarks/report.py benchmarks/results/latest.json \\
        --compare benchmarks/results/compare.json -o docs/performance.md

The earlier commit is checked out with ``git worktree add --detach`` into a temporary folder
(removed at the end). Every package case of the chosen workloads in its default
configuration (what ``fa.simulate(...)`` gets in a fresh process set up as the README's
first block says, the default generator, no pinned core: since engine v2 one CPU device per
core, before it one device with XLA's threads; since engine v3 the block's
``jax_enable_x64`` and ``fa.use_cpu_cores()``, before it the import's own) runs in both checkouts, each through its
own ``benchmarks/_worker.py`` in a fresh process, one checkout right after the other: the
earlier first in odd passes, the current first in even ones, the cases in alternating order
pass by pass. Each side keeps its
fastest pass, and ratio = earlier run s / current run s (above 1: the current code is
faster). A machine whose speed drifts over minutes then moves both sides of a ratio alike,
which rows of runs made at different times cannot show. An even number of passes gives
each side the first place equally often.

Target: every ratio >= 0.95 (no loss). Before measuring, each checkout is checked to have a
benchmark worker that imports its own ``fedjax_abc``; a commit whose ``fedjax_abc/`` is
this checkout's is compared with a warning (both sides then run the same code).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import run as runner  # noqa: E402
from benchmarks.workloads import WORKLOADS, cases  # noqa: E402

NO_LOSS = 0.95
DEFAULT_WORKLOADS = ("fig1", "quadratics", "trials", "clients")
SIDES = ("earlier", "current")
# case fields that choose a configuration other than the default one
NON_DEFAULT = ("cores", "cpu_devices", "generator", "native_loops", "algorithm", "grid")


def default_cases(quick: bool = False, only=DEFAULT_WORKLOADS) -> list:
    """The package's cases of the workloads ``only`` in their default configuration."""
    return [c for c in cases(quick=quick, only=list(only))
            if c["impl"] == "fedjax_abc" and not any(c.get(k) for k in NON_DEFAULT)]


def resolve(rev: str, repo: str = runner.REPO) -> str:
    """The short commit of ``rev`` in ``repo``; ValueError if git does not know it."""
    proc = subprocess.run(["git", "rev-parse", "--verify", "--short", f"{rev}^{{commit}}"],
                          cwd=repo, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise ValueError(f"git does not know the revision {rev!r}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _quiet(cmd, repo, timeout):
    """Runs a clean-up command; never raises (a failed clean-up must not hide the error that
    led to it)."""
    try:
        subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        pass


@contextlib.contextmanager
def checkout(commit: str, repo: str = runner.REPO):
    """A temporary worktree of ``commit`` (its path), removed on exit, also on an error or
    an interrupt. Only this worktree is touched: its folder and git's record of it."""
    path = tempfile.mkdtemp(prefix="fedjax_abc-compare-")  # a unique name, git's record's too
    try:
        proc = subprocess.run(["git", "worktree", "add", "--detach", path, commit], cwd=repo,
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"git worktree add {commit} failed: {proc.stderr.strip()}")
        yield path
    finally:
        _quiet(["git", "worktree", "remove", "--force", path], repo, 300)
        shutil.rmtree(path, ignore_errors=True)
        try:  # git's record of it, if the removal above did not get that far
            common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=repo,
                                    capture_output=True, text=True, timeout=30).stdout.strip()
            if common:
                shutil.rmtree(os.path.join(repo, common, "worktrees", os.path.basename(path)),
                              ignore_errors=True)
        except (OSError, subprocess.SubprocessError):
            pass


def imported_from(tree: str) -> str:
    """Where a worker process started in ``tree`` (as ``run.run_case`` starts it) would
    import ``fedjax_abc`` from (found, not imported)."""
    env = dict(os.environ, PYTHONPATH=runner.pythonpath(tree))
    proc = subprocess.run([sys.executable, "-c",
                           "import importlib.util, os; s = importlib.util.find_spec('fedjax_abc'); "
                           "print(os.path.realpath(s.origin) if s and s.origin else '')"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"no fedjax_abc to import in {tree}: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


def check_imports(trees: dict) -> None:
    """RuntimeError unless each checkout has a benchmark worker and that worker would import
    the checkout's own ``fedjax_abc``."""
    for side, tree in trees.items():
        if not os.path.isfile(os.path.join(tree, "benchmarks", "_worker.py")):
            raise RuntimeError(f"the {side} checkout ({tree}) has no benchmarks/_worker.py: "
                               "it predates the benchmarks")
        where = imported_from(tree)
        if not where.startswith(os.path.realpath(tree) + os.sep):
            raise RuntimeError(f"the {side} checkout's worker imports fedjax_abc from {where}, "
                               f"not from {tree}: the comparison would measure the wrong code")


def compare(todo: list, trees: dict, *, passes: int = 2, timeout: float = 600.0,
            run_case=None, log=print) -> list:
    """Runs every case in both checkouts ``passes`` times, side by side (see the module).

    Args:
      todo: cases (``benchmarks.workloads`` dicts).
      trees: {"earlier": path, "current": path}, the two checkouts' roots.
      run_case: (case, timeout, repo) -> row; default ``benchmarks.run.run_case``.

    Returns:
      One row per case: its fields, ``{side}_run_s`` (fastest pass, None if every pass
      failed), ``{side}_passes`` (each pass's run s), ``{side}_error`` (the last error),
      ``ratio`` (earlier run s / current run s, None without both).
    """
    run_case = runner.run_case if run_case is None else run_case
    times = {(i, s): [] for i in range(len(todo)) for s in SIDES}
    errors = {}
    for p in range(passes):
        for i, c in runner.in_pass_order(enumerate(todo), p):
            for side in runner.in_pass_order(SIDES, p):
                row = run_case(c, timeout, repo=trees[side])
                times[i, side].append(row.get("run_s") if "error" not in row else None)
                if "error" in row:
                    errors[i, side] = row["error"]
                log(f"[pass {p + 1}/{passes}, {i + 1}/{len(todo)}] {c['workload']:<10} "
                    f"{c['mode']:<7} {c['dtype']:<7} R={c['trials']} n={c['n']} T={c['T']} "
                    f"{side:<8}: " + (f"ERROR {row['error']}" if "error" in row
                                      else f"run {row['run_s']:.4f} s"))
    rows = []
    for i, c in enumerate(todo):
        row = dict(c)
        for side in SIDES:
            ok = [t for t in times[i, side] if t is not None]
            row[f"{side}_run_s"] = min(ok) if ok else None
            row[f"{side}_passes"] = times[i, side]
            if (i, side) in errors:
                row[f"{side}_error"] = errors[i, side]
        e, n = row["earlier_run_s"], row["current_run_s"]
        row["ratio"] = e / n if e and n else None
        rows.append(row)
    return rows


def same_package(commit: str, repo: str = runner.REPO) -> bool:
    """Whether ``fedjax_abc/`` at ``commit`` is the same as in the checkout ``repo`` (local
    changes included)."""
    proc = subprocess.run(["git", "diff", "--quiet", commit, "--", "fedjax_abc"], cwd=repo,
                          capture_output=True, timeout=60)
    return proc.returncode == 0


def no_loss_target(rows) -> dict:
    """PASS if every case has a ratio >= NO_LOSS, FAIL if one is below, else not measured."""
    ratios = [r["ratio"] for r in rows]
    if not ratios or any(v is None for v in ratios):
        status = "not measured"
    else:
        status = "PASS" if min(ratios) >= NO_LOSS else "FAIL"
    measured = [v for v in ratios if v is not None]
    return dict(name=f"no loss: every case >= {NO_LOSS:g}x its earlier speed", limit=NO_LOSS,
                value=min(measured) if measured else None, unit="x", status=status,
                below=sum(v < NO_LOSS for v in measured))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="the earlier commit (any git revision)")
    ap.add_argument("--only", metavar="WORKLOAD", action="append", choices=WORKLOADS,
                    help="compare only this workload (repeatable; default: "
                         f"{', '.join(DEFAULT_WORKLOADS)})")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (checks that it runs)")
    ap.add_argument("--passes", type=int, default=2,
                    help="runs of every case on each side, in alternating order (default 2)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per case and side")
    ap.add_argument("--json", metavar="FILE", help="write the comparison to FILE")
    args = ap.parse_args(argv)
    if args.passes < 1:
        ap.error("--passes must be at least 1")
    try:
        commit = resolve(args.base)
    except ValueError as e:
        ap.error(str(e))
    todo = default_cases(args.quick, args.only or DEFAULT_WORKLOADS)
    if not todo:
        ap.error("no package case in the chosen workloads")
    if same_package(commit):
        print(f"warning: fedjax_abc/ at {commit} is the same as in this checkout: both sides "
              "run the same code (the ratios show the machine's noise)", file=sys.stderr)
    info = runner.machine_info()
    info["loadavg_start"] = os.getloadavg()
    try:
        with checkout(commit) as tree:
            trees = {"earlier": tree, "current": runner.REPO}
            check_imports(trees)
            rows = compare(todo, trees, passes=args.passes, timeout=args.timeout,
                           log=lambda s: print(s, file=sys.stderr, flush=True))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    info["loadavg_end"] = os.getloadavg()
    info["git_end"] = runner.git_state()
    if info["git_end"] != info["git"]:
        print(f"warning: this checkout changed during the comparison: {info['git']} -> "
              f"{info['git_end']}", file=sys.stderr)
    doc = dict(machine=info, base=dict(rev=args.base, commit=commit), quick=args.quick,
               passes=args.passes, target=no_loss_target(rows), results=rows)
    from benchmarks import report

    print(report.compare_section(doc))
    if args.json:
        runner.write_json(args.json, doc)
    return 1 if any(r["ratio"] is None for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
