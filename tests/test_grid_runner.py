"""``fedjax-abc run GRID.toml``: the example grids run at reduced scale, write the labelled
result, the summary and the plots, give simulate's numbers, and resume where they stopped.

The algorithms example (three parts, about 17 s) is behind the slow marker."""

import os
import pathlib

import jax
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import grid

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "grids").glob("*.toml"))
SMALL = ["--trials", "8", "--rounds", "20", "--quiet"]


def test_two_example_grids_ship():
    assert [p.name for p in EXAMPLES] == ["algorithms.toml", "table2_stepsizes.toml"]


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) for p in EXAMPLES],
                         ids=lambda p: p.stem)  # 11 s and more each
def test_example_grid_runs_and_resumes(path, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out)] + SMALL) == 0
    spec = grid.load_spec(str(path), trials=8, rounds=20)
    res = fa.load(out / "result.nc")
    assert isinstance(res, fa.SweepResult) and list(res.axes) == list(spec.doc["grid"])
    assert res.gap.shape[-2] == 8 and res.rounds[-1] == 20
    for name in ["summary.csv", "curves.png"] + [f"final_{a.replace('.', '_')}.png"
                                                  for a in res.axes]:
        assert (out / name).stat().st_size > 0, name
    # the last grid point is simulate's, bit for bit (to rounding where eta_g != 1)
    doc, last = spec.doc, res.results[-1]
    point = res.points[-1]
    problem = grid._problem(doc["problem"] if "problem.d_max" not in point
                            else {**doc["problem"], "d_max": point["problem.d_max"]})
    algorithm = grid._component("algorithm", spec.doc["grid"]["algorithm"][-1]) \
        if "algorithm" in point else None
    ref = fa.simulate(problem, key=jax.random.key(doc["seed"]), trials=8, rounds=20,
                      local_steps=doc["local_steps"], mode=doc["mode"], record_x=False,
                      num_sampled=point.get("num_sampled", doc.get("num_sampled")),
                      stepsize=point.get("stepsize", doc.get("stepsize")),
                      x0=problem.x_star + point.get("x0_offset", doc.get("x0_offset", 0.0)),
                      algorithm=algorithm, record_every=doc.get("record_every"))
    assert ref.equals(last)
    # an interruption after the first part: the rerun loads it and runs the others
    parts = sorted(os.listdir(out / "parts"))
    for name in parts[1:]:
        os.remove(out / "parts" / name)
    os.remove(out / "result.nc")
    capsys.readouterr()
    assert cli.main(["run", str(path), "--out", str(out)] + SMALL) == 0
    assert f"{len(parts)} parts, 1 resumed" in capsys.readouterr().out
    assert fa.load(out / "result.nc").equals(res)
    # other settings in the same folder are refused
    assert cli.main(["run", str(path), "--out", str(out), "--trials", "9", "--quiet"]) == 1


def test_bad_grid_files_are_refused(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('trials = 8\nrounds = 10\nlocal_steps = 2\nstepsize = 0.1\n'
                   '[problem]\nname = "huber_offsets"\nseed = 0\n[grid]\nrounds = [1, 2]\n')
    assert cli.main(["run", str(bad), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert "not a setting a sweep can vary" in capsys.readouterr().err
    bad.write_text('trials = 8\nbogus = 1\n')
    assert cli.main(["run", str(bad), "--quiet"]) == 1
    assert "unknown keys ['bogus']" in capsys.readouterr().err
