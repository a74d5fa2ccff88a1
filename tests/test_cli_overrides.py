"""``fedjax-abc reproduce --set KEY=VALUE``: parsed, applied, recorded, one-line errors."""

import json
import os

import pytest

from fedjax_abc import cli
from fedjax_abc.repro import common


def test_experiment_settings_apply_and_parse():
    s = common.Settings(overrides=(("alpha", "1e-3"), ("S", "4, 16"), ("x0", "1"), ("Dmax", "20")))
    cfg = common.experiment_settings(s, "table2")
    assert cfg["alpha"] == 1e-3 and cfg["S"] == [4, 16] and cfg["x0_offset"] == 1.0
    assert cfg["d_max"] == [20.0] and cfg["Q"] == 10
    fig1 = common.experiment_settings(s, "fig1")  # x0 is fig1's start; Dmax is not its key
    assert fig1["x0"] == 1.0 and fig1["S"] == [4, 16] and "d_max" not in fig1
    assert common.applied_overrides(s, "fig1") == {"alpha": 1e-3, "S": [4, 16], "x0": 1.0}
    assert common.experiment_settings(common.Settings(overrides=(("x0", "-2.5"),)), "fig1")["x0"] == -2.5
    assert "--set alpha=1e-3" in common.rerun_command(s, "table2")


@pytest.mark.parametrize("args, message", [
    (["--set", "foo=1"], "--set foo: unknown setting for table2"),
    (["--set", "alpha"], "--set expects KEY=VALUE"),
    (["--set", "alpha=-1"], "--set alpha: expected a positive finite number"),
    (["--set", "Q=2.5"], "--set Q: expected an integer"),
    (["--set", "S=4,41"], "--set S: each S must be in [1, n=40], got 41"),
    (["--set", "T=0"], "--set T: expected a positive integer"),
    (["--set", "R=1"], "--set R: need at least 2 trials"),
])
def test_bad_overrides_are_one_line_errors(capsys, args, message):
    assert cli.main(["reproduce", "table2", "--quiet", "--out", "unused", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_override_recorded_in_config(tmp_path):
    out = str(tmp_path)
    assert cli.main(["reproduce", "fig1", "--quiet", "--no-checkpoint", "--out", out,
                     "--set", "S=2,16", "--set", "alpha=2e-3", "--set", "T=40", "--set", "R=3"]) == 0
    with open(os.path.join(out, "fig1.json")) as fh:
        doc = json.load(fh)
    c = doc["config"]
    assert doc["S"] == [2, 16] and c["alpha"] == 2e-3 and c["rounds"] == 40 and c["trials"] == 3
    assert c["overrides"] == {"S": [2, 16], "alpha": 2e-3} and c["scale"] == "custom"
    assert "--set S=2,16" in c["rerun"] and "--set alpha=2e-3" in c["rerun"]


def test_reproduce_refuses_a_theorem3_exponent_outside_its_range(tmp_path, capsys):
    assert cli.main(["reproduce", "thm3", "--quick", "--set", "p=2", "--quiet",
                     "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "--set p: Theorem 3's decay exponent must be in (1/2, 1], got 2" in err
    assert not os.path.exists(tmp_path / "thm3.json")
