"""Labelled results: tidy DataFrames, xarray Datasets and netCDF files, all exact.

- a SimResult's and a SweepResult's DataFrame hold their arrays' values exactly, one row per
  (grid point,) trial and record; the summary rows are ``.summary(...)``'s;
- the Datasets have named dimensions (grid axes, trial, round, dim) and the same values;
- ``save`` then ``fa.load`` returns a result ``.equals`` the original (config, dtypes,
  NaN and inf of diverged trials, float32, no x) for both kinds;
- a file whose data or attributes do not match its checksum, or of an unknown format, is
  refused (format-1 files without a checksum still load); ``load`` and ``save`` name the path
  in their errors.
"""

import os
import warnings

import jax
import numpy as np
import pytest
import xarray as xr

import fedjax_abc as fa
from small_run import SETTINGS as KW6, small_problem, small_run_args

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


def test_shares_number_their_trials_from_their_first(problem, tmp_path):
    """A share run with first_trial numbers its trials from there (0..R-1 before, so that
    two shares' tables and Datasets held two trials of each number); the file keeps them."""
    kw = dict(num_sampled=3, stepsize=0.05, x0=problem.x_star + 2.0, **KW)
    a = fa.simulate(problem, **dict(kw, trials=2))
    b = fa.simulate(problem, **dict(kw, trials=3), first_trial=2)
    assert b.to_dataframe()["trial"].unique().tolist() == [2, 3, 4]
    joined = xr.concat([a.to_xarray(), b.to_xarray()], dim="trial")
    assert joined["trial"].values.tolist() == [0, 1, 2, 3, 4]
    whole = fa.SimResult.concatenate([a, b]).to_xarray()
    np.testing.assert_array_equal(joined["gap"].values, whole["gap"].values)
    assert whole["trial"].values.tolist() == [0, 1, 2, 3, 4]
    assert fa.load(b.save(tmp_path / "b.nc")).to_xarray()["trial"].values.tolist() == [2, 3, 4]


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


def test_integer_labels_beyond_int32_are_saved(problem, tmp_path):
    """A grid of seeds up to 2^32 (which netCDF 3 cannot hold as integers) is saved and
    loaded with its labels; the save failed after the run before."""
    sw = fa.sweep(problem, grid={"stepsize": [0.05, 0.02]}, num_sampled=3,
                  x0=problem.x_star + 2.0, **KW)
    sw = fa.SweepResult({"seed": (3_000_000_000, 1)}, sw.results)
    back = fa.load(sw.save(tmp_path / "seeds.nc"))
    assert back.axes == {"seed": (3_000_000_000, 1)} and back.equals(sw)


def test_load_refuses_other_files(tmp_path):
    import xarray as xr
    path = tmp_path / "other.nc"
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(path, engine="scipy")
    with pytest.raises(ValueError, match="not a result file"):
        fa.load(path)


# ------------------------------------------ damaged, unknown and checksummed result files


@pytest.fixture(scope="module")
def problem6():
    return small_problem()


@pytest.fixture(scope="module")
def result(problem6):
    return fa.simulate(problem6, num_sampled=2, stepsize=0.05, x0=problem6.x_star + 2.0, **KW6)


def _rewrite(path, **attrs):
    """The file at ``path`` rewritten with some attributes changed (None deletes one)."""
    with xr.open_dataset(path, engine="scipy", mask_and_scale=False, decode_times=False) as ds:
        ds = ds.load()
    for name, value in attrs.items():
        if value is None:
            ds.attrs.pop(name, None)
        else:
            ds.attrs[name] = value
    os.remove(path)
    ds.to_netcdf(path, engine="scipy", format="NETCDF3_64BIT")


def test_damaged_data_bytes_are_refused(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    raw = bytearray(open(path, "rb").read())
    gap = np.asarray(result.gap, ">f8").tobytes()
    at = raw.find(gap[:24])
    assert at > 0
    raw[at + 9] ^= 0x10  # one bit of gap[0, 1]
    open(path, "wb").write(bytes(raw))
    with pytest.raises(ValueError, match=r"r\.nc is damaged: its data do not match the checksum"):
        fa.load(path)


def test_damaged_attributes_are_refused(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    config = dict(result.config, stepsize="0.5")
    import json
    _rewrite(path, config=json.dumps(config))
    with pytest.raises(ValueError, match="is damaged"):
        fa.load(path)


def test_unknown_format_is_refused(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    _rewrite(path, format=3)
    with pytest.raises(ValueError, match=r"has result format 3; this fedjax_abc reads formats 1, 2"):
        fa.load(path)
    _rewrite(path, format=None)
    with pytest.raises(ValueError, match=r"has result format None"):
        fa.load(path)


def test_format_1_files_without_checksum_still_load(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    _rewrite(path, format=1, checksum=None)
    assert fa.load(path).equals(result)
    # a format-2 file must carry its checksum
    _rewrite(path, format=2)
    with pytest.raises(ValueError, match="is damaged"):
        fa.load(path)


def test_checksummed_files_round_trip(problem6, result, tmp_path):
    assert fa.load(result.save(tmp_path / "r.nc")).equals(result)
    sw = fa.sweep(problem6, grid={"stepsize": [0.05, 0.1]}, num_sampled=2,
                  x0=problem6.x_star + 2.0, **KW6)
    assert fa.load(sw.save(tmp_path / "s.nc")).equals(sw)


def test_load_and_save_name_the_path(problem6, tmp_path):
    res = fa.simulate(problem6, **small_run_args(problem6))
    with pytest.raises(FileNotFoundError, match=r"^load: no result file at .*nope\.nc$"):
        fa.load(tmp_path / "nope.nc")
    with pytest.raises(IsADirectoryError, match=r"is a folder, not a result file"):
        fa.load(tmp_path)
    (tmp_path / "t.nc").write_text("hello")
    with pytest.raises(ValueError, match=r"t\.nc cannot be read as a netCDF result file") as err:
        fa.load(tmp_path / "t.nc")
    assert "\n" not in str(err.value)
    for bad in (None, 123):
        with pytest.raises(TypeError, match=rf"save: path must be a file path .*got {bad}"):
            res.save(bad)
    with pytest.raises(ValueError, match=r"save: .* is a folder; give a file path, e\.g\. "):
        res.save(tmp_path)
    # a missing folder is made, as for a checkpoint
    assert fa.load(res.save(tmp_path / "new" / "sub" / "r.nc")).equals(res)
    with pytest.raises(TypeError, match=r"concatenate takes SimResults, got a int"):
        fa.SimResult.concatenate([res, 3])
    with pytest.raises(ValueError, match=r"summary must be True or False, got 'yes'"):
        res.to_dataframe(summary="yes")
