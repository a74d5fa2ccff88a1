"""reproduce lemmas at a tiny scale and its report section."""

import json
import os
import shutil

import pytest

from fedjax_abc.repro import common, lemmas, paper
from fedjax_abc.repro import report as _report


def test_dominant_skips_the_shared_gap():
    assert lemmas.dominant([5.0, 1.0, 2.0], ("a", "b", "c"), "(16)") == "a"
    assert lemmas.dominant([5.0, -1.0, 2.0, 3.0], ("f", "g", "c", "d"), "(19)") == "d"


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_report_of_the_committed_result(tmp_path):
    """The section renders from docs/results/lemmas.json (paper scale) alone."""
    res = tmp_path / "results"
    res.mkdir()
    shutil.copy(os.path.join(REPO, "docs", "results", "lemmas.json"), res)
    text = _report.render(str(res), str(tmp_path / "r.md"))
    assert "## Lemmas 4-8: where the slack of (15)-(19) comes from" in text
    assert "| (27), Dmax = 200 | paper = 0.0001 | 4,5,6,7,8 |" in text
    assert "Reading the table: (16)'s slack stays near 2" in text
    doc = json.loads((res / "lemmas.json").read_text())
    assert doc["config"]["scale"] == "paper" and len(doc["rows"]) == 3 * (4 * 3 + 4)


@pytest.mark.slow
def test_run_and_report(tmp_path, monkeypatch):
    monkeypatch.setattr(paper, "LEMMAS", dict(paper.LEMMAS, d_max=[20.0], S=[4]))
    monkeypatch.setattr(paper, "FIG1", dict(paper.FIG1, S=[4]))
    settings = common.Settings(trials=16, rounds=100, overrides=(("alpha", "2e-4"),))
    doc = lemmas.run(settings, common.Progress("lemmas", enabled=False))
    assert [r["case"] for r in doc["rows"]] == ["(27), Dmax = 20"] * 3 + ["(25)-(26), n = 16"] * 3
    assert doc["rows"][0]["stepsize"] == 2e-4 and doc["config"]["overrides"] == {"alpha": 2e-4}
    assert doc["rows"][0]["L"] == pytest.approx(1.0) and doc["rows"][0]["C"] == pytest.approx(1.0)
    assert doc["rows"][3]["D"] == pytest.approx(0.5)
    for r in doc["rows"]:
        assert [ch["equation"] for ch in r["checks"]] == ["(15)", "(16)", "(17)", "(18)", "(19)"]
        assert list(r["rounds"]) == [0, 50, 100]
        for ch in r["checks"]:
            if ch["stepsize_ok"]:
                assert all(ch["holds"]), (r["case"], r["stepsize_name"], ch["equation"])
    res = tmp_path / "results"
    paths = lemmas.write(doc, str(res))
    assert sorted(p.split("/")[-1] for p in paths) == ["lemmas.csv", "lemmas.json"]
    assert json.loads((res / "lemmas.json").read_text())["experiment"] == "lemmas"
    text = _report.render(str(res), str(tmp_path / "r.md"))
    assert "## Lemmas 4-8: where the slack of (15)-(19) comes from" in text
    assert "| (27), Dmax = 20 | paper = 0.0002 | 4,5,6,7,8 |" in text
    assert "| (25)-(26), n = 16 | 4 alpha_8 = 0.05 | 4,5,6,7 |" in text
    assert "Every inequality holds (within 3 standard errors)" in text
