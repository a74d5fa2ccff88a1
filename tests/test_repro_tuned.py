"""fedjax-abc compare --tuned: the tuned table of nine algorithms on two problems."""

from __future__ import annotations

import json
import os

import pytest

from fedjax_abc import cli
from fedjax_abc.repro import tuned


@pytest.mark.slow  # end to end, about a minute and a half
def test_compare_tuned_quick_writes_its_table(tmp_path, capsys):
    out = tmp_path / "res"
    assert cli.main(["compare", "--tuned", "--quick", "--quiet", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["tuned.csv", "tuned.json"]
    doc = json.loads((out / "tuned.json").read_text())
    for pid, p in doc["problems"].items():
        rows = {r["algorithm"]: r for r in p["rows"]}
        assert list(rows) == list(tuned.algorithms(0.01))
        assert all(r["stepsize"] in tuned.SETTINGS[pid]["stepsizes"] for r in rows.values())
        # every client takes Q steps: FedNova is FedAvg (to rounding), paired on one key
        assert rows["FedNova"]["stepsize"] == rows["FedAvg"]["stepsize"]
        assert abs(rows["FedNova"]["vs_fedavg"]["mean"]) < 1e-12
    assert "minus FedAvg" in capsys.readouterr().out


def test_compare_refuses_two_modes_in_one_line(capsys):
    assert cli.main(["compare", "--tuned", "--participation"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not allowed with argument" in err
