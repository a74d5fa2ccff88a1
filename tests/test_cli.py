"""The ``fedjax-abc`` command end to end at a tiny scale, its options and its errors.

Every result writer (JSON, CSV, PNG, Markdown; repro, cli, benchmarks) goes through
``common.atomic_open``: a temporary file in the same folder renamed over the target. A write
failing half way leaves the previous file as it was and no temporary file behind.
"""

import csv
import io
import json
import os
import re
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from fedjax_abc.repro import common
from fedjax_abc import cli
from old_files import old_file, unchanged

PNG = b"\x89PNG\r\n\x1a\n"
FILES = {
    "fig1": ["fig1.json", "fig1.csv", "fig1.png"],
    "table2": ["table2.json", "table2.csv", "fig2.png"],
    "table2_hypotheses": ["table2_hypotheses.json", "table2_hypotheses.csv"],
    "remark4": ["remark4.json", "remark4.csv", "remark4.png"],
    "lemmas": ["lemmas.json", "lemmas.csv"],
    "fig3": ["fig3.json", "fig3.csv", "fig3.png"],
    "thm1": ["thm1.json", "thm1.csv", "thm1.png"],
    "thm2": ["thm2.json", "thm2.csv", "thm2.png"],
    "thm3": ["thm3.json", "thm3.csv", "thm3.png"],
    "faults": ["faults.json", "faults.csv"],
}
TINY = ["--quick", "--trials", "3", "--rounds", "100", "--seed", "7", "--quiet"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    assert cli.main(["reproduce", "all", *TINY, "--out", str(out)]) == 0
    return out


def _load(results, name):
    with open(os.path.join(results, f"{name}.json")) as fh:
        return json.load(fh)


@pytest.mark.slow  # end to end
def test_all_files_written(results):
    for files in FILES.values():
        for f in files:
            path = os.path.join(results, f)
            assert os.path.getsize(path) > 0, f
            if f.endswith(".png"):
                with open(path, "rb") as fh:
                    assert fh.read(8) == PNG
                assert os.path.getsize(path) > 5000
            if f.endswith(".csv"):
                with open(path) as fh:
                    rows = list(csv.reader(fh))
                assert len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows)


def _check_config(doc, name):
    c = doc["config"]
    for key in ("seed", "precision", "versions", "device", "rerun", "scale", "wall_seconds"):
        assert key in c, (name, key)
    assert c["seed"] == 7
    assert c["versions"]["jax"] and c["device"]["backend"]
    assert c["rerun"].startswith(f"fedjax-abc reproduce {name}")


@pytest.mark.slow  # end to end
def test_fig1_schema(results):
    doc = _load(results, "fig1")
    _check_config(doc, "fig1")
    assert doc["experiment"] == "fig1" and doc["S"] == [1, 4, 8, 16]
    assert doc["config"]["trials"] == 3 and doc["config"]["rounds"] == 100
    assert doc["config"]["Q"] == 5 and doc["config"]["alpha"] == 1e-3 and doc["config"]["x0"] == 10.0
    assert doc["rounds"][0] == 0 and doc["rounds"][-1] == 100
    for S in ("1", "4", "8", "16"):
        assert len(doc["mean_gap"][S]) == len(doc["ci95_gap"][S]) == len(doc["rounds"])
        assert set(doc["final_gap"][S]) == {"mean", "stderr"}
        assert doc["final_gap"][S]["mean"] == pytest.approx(doc["mean_gap"][S][-1])


@pytest.mark.slow  # end to end
def test_table2_schema(results):
    doc = _load(results, "table2")
    _check_config(doc, "table2")
    assert doc["config"]["offsets_draw"]["seed"] == 42
    assert [r["d_max"] for r in doc["rows"]] == [20.0, 50.0, 100.0, 200.0]
    for r in doc["rows"]:
        assert len(r["offsets"]) == 40 and r["offsets"][:2] == [0.0, 0.0]
        assert set(r["gap"]) == {"4", "20", "40"}
        for g in r["gap"].values():
            assert set(g) == {"mean", "stderr"} and g["stderr"] >= 0
        assert 0.9 < r["bgd_sum"] <= 1.0
        assert r["noise_free"]["gap_at_T"] > 0
    assert [round(r["sigma_f_star"], 3) for r in doc["rows"]] == [4.838, 12.809, 26.096, 52.675]


@pytest.mark.slow  # end to end
def test_fig3_schema(results):
    doc = _load(results, "fig3")
    _check_config(doc, "fig3")
    Q = doc["Q"]
    assert Q == [3, 10, 30, 100]
    for S in ("4", "40"):
        assert len(doc["residual"][S]["mean"]) == len(doc["residual"][S]["ci95"]) == len(Q)
    assert len(doc["D_Q"]["mean"]) == len(doc["D_Q"]["ci95"]) == len(Q)
    k = doc["constants"]
    c = np.sqrt(100) / (k["delta_f"] + np.sqrt(k["delta_f"] * k["sigma_f_star"])) / np.sqrt(k["I_S"])
    expect = c * (2 * np.array(doc["residual"]["4"]["mean"])
                  - np.sqrt(40) * np.array(doc["residual"]["40"]["mean"]))
    np.testing.assert_allclose(doc["D_Q"]["mean"], expect, rtol=1e-10, atol=1e-14)


@pytest.mark.slow  # end to end
def test_theorem_schemas(results):
    t1 = _load(results, "thm1")
    for key in ("L_bound", "max_abs_second_derivative", "sigma_f_star", "f1_star", "f2_star",
                "x_k", "bgd_lhs"):
        assert key in t1
    assert t1["L_bound"] == 2.25 and t1["max_abs_second_derivative"] <= 2.25
    t2 = _load(results, "thm2")
    assert len(t2["checks"]) == 11 and all("bound" in c and "observed" in c for c in t2["checks"])
    assert {(w["label"].split(",")[0], w["variable"]) for w in t2["sweeps"]} >= {
        ("quadratics", "Q"), ("quadratics", "T"), ("problem (25)-(26)", "S")}
    for w in t2["sweeps"]:
        assert len(w["values"]) == len(w["bound"]) == len(w["observed"]) == len(w["within_20"])
        assert w["slope_bound"] < 0
    t3 = _load(results, "thm3")
    assert len(t3["checks"]) == 15 and all(c["recorded_rounds"][-1] == 100 for c in t3["checks"])
    for c in t3["checks"]:
        assert len(c["max"]) == len(c["recorded_rounds"]) and set(c["fraction_below"]) == {"0.1", "0.03", "0.01"}
        assert c["schedule_check"]["tail_exponent_ok"] == c["theorem3_schedule"]


@pytest.mark.slow  # end to end
def test_hypotheses_and_remark4_schemas(results):
    h = _load(results, "table2_hypotheses")
    _check_config(h, "table2_hypotheses")
    # --quick: one alternative per setting, Dmax 20 and 200
    assert [a["setting"] for a in h["alternatives"]] == ["stated", "alpha", "Q", "T", "x0_offset"]
    for a in h["alternatives"]:
        assert a["dof"] == 6 and a["verdict"] in ("reproduces", "S-dependence only", "rejected")
        assert set(a["gap"]) == {"20", "200"}
    assert [a["T"] for a in h["alternatives"] if a["setting"] == "T"] == [1000]
    r4 = _load(results, "remark4")
    assert len(r4["rows"]) == 4 and all(len(r["yang2021"]) == len(r4["Q"]) for r in r4["rows"])


@pytest.mark.slow  # end to end
def test_report_command(results, tmp_path):
    out = tmp_path / "docs" / "reproduction.md"
    assert cli.main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "Table II" in text and "Fig. 3" in text and "Theorem 2" in text
    rel = os.path.relpath(os.path.join(results, "fig1.png"), out.parent)
    assert f"]({rel})" in text


def test_help_lists_every_option(capsys):
    assert cli.main(["reproduce", "--help"]) == 0
    text = capsys.readouterr().out
    for opt in ("--trials", "--rounds", "--seed", "--out", "--quick", "--precision", "float32",
                "fig1", "table2", "fig3", "thm1", "thm2", "thm3", "all"):
        assert opt in text
    assert cli.main(["report", "--help"]) == 0
    assert "--results" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["reproduce", "fig9"],
    ["reproduce"],
    ["frobnicate"],
    ["reproduce", "fig1", "--trials", "0"],
    ["reproduce", "fig1", "--trials", "1"],
    ["reproduce", "fig1", "--trials", "many"],
    ["reproduce", "fig1", "--rounds", "-5"],
    ["reproduce", "fig1", "--seed", "-1"],
    ["reproduce", "fig1", "--precision", "float16"],
    ["reproduce", "fig1", "--bogus"],
])
def test_bad_options_one_line(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("fedjax-abc: error:")


def test_runtime_errors_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["reproduce", "thm1", "--out", str(blocker / "sub"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert cli.main(["report", "--results", str(tmp_path / "missing")]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.slow  # end to end
def test_module_entry_point_bad_option():
    proc = subprocess.run([sys.executable, "-m", "fedjax_abc", "reproduce", "fig1", "--rounds", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_progress_line_reports_rounds_rate_and_time_left():
    stream = io.StringIO()
    progress = common.Progress("demo", stream=stream, interval=0.05)
    progress.plan(200.0)
    callback = progress.task("S=4", 100.0)
    callback(10, 100, 0.1)
    time.sleep(0.05)
    callback(50, 100, 0.2)
    time.sleep(0.2)
    line = progress.line()
    assert "demo [S=4] rounds 50/100" in line and "25.0%" in line
    assert "rounds/s" in line and "elapsed" in line and "left" in line
    assert "client-steps" not in line  # the rate in the unit the line counts
    progress.finish_task()
    progress.close("ok")
    out = stream.getvalue()
    assert "rounds 50/100" in out and out.rstrip().endswith("demo: done in 0:00 (ok)")
    (timing,) = progress.timings
    assert timing["run"] == "S=4" and timing["work"] == 100.0 and timing["steady_rate"] > 0


def test_progress_rate_is_in_the_task_s_unit_of_work():
    progress = common.Progress("faults", stream=io.StringIO())
    progress.plan(30.0)
    callback = progress.task("faults", 30.0, unit="sizes", work_unit="sizes")
    callback(3, 30, 0.1)
    time.sleep(0.01)
    callback(6, 30, 0.2)
    line = progress.line()
    assert "sizes 6/30" in line and "sizes/s" in line and "client-steps" not in line


def test_progress_while_compiling_shows_no_rate():
    progress = common.Progress("demo", stream=io.StringIO())
    progress.plan(200.0)
    progress.task("S=4", 100.0)  # no round done yet: the run is compiling
    line = progress.line()
    assert "compiling" in line and "client-steps/s" not in line and "left" not in line


def test_progress_time_left_is_smoothed():
    progress = common.Progress("demo", stream=io.StringIO())
    progress.plan(100.0)
    progress.done = progress.computed = 50.0  # computed in this process: 1 step/s so far
    progress.start = time.perf_counter() - 50.0
    assert "~0:50 left" in progress.line()
    progress.start -= 50.0  # a stall: 0.5 step/s overall; the estimate moves a third of the way
    line = progress.line()
    assert "~1:0" in line and "~1:40 left" not in line  # 50 / (1 - 0.5 / 3) = 60 s


def test_an_interrupted_run_is_not_reported_done():
    stream = io.StringIO()
    progress = common.Progress("demo", stream=stream, interval=10)
    progress.plan(1.0)
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        finally:
            progress.close()
    assert "done" not in stream.getvalue() and "demo: stopped after" in stream.getvalue()


HELP_WITHOUT_JAX = """
import sys
import fedjax_abc_cli
for argv in (["--help"], ["reproduce", "--help"], ["run", "-h"]):
    assert fedjax_abc_cli.main(argv) == 0, argv
heavy = sorted(m for m in sys.modules if m == "jax" or m.startswith(("jax.", "fedjax_abc.",
                                                                      "numpy")) or m == "fedjax_abc")
print("@@", heavy)
"""


def test_help_imports_neither_jax_nor_the_package():
    """The installed command (pyproject's entry point) prints its help in a fresh process
    that never imports JAX, NumPy or a module of fedjax_abc."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    assert scripts["fedjax-abc"] == "fedjax_abc_cli:main"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(os.path.dirname(__file__), "..")] + sys.path))
    proc = subprocess.run([sys.executable, "-c", HELP_WITHOUT_JAX], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: fedjax-abc" in proc.stdout and "@@ []" in proc.stdout, proc.stdout[-500:]


def test_progress_of_a_grid_names_what_it_counts():
    progress = common.Progress("grid", stream=io.StringIO())
    progress.plan(100.0)
    progress.task("part 1/1", 100.0, unit="rounds (grid total)")(300, 600, 1.0)
    line = progress.line()
    assert "rounds (grid total) 300/600" in line and "50.0%" in line


COMMAND = "import sys, fedjax_abc_cli; sys.exit(fedjax_abc_cli.main())"


def _command(args, tmp_path):
    return subprocess.Popen([sys.executable, "-c", COMMAND, *args, "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # a command interrupted while it runs, then twice while it starts
def test_ctrl_c_ends_the_command_cleanly(tmp_path):
    import signal

    proc = _command(["compare", "--participation", "--quick"], tmp_path / "a")
    seen = []
    for line in proc.stderr:  # its progress: the run has started
        seen.append(line)
        if len(seen) == 3:
            proc.send_signal(signal.SIGINT)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert "interrupted" in err and "Segmentation" not in err
    # twice while it imports and compiles: the second ends the process at once
    proc = _command(["compare", "--participation", "--quick"], tmp_path / "b")
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    start = time.perf_counter()
    proc.communicate(timeout=60)
    assert proc.returncode in (130, -signal.SIGINT) and time.perf_counter() - start < 30


# --------------------------------------------------- result files are replaced atomically


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))




def test_atomic_open_replaces_on_success(tmp_path):
    path = old_file(tmp_path, "a.txt")
    reference = tmp_path / "reference.txt"
    reference.write_text("x")  # what a plain open() gives, umask included
    with common.atomic_open(path) as fh:
        fh.write("new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "reference.txt"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_atomic_open_keeps_the_old_file_on_failure(tmp_path, error):
    path = old_file(tmp_path, "a.txt")
    with pytest.raises(error):
        with common.atomic_open(path) as fh:
            fh.write("half of the new contents")
            fh.flush()
            raise error("interrupted")
    unchanged(path)


def test_atomic_open_creates_the_folder(tmp_path):
    path = tmp_path / "new" / "deeper" / "b.json"
    with common.atomic_open(path) as fh:
        fh.write("{}")
    assert path.read_text() == "{}" and os.listdir(path.parent) == ["b.json"]


def test_write_json_unserialisable_value_keeps_the_old_file(tmp_path):
    path = old_file(tmp_path, "fig1.json")
    doc = {"experiment": "fig1", "rows": list(range(5000)), "z": object()}  # fails at the end
    with pytest.raises(TypeError):
        common.write_json(str(path), doc)
    unchanged(path)
    common.write_json(str(path), {"a": 1.5})
    assert json.loads(path.read_text()) == {"a": 1.5}


def test_write_csv_failing_row_keeps_the_old_file(tmp_path):
    path = old_file(tmp_path, "fig1.csv")
    rows = [[1, 2.0]] * 100 + [None]  # the last row is not a sequence
    with pytest.raises(TypeError):
        common.write_csv(str(path), ["a", "b"], rows)
    unchanged(path)


def test_save_figure_failing_keeps_the_old_png_and_closes_the_figure(tmp_path):
    plt = common.pyplot()
    path = old_file(tmp_path, "fig1.png", b"\x89PNG old")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])

    def half_then_fail(fh, **kwargs):
        fh.write(b"\x89PNG half")
        raise OSError("disk full")

    fig.savefig = half_then_fail
    with pytest.raises(OSError, match="disk full"):
        common.save_figure(fig, str(tmp_path), "fig1.png")
    unchanged(path, b"\x89PNG old")
    assert not plt.fignum_exists(fig.number)

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    common.save_figure(fig, str(tmp_path), "fig1.png")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_no_writer_opens_its_target_directly():
    """Every result writer goes through atomic_open: no open(..., "w"), no savefig(path)."""
    folder = os.path.join(REPO, "fedjax_abc", "repro")
    files = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")]
    files += [os.path.join(REPO, *f.split("/")) for f in
              ("fedjax_abc/cli.py", "benchmarks/run.py", "benchmarks/report.py")]
    direct = re.compile(r"(?<!atomic_)open\([^)]*,\s*(mode=)?[\"'][wa]b?\+?[\"']"
                        r"|\.savefig\((?!fh)|write_text\(")
    for path in files:
        with open(path) as fh:
            text = fh.read()
        assert not direct.search(text), f"{path} writes directly: {direct.search(text).group(0)}"
