"""Result files are written atomically, and ``fedjax-abc report`` rejects bad results in one line.

Every writer (JSON, CSV, PNG, Markdown; repro, cli, benchmarks) goes through
``common.atomic_open``: a temporary file in the same folder renamed over the target. A write
failing half way leaves the previous file as it was and no temporary file behind.
"""

import json
import os
import re
import shutil
import stat
import sys

import pytest

from fedjax_abc import cli
from fedjax_abc.repro import common
from fedjax_abc.repro import report as _report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import report as bench_report  # noqa: E402

OLD = "previous contents\n"
BAD_TEXT = "# a report\n" * 1000 + "\udc80"  # a lone surrogate: encoding fails mid-write


def _old_file(tmp_path, name, data=OLD):
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def _unchanged(path, data=OLD):
    assert (path.read_bytes() if isinstance(data, bytes) else path.read_text()) == data
    assert sorted(os.listdir(path.parent)) == [path.name], "a temporary file was left behind"


# ------------------------------------------------------------------------- the helper


def test_atomic_open_replaces_on_success(tmp_path):
    path = _old_file(tmp_path, "a.txt")
    reference = tmp_path / "reference.txt"
    reference.write_text("x")  # what a plain open() gives, umask included
    with common.atomic_open(path) as fh:
        fh.write("new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "reference.txt"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_atomic_open_keeps_the_old_file_on_failure(tmp_path, error):
    path = _old_file(tmp_path, "a.txt")
    with pytest.raises(error):
        with common.atomic_open(path) as fh:
            fh.write("half of the new contents")
            fh.flush()
            raise error("interrupted")
    _unchanged(path)


def test_atomic_open_creates_the_folder(tmp_path):
    path = tmp_path / "new" / "deeper" / "b.json"
    with common.atomic_open(path) as fh:
        fh.write("{}")
    assert path.read_text() == "{}" and os.listdir(path.parent) == ["b.json"]


# ------------------------------------------------------------------------ the writers


def test_write_json_unserialisable_value_keeps_the_old_file(tmp_path):
    path = _old_file(tmp_path, "fig1.json")
    doc = {"experiment": "fig1", "rows": list(range(5000)), "z": object()}  # fails at the end
    with pytest.raises(TypeError):
        common.write_json(str(path), doc)
    _unchanged(path)
    common.write_json(str(path), {"a": 1.5})
    assert json.loads(path.read_text()) == {"a": 1.5}


def test_write_csv_failing_row_keeps_the_old_file(tmp_path):
    path = _old_file(tmp_path, "fig1.csv")
    rows = [[1, 2.0]] * 100 + [None]  # the last row is not a sequence
    with pytest.raises(TypeError):
        common.write_csv(str(path), ["a", "b"], rows)
    _unchanged(path)


def test_save_figure_failing_keeps_the_old_png_and_closes_the_figure(tmp_path):
    plt = common.pyplot()
    path = _old_file(tmp_path, "fig1.png", b"\x89PNG old")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])

    def half_then_fail(fh, **kwargs):
        fh.write(b"\x89PNG half")
        raise OSError("disk full")

    fig.savefig = half_then_fail
    with pytest.raises(OSError, match="disk full"):
        common.save_figure(fig, str(tmp_path), "fig1.png")
    _unchanged(path, b"\x89PNG old")
    assert not plt.fignum_exists(fig.number)

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    common.save_figure(fig, str(tmp_path), "fig1.png")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_write_report_failing_keeps_the_old_report(tmp_path, monkeypatch):
    out = _old_file(tmp_path, "reproduction.md")
    monkeypatch.setattr(_report, "render", lambda results, out, reference=None: BAD_TEXT)
    with pytest.raises(UnicodeEncodeError):
        _report.write_report(str(tmp_path / "results"), str(out))
    _unchanged(out)


def test_benchmark_report_failing_keeps_the_old_markdown(tmp_path, monkeypatch):
    src = tmp_path / "latest.json"
    src.write_text("{}")
    out_dir = tmp_path / "docs"
    out_dir.mkdir()
    out = _old_file(out_dir, "performance.md")
    monkeypatch.setattr(bench_report, "render", lambda doc: BAD_TEXT)
    with pytest.raises(UnicodeEncodeError):
        bench_report.main([str(src), "-o", str(out)])
    _unchanged(out)
    monkeypatch.setattr(bench_report, "render", lambda doc: "# ok\n")
    bench_report.main([str(src), "-o", str(out)])
    assert out.read_text() == "# ok\n"


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


# ------------------------------------------------------------------ fedjax-abc report


@pytest.fixture
def results(tmp_path):
    """A copy of the committed results (JSON only)."""
    res = tmp_path / "results"
    res.mkdir()
    for name in _report.ORDER:
        shutil.copy(os.path.join(REPO, "docs", "results", f"{name}.json"), res)
    return res


def _report_fails(capsys, results, out, *fragments):
    out.write_text(OLD)
    assert cli.main(["report", "--results", str(results), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("fedjax-abc: error:")
    for fragment in fragments:
        assert fragment in err, err
    assert out.read_text() == OLD  # the previous report stays
    return err


def test_report_of_the_committed_results_works(results, tmp_path):
    out = tmp_path / "reproduction.md"
    assert cli.main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert "Table II" in out.read_text()


def test_report_truncated_json(results, tmp_path, capsys):
    path = results / "table2.json"
    path.write_text(path.read_text()[: len(path.read_text()) // 2])
    _report_fails(capsys, results, tmp_path / "r.md", str(path), "not valid JSON")


def test_report_empty_json(results, tmp_path, capsys):
    (results / "thm2.json").write_text("")
    _report_fails(capsys, results, tmp_path / "r.md", "thm2.json", "not valid JSON")


def test_report_wrong_experiment(results, tmp_path, capsys):
    shutil.copy(results / "fig3.json", results / "fig1.json")
    _report_fails(capsys, results, tmp_path / "r.md", "fig1.json",
                  "experiment is 'fig3', expected 'fig1'")


@pytest.mark.parametrize("name, drop, key", [
    ("fig1", lambda d: d.pop("final_gap"), "'final_gap'"),
    ("table2", lambda d: d["config"].pop("n"), "'n'"),
    ("fig3", lambda d: d["D_Q"].pop("stderr"), "'stderr'"),
    ("thm1", lambda d: d.pop("bgd_lhs"), "'bgd_lhs'"),
    ("thm3", lambda d: d["checks"][0].pop("label"), "'label'"),
])
def test_report_missing_key(results, tmp_path, capsys, name, drop, key):
    path = results / f"{name}.json"
    doc = json.loads(path.read_text())
    drop(doc)
    path.write_text(json.dumps(doc))
    _report_fails(capsys, results, tmp_path / "r.md", str(path), f"missing entry {key}")


@pytest.mark.parametrize("change, fragment", [
    (lambda doc: [], "not a result document"),
    (lambda doc: dict(doc, checks=3), "malformed entry (TypeError"),
    (lambda doc: dict(doc, checks=[dict(c, bound="big") for c in doc["checks"]]),
     "malformed entry (ValueError"),
])
def test_report_malformed_document(results, tmp_path, capsys, change, fragment):
    path = results / "thm2.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    _report_fails(capsys, results, tmp_path / "r.md", "thm2.json", fragment)


def test_report_without_results(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    _report_fails(capsys, empty, tmp_path / "r.md", "no result files")
