"""Labelled results: tidy DataFrames, xarray Datasets and netCDF files, all exact.

- a SimResult's and a SweepResult's DataFrame hold their arrays' values exactly, one row per
  (grid point,) trial and record; the summary rows are ``.summary(...)``'s;
- the Datasets have named dimensions (grid axes, trial, round, dim) and the same values;
- ``save`` then ``fa.load`` returns a result ``.equals`` the original (config, dtypes,
  NaN and inf of diverged trials, float32, no x) for both kinds.
"""

import warnings

import jax
import numpy as np
import pytest

import fedjax_abc as fa

KW = dict(local_steps=3, rounds=12, trials=5, key=jax.random.key(0), record_every=4)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=8, d_max=10.0)


@pytest.fixture(scope="module")
def sweep(problem):
    return fa.sweep(problem, grid={"algorithm.mu": [0.0, 0.5], "mode": ["mask", "gather"]},
                    algorithm=fa.algorithms.FedProx(0.0), num_sampled=3, stepsize=0.05,
                    x0=problem.x_star + 2.0, **KW)


def test_sim_dataframe_and_dataset(problem):
    res = fa.simulate(problem, num_sampled=3, stepsize=0.05, x0=problem.x_star + 2.0, **KW)
    df = res.to_dataframe()
    assert list(df.columns) == ["trial", "round", "gap", "grad_norm_sq", "diverged"]
    assert len(df) == 5 * 4
    np.testing.assert_array_equal(df["gap"].to_numpy().reshape(5, 4), res.gap)
    np.testing.assert_array_equal(df["round"].to_numpy()[:4], res.rounds)
    s = res.to_dataframe(summary=True)
    gap = s[s.quantity == "gap"]
    np.testing.assert_array_equal(gap["mean"].to_numpy(), res.summary("gap").mean)
    np.testing.assert_array_equal(gap["ci_high"].to_numpy(), res.summary("gap").ci_high)
    ds = res.to_xarray()
    assert ds["x"].dims == ("trial", "round", "dim")
    np.testing.assert_array_equal(ds["gap"].sel(round=8).values, res.gap[:, 2])


def test_sweep_dataframe_and_dataset(sweep):
    df = sweep.to_dataframe()
    assert list(df.columns[:2]) == ["algorithm.mu", "mode"] and len(df) == 4 * 5 * 4
    one = df[(df["algorithm.mu"] == 0.5) & (df["mode"] == "gather")]
    np.testing.assert_array_equal(one["gap"].to_numpy().reshape(5, 4),
                                  sweep.point(**{"algorithm.mu": 0.5, "mode": "gather"}).gap)
    assert len(sweep.to_dataframe(summary=True)) == 4 * 2 * 4
    ds = sweep.to_xarray()
    assert ds["gap"].dims == ("algorithm_mu", "mode", "trial", "round")
    np.testing.assert_array_equal(ds["x_final"].sel(algorithm_mu=0.0, mode="mask").values,
                                  sweep.point(**{"algorithm.mu": 0.0, "mode": "mask"}).x_final)
    final = sweep.final("gap")
    assert final.mean.shape == (2, 2)
    assert final.mean[1, 0] == sweep.results[2].final("gap").mean


def test_files_round_trip_exactly(problem, sweep, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.DivergenceWarning)
        results = [
            fa.simulate(problem, num_sampled=3, stepsize=0.05, x0=problem.x_star + 2.0, **KW),
            fa.simulate(problem, num_sampled=3, stepsize=0.05, x0=problem.x_star + 2.0,
                        dtype="float32", record_x=False, **KW),
            fa.simulate(problem, num_sampled=3, stepsize=np.geomspace(0.1, 1e200, 12),
                        x0=problem.x_star + 2.0, **KW),  # diverges: inf and NaN
        ]
    assert results[2].num_diverged > 0
    for i, res in enumerate(results):
        path = res.save(tmp_path / f"r{i}.nc")
        back = fa.load(path)
        assert isinstance(back, fa.SimResult) and back.equals(res)
        assert back.gap.dtype == res.gap.dtype and back.rounds.dtype == res.rounds.dtype
    back = fa.load(sweep.save(tmp_path / "sweep.nc"))
    assert isinstance(back, fa.SweepResult) and back.equals(sweep)
    assert back.axes == sweep.axes
    changed = fa.SimResult(**{**vars(results[0]), "config": dict(results[0].config, trials=6)})
    assert not changed.equals(results[0])


def test_load_refuses_other_files(tmp_path):
    import xarray as xr
    path = tmp_path / "other.nc"
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(path, engine="scipy")
    with pytest.raises(ValueError, match="not a result file"):
        fa.load(path)
