"""``benchmarks/compare.py``: the package at two commits side by side (no timing assertions).

The pass order, the fastest-pass rule, the ratios and the target are checked with a stand-in
for the worker; a worktree of HEAD imports its own ``fedjax_abc`` and is removed afterwards,
also when the work inside is interrupted (one real case runs in it and in this checkout
under ``-m slow``); a checkout without a worker, or whose worker would import another
``fedjax_abc``, is refused with a one-line error, as are an unknown revision and no passes.
"""

import contextlib
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import compare, report  # noqa: E402


def _case(trials, mode="mask"):
    return dict(workload="trials", impl="fedjax_abc", mode=mode, dtype="float64",
                problem="huber27", n=40, d=1, S=4, Q=10, T=20, trials=trials, record_every=10)


def test_sides_alternate_and_each_keeps_its_fastest_pass():
    todo = [_case(1), _case(100)]
    trees = {"earlier": "/old", "current": "/new"}
    # run s per (trials, side), one per pass; None is a failed run
    plan = {(1, "/old"): [0.30, 0.20], (1, "/new"): [0.10, 0.15],
            (100, "/old"): [0.50, None], (100, "/new"): [None, None]}
    calls = []

    def fake(case, timeout, repo):
        calls.append((case["trials"], repo))
        t = plan[case["trials"], repo][sum(c == (case["trials"], repo) for c in calls) - 1]
        return dict(case, run_s=t) if t is not None else dict(case, error="exit 1: boom")

    rows = compare.compare(todo, trees, passes=2, run_case=fake, log=lambda s: None)
    # pass 1: cases forward, the earlier checkout first; pass 2: backward, the current first
    assert calls == [(1, "/old"), (1, "/new"), (100, "/old"), (100, "/new"),
                     (100, "/new"), (100, "/old"), (1, "/new"), (1, "/old")]
    a, b = rows
    assert (a["earlier_run_s"], a["current_run_s"]) == (0.20, 0.10)
    assert a["earlier_passes"] == [0.30, 0.20] and a["current_passes"] == [0.10, 0.15]
    assert a["ratio"] == pytest.approx(2.0) and "current_error" not in a
    assert b["earlier_run_s"] == 0.50 and b["current_run_s"] is None and b["ratio"] is None
    assert b["current_error"] == "exit 1: boom" and b["earlier_passes"] == [0.50, None]

    t = compare.no_loss_target(rows)
    assert t["status"] == "not measured" and t["value"] == pytest.approx(2.0)
    text = report.compare_section(dict(
        base=dict(rev="HEAD~1", commit="abc1234"), machine={}, passes=2, target=t, results=rows))
    assert text.count("\n| trials |") == 2 and "| 2.00 |" in text and "boom" in text
    assert "0.5000 / error" in text and "**not measured**" in text


@pytest.mark.parametrize("ratios, status, below", [
    ([1.3, 0.96], "PASS", 0), ([1.3, 0.94], "FAIL", 1), ([], "not measured", 0)])
def test_no_loss_target(ratios, status, below):
    t = compare.no_loss_target([dict(ratio=v) for v in ratios])
    assert (t["status"], t["below"]) == (status, below)
    assert t["value"] == (min(ratios) if ratios else None)


def test_default_cases_are_the_package_in_its_default_configuration():
    todo = compare.default_cases()
    assert {c["workload"] for c in todo} == set(compare.DEFAULT_WORKLOADS)
    assert all(c["impl"] == "fedjax_abc" for c in todo)
    assert not any(c.get(k) for c in todo for k in compare.NON_DEFAULT)
    assert {c["mode"] for c in todo} == {"mask", "gather"}
    quick = compare.default_cases(quick=True, only=["table2"])
    assert quick and all(c["workload"] == "table2" and c["T"] == 20 for c in quick)


@pytest.mark.slow  # end to end
def test_a_worktree_of_head_imports_its_own_package_and_is_removed():
    commit = compare.resolve("HEAD")
    with compare.checkout(commit) as tree:
        assert os.path.isfile(os.path.join(tree, "benchmarks", "_worker.py"))
        compare.check_imports({"earlier": tree, "current": REPO})
    assert not os.path.exists(tree)
    listed = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True,
                            text=True).stdout
    assert tree not in listed


@pytest.mark.slow
def test_one_case_in_a_worktree_of_head_and_in_this_checkout():
    with compare.checkout(compare.resolve("HEAD")) as tree:
        rows = compare.compare([_case(8, "gather")], {"earlier": tree, "current": REPO},
                               passes=1, log=lambda s: None)
    (r,) = rows
    assert r["earlier_run_s"] > 0 and r["current_run_s"] > 0
    assert r["ratio"] == pytest.approx(r["earlier_run_s"] / r["current_run_s"])


@pytest.mark.slow  # end to end
def test_a_worktree_is_removed_when_the_work_inside_is_interrupted():
    with pytest.raises(KeyboardInterrupt):
        with compare.checkout(compare.resolve("HEAD")) as tree:
            raise KeyboardInterrupt
    assert not os.path.exists(tree)
    listed = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True,
                            text=True).stdout
    assert tree not in listed


def test_a_checkout_that_imports_another_package_is_refused(tmp_path, monkeypatch):
    other = tmp_path / "elsewhere" / "fedjax_abc"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(other.parent))  # after the tree's root
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "_worker.py").write_text("")
    with pytest.raises(RuntimeError, match="would measure the wrong code"):
        compare.check_imports({"earlier": str(tree)})
    (tree / "fedjax_abc").mkdir()  # its own package, found first
    (tree / "fedjax_abc" / "__init__.py").write_text("")
    compare.check_imports({"earlier": str(tree)})


def test_a_checkout_without_a_worker_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="has no benchmarks/_worker.py"):
        compare.check_imports({"earlier": str(tmp_path)})


def test_an_unknown_revision_is_refused():
    with pytest.raises(ValueError, match="does not know the revision"):
        compare.resolve("no-such-revision-here")


@pytest.mark.parametrize("argv, message", [
    (["no-such-revision-here"], "does not know the revision"),
    (["HEAD", "--passes", "0"], "--passes must be at least 1")])
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        compare.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_revision_without_a_worker_is_an_error_not_a_traceback(tmp_path, monkeypatch,
                                                                 capsys):
    @contextlib.contextmanager
    def bare(commit):  # a checkout from before the benchmarks existed
        yield str(tmp_path)

    monkeypatch.setattr(compare, "checkout", bare)
    assert compare.main(["HEAD", "--only", "trials", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "has no benchmarks/_worker.py" in err
    assert "Traceback" not in err
