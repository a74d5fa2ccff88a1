"""The benchmark baselines and runner: numerical contracts, no timing assertions.

- The independent baselines (``benchmarks/baselines``) agree in distribution with
  ``fedjax_abc.simulate``: the mean over >= 300 trials of the last iterate x_T (each
  coordinate) and of the gap f(x_T) - f* lie within 4 standard errors of the package's.
- ``benchmarks/run.py --quick`` runs end to end and writes valid JSON that
  ``benchmarks/report.py`` renders; its passes (alternating order, the fastest kept) are
  checked with a stand-in for the worker.
- ``benchmarks/report.py`` failing half way keeps the previous Markdown.
"""

import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import fedjax_abc as fa  # noqa: E402
from benchmarks import baselines  # noqa: E402
from benchmarks import report as bench_report  # noqa: E402
from benchmarks.baselines import HuberOffsets, Quadratics, SoftplusHuber  # noqa: E402
from old_files import BAD_TEXT, old_file, unchanged  # noqa: E402

TRIALS = 400
Z = 4.0


def _huber():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    base = HuberOffsets(np.asarray(p.params))
    return p, base, dict(num_sampled=3, local_steps=5, stepsize=1e-2, rounds=50,
                         x0=np.asarray(p.x_star) + 10.0)


def _softplus():
    p = fa.problems.softplus_huber(16)
    return p, SoftplusHuber(16), dict(num_sampled=4, local_steps=5, stepsize=2e-2, rounds=50,
                                      x0=np.array([10.0]))


def _quadratics():
    p = fa.problems.quadratics(jax.random.key(3), n=5, d=3)
    a, c = p.params
    base = Quadratics(np.asarray(a), np.asarray(c), C=float(p.oracle.C), D=float(p.oracle.D))
    return p, base, dict(num_sampled=2, local_steps=3, stepsize=5e-2, rounds=30,
                         x0=np.asarray(p.x_star) + 1.0)


def _mean_se(v):
    v = np.asarray(v, dtype=np.float64)
    return v.mean(axis=0), v.std(axis=0, ddof=1) / math.sqrt(v.shape[0])


@pytest.mark.parametrize("build", [pytest.param(_huber, marks=pytest.mark.slow), _softplus,
                                   pytest.param(_quadratics, marks=pytest.mark.slow)],
                         ids=["eq27", "eq25", "quadratics"])  # 6-7 s each; eq25 by default
def test_baselines_agree_with_package(build):
    problem, base, kw = build()
    res = fa.simulate(problem, trials=TRIALS, key=jax.random.key(11), record_x=False, **kw)
    gap = jax.jit(jax.vmap(problem.gap))
    runs = {
        "numpy_all": baselines.numpy_all(base, trials=TRIALS, seed=21, **kw),
        "numpy_sampled": baselines.numpy_sampled(base, trials=TRIALS, seed=22, **kw),
        "jax_naive all": baselines.jax_naive(base, trials=TRIALS, key=jax.random.key(23),
                                             mode="all", **kw),
        "jax_naive sampled": baselines.jax_naive(base, trials=TRIALS, key=jax.random.key(24),
                                                 mode="sampled", **kw),
    }
    ref = {"x_T": _mean_se(res.x_final), "gap": _mean_se(res.gap[:, -1])}
    # the run must move: x_T differs from x_0 by many standard errors
    assert np.all(np.abs(ref["x_T"][0] - kw["x0"]) > 10 * ref["x_T"][1])
    for name, x in runs.items():
        assert x.shape == res.x_final.shape and np.all(np.isfinite(x)), name
        got = {"x_T": _mean_se(x), "gap": _mean_se(np.asarray(gap(x)))}
        for stat in ("x_T", "gap"):
            (m1, s1), (m2, s2) = ref[stat], got[stat]
            z = np.abs(m1 - m2) / np.sqrt(s1**2 + s2**2)
            assert np.all(z < Z), f"{name}, {stat}: package {m1} vs {m2}, {z} standard errors"


@pytest.mark.slow  # 400 trials of three implementations on a learning problem, about 12 s
def test_learning_baselines_agree_with_package():
    """NumPy's and straightforward JAX's FedAvg on softmax regression with mini-batches: the
    mean final gap and x_T within 4 standard errors of the package's."""
    from benchmarks.baselines import SoftmaxData

    data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 6, max_samples=60)
    p = fa.problems.softmax_regression(data.features, data.labels, l2=1e-3,
                                       num_classes=data.num_classes,
                                       oracle=fa.MinibatchOracle(5))
    base = SoftmaxData.from_lists(data.features, data.labels, data.num_classes, 1e-3, 5)
    kw = dict(num_sampled=3, local_steps=4, stepsize=0.1, rounds=15, x0=np.zeros(p.dim))
    res = fa.simulate(p, trials=TRIALS, key=jax.random.key(11), record_x=False, **kw)
    gap = jax.jit(jax.vmap(p.gap))
    ref = {"x_T": _mean_se(res.x_final), "gap": _mean_se(res.gap[:, -1])}
    runs = {f"{name} {mode}": fn(base, trials=TRIALS, seed=30 + j, mode=mode, **kw)
            for j, (name, fn, mode) in enumerate(
                [("numpy", baselines.numpy_softmax, "all"),
                 ("numpy", baselines.numpy_softmax, "sampled"),
                 ("jax", baselines.jax_softmax, "all"),
                 ("jax", baselines.jax_softmax, "sampled")])}
    for name, x in runs.items():
        got = {"x_T": _mean_se(x), "gap": _mean_se(np.asarray(gap(x)))}
        for stat in ("x_T", "gap"):
            (m1, s1), (m2, s2) = ref[stat], got[stat]
            z = np.abs(m1 - m2) / np.sqrt(s1**2 + s2**2)
            assert np.all(z < Z), f"{name}, {stat}: {np.max(z):.1f} standard errors"
    # the control: a smaller stepsize moves the gap by many standard errors
    slow = baselines.jax_softmax(base, trials=TRIALS, seed=40, mode="sampled",
                                 **dict(kw, stepsize=0.05))
    (m1, s1), (m2, s2) = ref["gap"], _mean_se(np.asarray(gap(slow)))
    assert abs(m1 - m2) / np.sqrt(s1**2 + s2**2) > 10


def test_baselines_check_their_input():
    p, base, kw = _huber()
    kw = dict(kw, num_sampled=11)
    with pytest.raises(ValueError, match="num_sampled"):
        baselines.numpy_all(base, trials=2, **kw)
    with pytest.raises(ValueError, match="num_sampled"):
        baselines.jax_naive(base, trials=2, key=jax.random.key(0), **kw)


def test_robust_benchmark_runs_and_its_baselines_agree_exactly():
    """``benchmarks/robust.py`` at tiny sizes: with exact gradients and the same Byzantine
    clients, NumPy's and ByzFL's rounds give the package's x_T to rounding (and with one
    Byzantine client fewer they do not); every side is timed and compared per core."""
    from benchmarks import robust
    from benchmarks.baselines.robust import load_byzfl, numpy_robust

    w = robust.QUICK
    problem, base, x0 = robust.setup(w)
    with_byzfl = load_byzfl()[0] is not None
    (row,) = robust.check_exact(problem, base, w, x0, with_byzfl)
    assert row["moved"] > 0.1 and row["numpy_max_abs_diff"] <= 1e-12
    assert row.get("byzfl_max_abs_diff", 0.0) <= 1e-12
    res = fa.simulate(problem, aggregator=robust.rule(row["rule"], w.declared_f),
                      byzantine=fa.robust.Byzantine(robust.attack(row["attack"]),
                                                    clients=row["clients"]),
                      trials=1, key=jax.random.key(0), **robust.common_kwargs(w, x0, exact=True))
    fewer = numpy_robust(base, **robust.baseline_kwargs(
        w, x0, row["rule"], row["attack"], row["f"] - 1, 1, 0, exact=True,
        clients=row["clients"][1:]))
    assert np.max(np.abs(fewer[0] - np.asarray(res.x_final)[0])) > 1e-3  # the check can fail
    sides = ("package loop", "numpy") + (("byzfl",) if with_byzfl else ())
    out = robust.measure(problem, base, w, x0, repeats=1, byzfl_trials=1, sides=sides,
                         log=lambda *args: None)
    rows = {r["side"]: r for r in out["rows"]}
    assert set(rows) == set(sides) and len(out["repeats"]) == 1
    points = len(w.points())
    for side, r in rows.items():
        trials = 1 if side == "byzfl" else w.trials
        assert r["run_s"] > 0 and math.isclose(
            r["trajectories_per_s_per_core"], points * trials / r["run_s"] / r["cores"])
    pkg = rows["package loop"]
    assert pkg["compile_s"] >= 0 and math.isclose(
        pkg["x_numpy"], pkg["trajectories_per_s_per_core"]
        / rows["numpy"]["trajectories_per_s_per_core"])


def test_baselines_do_not_import_the_package():
    code = ("import sys; import benchmarks.baselines as b; b.jax_naive; "
            "import benchmarks.baselines.jax_impl, benchmarks.baselines.numpy_impl; "
            "print('fedjax_abc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # subprocesses that import JAX
def test_runner_quick_end_to_end(tmp_path):
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "run.py"), "--quick", "--only", "table2",
         "--passes", "1", "--json", str(out_json)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "virtual client-steps/s" in proc.stdout
    doc = json.loads(out_json.read_text())
    rows = doc["results"]
    impls = {(r["impl"], r["mode"], r["dtype"]) for r in rows}
    assert ("fedjax_abc", "mask", "float64") in impls
    assert ("fedjax_abc", "gather", "float64") in impls
    assert {"numpy_all", "numpy_sampled", "jax_naive"} <= {r["impl"] for r in rows}
    for r in rows:
        assert "error" not in r, r
        assert r["finite"] and r["run_s"] > 0 and r["peak_run_mb"] > 0
        assert r["run_s_passes"] == [r["run_s"]]
        steps = r["trials"] * r["Q"] * r["T"]
        assert math.isclose(r["virtual_rate"], steps * r["n"] / r["run_s"], rel_tol=1e-9)
        assert math.isclose(r["sampled_rate"], steps * r["S"] / r["run_s"], rel_tol=1e-9)
        if r["impl"] == "fedjax_abc":
            assert r["compile_s"] is not None and r["compiles_run"] == 0
            assert r["ratio_numpy"] is not None and r["ratio_numpy"] > 0
    names = [t["name"] for t in doc["targets"]]
    assert any("8x numpy_all" in n for n in names) and any("20x mask" in n for n in names)
    assert all(t["status"].split(" (")[0] in ("PASS", "FAIL", "not measured")
               for t in doc["targets"])
    assert doc["machine"]["cpu_count"] >= 1

    from benchmarks import report

    text = report.render(doc)
    assert "| workload | implementation |" in text and "## Targets" in text
    assert text.count("\n| table2 |") == len(rows)


def test_passes_alternate_the_order_and_keep_each_cases_fastest(monkeypatch):
    from benchmarks import run as runner

    todo = [dict(workload="w", impl=f"impl{i}", mode="mask", dtype="float64", trials=1, n=2,
                 S=1, Q=1, T=1) for i in range(3)]
    times = {"impl0": [0.3, 0.2, 0.4], "impl1": [None, 0.5, None], "impl2": [0.1, 0.1, 0.05]}
    calls = []

    def fake(case, timeout):
        calls.append(case["impl"])
        t = times[case["impl"]][calls.count(case["impl"]) - 1]
        if t is None:
            return dict(case, error="exit 1: boom")
        return dict(case, run_s=t, virtual_rate=1 / t)

    monkeypatch.setattr(runner, "run_case", fake)
    rows, info = runner.run_cases(todo, passes=3, timeout=1.0)
    assert calls == ["impl0", "impl1", "impl2"] + ["impl2", "impl1", "impl0"] + \
        ["impl0", "impl1", "impl2"]
    assert [r["run_s"] for r in rows] == [0.2, 0.5, 0.05]
    assert rows[1]["run_s_passes"] == [None, 0.5, None] and "error" not in rows[1]
    assert [r["id"] for r in rows] == [0, 1, 2] and info["total_s"] >= 0


def test_ratios_against_numba_match_mode_dtype_and_cores():
    from benchmarks import run

    shape = dict(workload="table2", problem="huber27", n=40, d=1, S=4, Q=10, trials=1000)

    def row(impl, mode, dtype, rate, **extra):
        return dict(shape, impl=impl, mode=mode, dtype=dtype, virtual_rate=rate, **extra)

    rows = [row("fedjax_abc", "mask", "float64", 6.0), row("fedjax_abc", "gather", "float32", 8.0),
            row("fedjax_abc", "mask", "float64", 3.0, cores=1),
            row("numba_all", "all", "float64", 2.0, cores=1),
            row("numba_all", "all", "float64", 4.0, cores=2),
            row("numba_all", "all", "float32", 100.0, cores=1),
            row("numba_sampled", "sampled", "float32", 16.0, cores=2),
            row("numpy_all", "all", "float64", 1.0)]
    run.add_ratios(rows)
    assert (rows[0]["ratio_numba_1"], rows[0]["ratio_numba_2"]) == (3.0, 1.5)
    assert (rows[1]["ratio_numba_1"], rows[1]["ratio_numba_2"]) == (None, 0.5)
    assert (rows[2]["ratio_numba_1"], rows[2]["ratio_numba_2"]) == (1.5, 0.75)
    assert rows[3]["ratio_numpy"] == 2.0 and rows[3]["ratio_numba_1"] is None


def _bench_row(impl, mode, dtype, rate, id_, **extra):
    case = dict(workload="table2", problem="huber27", n=40, d=1, S=4, Q=10, T=2000, trials=1000,
                record_every=200, impl=impl, mode=mode, dtype=dtype)
    case.update(extra)
    return dict(case, id=id_, virtual_rate=rate, run_s=1.0 / rate, compile_s=None)


def _bench_doc(rows, cpu="cpu A", quick=False):
    return dict(machine=dict(cpu_model=cpu, cpu_count=2, date="d", git=None, total_s=1.0),
                quick=quick, targets=[], results=rows)


def test_merge_replaces_cases_numbers_runs_and_names_the_right_rows():
    from benchmarks import merge, report

    numba = _bench_row("numba_sampled", "sampled", "float64", 10.0, 0, cores=1)
    old_pkg = _bench_row("fedjax_abc", "gather", "float64", 5.0, 1, cores=1)
    other = _bench_row("numpy_sampled", "sampled", "float64", 1.0, 2, T=200)
    full = _bench_doc([numba, old_pkg, other])
    # the partial run numbers its rows from 0 too: id 0 is numba's id in the full file
    new_pkg = _bench_row("fedjax_abc", "gather", "float64", 12.0, 0, cores=1)
    added = _bench_row("fedjax_abc", "mask", "float64", 3.0, 1, cores=1)
    partial = _bench_doc([new_pkg, added])
    before = json.dumps([full, partial], sort_keys=True)

    doc = merge.merge(full, partial, "the package rows after a change")
    assert json.dumps([full, partial], sort_keys=True) == before  # inputs untouched
    rows = doc["results"]
    assert [(r["impl"], r["mode"], r["virtual_rate"]) for r in rows] == [
        ("numba_sampled", "sampled", 10.0), ("fedjax_abc", "gather", 12.0),
        ("numpy_sampled", "sampled", 1.0), ("fedjax_abc", "mask", 3.0)]
    assert [r["id"] for r in rows] == [0, 1, 2, 3]
    assert [r["run"] for r in rows] == [0, 1, 0, 1]
    assert doc["machine"]["reruns"][-1]["run"] == 1
    assert doc["machine"]["reruns"][-1]["why"] == "the package rows after a change"
    name = ("Table II: gather float64 on 1 core(s) >= 1.0x numba_sampled "
            "(fastest package configuration)")
    (t,) = [t for t in doc["targets"] if t["name"] == name]
    assert t["value"] == 12.0 / 10.0 and t["status"] == "PASS"
    assert t["rows"] == [1, 0] and t["runs"] == [1, 0]
    assert rows[1]["status"] == "PASS" and rows[0]["status"] == ""  # the package row, not numba's
    assert rows[1]["ratio_numba_1"] == 12.0 / 10.0

    text = report.render(doc)
    assert f"| {name} | 1.20x | >= 1x | PASS | 0, 1 |" in text
    assert "- run 1: a rerun at commit" in text and "the package rows after a change" in text

    again = merge.merge(doc, _bench_doc([_bench_row("numba_sampled", "sampled", "float64", 24.0,
                                                    0, cores=1)]), "numba again")
    (t,) = [t for t in again["targets"] if t["name"] == name]
    assert t["value"] == 0.5 and t["status"] == "FAIL" and t["runs"] == [1, 2]
    assert [r["run"] for r in again["results"]] == [2, 1, 0, 1]


def test_merge_refuses_other_machines_quick_sizes_and_no_reason():
    from benchmarks import merge

    full = _bench_doc([_bench_row("fedjax_abc", "mask", "float64", 1.0, 0)])
    with pytest.raises(ValueError, match="another machine"):
        merge.merge(full, _bench_doc([], cpu="cpu B"), "why")
    with pytest.raises(ValueError, match="--quick"):
        merge.merge(full, _bench_doc([], quick=True), "why")
    with pytest.raises(ValueError, match="--why"):
        merge.merge(full, _bench_doc([]), "  ")


def test_runner_names_the_workloads_a_filter_empties():
    from benchmarks.run import left_out
    from benchmarks.workloads import cases

    chosen = cases(quick=True, only=["table2", "learning"])
    todo = [c for c in chosen if c["S"] == 4]  # as --num-sampled 4: learning has S = 10
    assert {c["workload"] for c in todo} == {"table2"}
    assert left_out(chosen, todo) == ["learning"]
    assert left_out(chosen, chosen) == []


# -------------------------------------------- the benchmark report is replaced atomically






def test_benchmark_report_failing_keeps_the_old_markdown(tmp_path, monkeypatch):
    src = tmp_path / "latest.json"
    src.write_text("{}")
    out_dir = tmp_path / "docs"
    out_dir.mkdir()
    out = old_file(out_dir, "performance.md")
    monkeypatch.setattr(bench_report, "render", lambda doc: BAD_TEXT)
    with pytest.raises(UnicodeEncodeError):
        bench_report.main([str(src), "-o", str(out)])
    unchanged(out)
    monkeypatch.setattr(bench_report, "render", lambda doc: "# ok\n")
    bench_report.main([str(src), "-o", str(out)])
    assert out.read_text() == "# ok\n"
