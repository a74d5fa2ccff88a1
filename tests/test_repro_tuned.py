"""fedjax-abc compare: the tuned table of thirteen algorithms on two problems."""

from __future__ import annotations

import json
import os

import pytest

from fedjax_abc import cli
from fedjax_abc.repro import tuned


@pytest.mark.slow  # end to end, about four minutes
def test_compare_quick_writes_the_tuned_table(tmp_path, capsys):
    out = tmp_path / "res"
    assert cli.main(["compare", "--quick", "--quiet", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["tuned.csv", "tuned.json"]
    doc = json.loads((out / "tuned.json").read_text())
    for pid, p in doc["problems"].items():
        rows = {r["algorithm"]: r for r in p["rows"]}
        assert list(rows) == list(tuned.algorithms(10))
        for name, grid in tuned.HYPERPARAMETERS.items():
            assert set(rows[name]["hyperparameters"]) == set(grid)
            assert all(v in grid[k] for k, v in rows[name]["hyperparameters"].items())
        assert rows["FedAdam"]["hyperparameters"]["variant"] in {
            f"lr={lr:g}" for lr in tuned.SERVER_LRS["FedAdam"]}
        assert all(r["stepsize"] in tuned.SETTINGS[pid]["stepsizes"] for r in rows.values())
        # every client takes Q steps: FedNova is FedAvg (to rounding), paired on one key
        assert rows["FedNova"]["stepsize"] == rows["FedAvg"]["stepsize"]
        assert abs(rows["FedNova"]["vs_fedavg"]["mean"]) < 1e-12
    assert "minus FedAvg" in capsys.readouterr().out
    assert doc["config"]["rerun"] == "fedjax-abc compare --seed 0 --quick"


def test_each_comparison_reruns_with_its_own_option():
    from fedjax_abc.repro import common

    s = common.Settings(seed=3)
    assert [common.rerun_command(s, e) for e in ("tuned", "compare", "participation",
                                                  "tradeoffs")] == [
        "fedjax-abc compare --seed 3", "fedjax-abc compare --fixed --seed 3",
        "fedjax-abc compare --participation --seed 3", "fedjax-abc compare --tradeoffs --seed 3"]
    assert common.rerun_command(s, "fig1").startswith("fedjax-abc reproduce fig1 --seed 3")


def test_compare_refuses_two_modes_in_one_line(capsys):
    assert cli.main(["compare", "--tuned", "--participation"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not allowed with argument" in err


def test_tuned_run_refuses_problems_it_does_not_have():
    from fedjax_abc.repro import common

    for bad in (["huber", "mnist"], [], "huber"):
        with pytest.raises(ValueError, match="problems must be a non-empty list of names from"):
            tuned.run(common.Settings(quick=True), problems=bad)
