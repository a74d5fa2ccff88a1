"""Labelled results: tidy ``pandas`` tables, ``xarray`` datasets and netCDF files.

A :class:`~fedjax_abc.SimResult` becomes a Dataset with dimensions (trial, round, dim); a
:class:`~fedjax_abc.SweepResult` one with (*grid axes, trial, round, dim). The file format
is netCDF 3 (written by xarray through SciPy, no other library needed): the arrays, and as
JSON attributes the configs, the grid's axes and the arrays' dtypes, so that
:func:`load` returns a result equal to the saved one, bit for bit
(:meth:`~fedjax_abc.SimResult.equals`). pandas and xarray are imported only here.

Format 2 adds ``checksum``: SHA-256 of the arrays (in the dtypes they are restored to) and
the JSON attributes, verified by :func:`load`; a format-1 file (no checksum) still loads,
a file of any other format is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

import numpy as np

from fedjax_abc._engine._names import dim_name
from fedjax_abc._problems._args import check_flag

# SimResult and SweepResult (``_result``, which imports this module) appear in the
# annotations by name only: this module reads their fields, it does not import them.

__all__ = ["attributes", "read", "save", "sim_dataframe", "sim_dataset", "sweep_dataframe",
           "sweep_dataset"]

FORMAT = 2
_READS = (1, 2)  # format 1: no checksum
_SUMMED_ATTRS = ("fedjax_abc", "format", "config", "configs", "axes", "dtypes", "metrics",
                 "settings")
_FIELDS = ("gap", "grad_norm_sq", "x", "x_final", "diverged_at", "client_x", "client_loss")
_QUANTITIES = ("gap", "grad_norm_sq")


def _json(obj) -> str:
    def plain(o):
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
        raise TypeError(f"cannot write {type(o).__name__} to JSON")

    return json.dumps(obj, default=plain)


# ------------------------------------------------------------------------------ pandas


def _trial_numbers(res: SimResult) -> np.ndarray:
    """The trials' global numbers: a share run with ``first_trial`` numbers its trials from
    there, so that the shares' tables and Datasets join without two trials of one number."""
    first = res.config.get("first_trial", 0)
    return np.arange(first, first + res.trials)


def _columns(name: str, value: np.ndarray) -> dict:
    """A record's columns: itself where it is a number a record, else one column a
    component (``staleness_0``, ``staleness_1``, ... of a vector record)."""
    trials, records = value.shape[:2]
    if value.ndim == 2:
        return {name: value.reshape(-1)}
    flat = value.reshape(trials * records, -1)
    return {f"{name}_{j}": flat[:, j] for j in range(flat.shape[1])}


def _vector_dims(name: str, value: np.ndarray) -> tuple:
    """The dimensions of a record's axes after (trial, round): ``<name>_bin`` (and
    ``<name>_bin_1``, ...) where a record is a vector."""
    return tuple(f"{name}_bin" + (f"_{k}" if k else "") for k in range(np.ndim(value) - 2))


def _trial_rows(res: SimResult):
    import pandas as pd

    trials, records = res.gap.shape
    columns = {}
    for name, value in res.metrics.items():
        columns.update(_columns(name, np.asarray(value)))
    return pd.DataFrame({
        "trial": np.repeat(_trial_numbers(res), records),
        "round": np.tile(np.asarray(res.rounds), trials),
        "gap": res.gap.reshape(-1),
        "grad_norm_sq": res.grad_norm_sq.reshape(-1),
        **columns,
        "diverged": np.repeat(res.diverged, records),
    })


def _summary_rows(res: SimResult):
    import pandas as pd

    parts = []
    for name in _QUANTITIES + tuple(res.metrics):
        s = res.summary(name)
        flat = [np.reshape(v, (len(res.rounds), -1)) for v in (s.mean, s.stderr, s.ci_low,
                                                                 s.ci_high)]
        vector = np.ndim(s.mean) > 1
        for j in range(flat[0].shape[1]):
            parts.append(pd.DataFrame({"quantity": f"{name}_{j}" if vector else name,
                                       "round": np.asarray(res.rounds), "mean": flat[0][:, j],
                                       "stderr": flat[1][:, j], "ci_low": flat[2][:, j],
                                       "ci_high": flat[3][:, j], "excluded": s.excluded}))
    return pd.concat(parts, ignore_index=True)


def sim_dataframe(res: SimResult, summary: bool = False):
    check_flag("summary", summary)
    return _summary_rows(res) if summary else _trial_rows(res)


def sweep_dataframe(sw: SweepResult, summary: bool = False):
    check_flag("summary", summary)
    import pandas as pd

    parts = []
    for point, res in zip(sw.points, sw.results):
        df = sim_dataframe(res, summary)
        for i, (axis, label) in enumerate(point.items()):
            df.insert(i, axis, label)
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


# ------------------------------------------------------------------------------ xarray


def _arrays(res: SimResult) -> dict:
    dims = dict(gap=("trial", "round"), grad_norm_sq=("trial", "round"),
                x=("trial", "round", "dim"), x_final=("trial", "dim"), diverged_at=("trial",),
                client_x=("trial", "round", "client", "dim"),
                client_loss=("trial", "round", "client"))
    out = {name: (dims[name], getattr(res, name)) for name in _FIELDS
           if getattr(res, name) is not None}
    out.update({name: (("trial", "round") + _vector_dims(name, value), value)
                for name, value in res.metrics.items()})
    return out


def _dtypes(res: SimResult) -> dict:
    out = {name: np.asarray(value).dtype.str for name, (_, value) in _arrays(res).items()}
    out["rounds"] = np.asarray(res.rounds).dtype.str
    return out


def sim_dataset(res: SimResult):
    import xarray as xr

    d = res.x_final.shape[1]
    settings = res._settings()
    return xr.Dataset(
        {name: xr.Variable(dims, value) for name, (dims, value) in _arrays(res).items()},
        coords={"trial": _trial_numbers(res), "round": np.asarray(res.rounds),
                "dim": np.arange(d),
                **({} if res.client_loss is None else
                   {"client": np.arange(res.client_loss.shape[-1])})},
        attrs={"fedjax_abc": "SimResult", "format": FORMAT, "config": _json(res.config),
               "dtypes": _json(_dtypes(res)), "metrics": _json(list(res.metrics)),
               **({} if settings is None else {"settings": _json(settings)})})


def sweep_dataset(sw: SweepResult):
    import xarray as xr

    dims = tuple(dim_name(a) for a in sw.axes)
    if len(set(dims)) < len(dims):
        raise ValueError(f"grid axes {list(sw.axes)} have clashing names")
    first = sw.results[0]
    trials, d = first.x_final.shape
    data = {}
    stacked = sw.metrics
    for name, (inner, _) in _arrays(first).items():
        data[name] = xr.Variable(dims + inner, stacked[name] if name in stacked
                                 else getattr(sw, name))
    coords = {dim: np.asarray(labels) for dim, labels in zip(dims, sw.axes.values())}
    coords.update(trial=np.arange(trials), round=np.asarray(first.rounds), dim=np.arange(d))
    if any(not np.array_equal(r.rounds, first.rounds) for r in sw.results):
        raise ValueError("the grid points record different rounds; save them one by one")
    return xr.Dataset(data, coords=coords, attrs={
        "fedjax_abc": "SweepResult", "format": FORMAT,
        "axes": _json([[name, list(labels)] for name, labels in sw.axes.items()]),
        "configs": _json([r.config for r in sw.results]), "dtypes": _json(_dtypes(first)),
        "metrics": _json(list(first.metrics))})


# ------------------------------------------------------------------------------- files


def _checksum(ds) -> str:
    """SHA-256 of a result Dataset: its arrays as restored by :func:`load` and its attributes."""
    dtypes = json.loads(ds.attrs["dtypes"])
    h = hashlib.sha256()
    for name in _SUMMED_ATTRS:
        if name in ds.attrs:
            h.update(f"{name}={ds.attrs[name]};".encode())
    arrays = {name: ds[name].values for name in ds.data_vars}
    arrays["rounds"] = ds["round"].values
    for name in sorted(arrays):
        a = _restored(arrays[name], dtypes.get(name, np.asarray(arrays[name]).dtype.str))
        h.update(f"{name}:{a.dtype.str}{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save(result, path, attrs: Optional[dict] = None) -> str:
    """Writes a SimResult or SweepResult to ``path`` (netCDF 3 through SciPy), atomically;
    the file's folder is made if it does not exist.

    ``attrs``: extra string attributes stored in the file (read back with :func:`attributes`).
    """
    path = _file_path(path, "save")
    if os.path.isdir(path):
        raise ValueError(f"save: {path} is a folder; give a file path, e.g. {os.path.join(path, 'result.nc')}")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise OSError(f"save: the folder of {path} cannot be made: {err.strerror or err} "
                      f"({err.filename or folder})") from None
    ds = _netcdf3_labels(result.to_xarray())  # a SimResult's or a SweepResult's Dataset
    ds.attrs.update(attrs or {})
    ds.attrs["checksum"] = _checksum(ds)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        ds.to_netcdf(tmp, engine="scipy", format="NETCDF3_64BIT")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _netcdf3_labels(ds):
    """``ds`` with integer grid labels outside int32 (a seed of 3e9), which netCDF 3 cannot
    hold, written as text; :func:`read` takes the labels from the ``axes`` attribute."""
    info = np.iinfo(np.int32)
    wide = {name: c.values.astype(str) for name, c in ds.coords.items()
            if c.dtype.kind in "iu" and c.size and (c.values.min() < info.min
                                                    or c.values.max() > info.max)}
    return ds.assign_coords(wide) if wide else ds


def _restored(value, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(value).astype(np.dtype(dtype), copy=False))


def _fields(arrays: dict, rounds, config: dict, dtypes: dict, metrics: list) -> dict:
    """A SimResult's fields (its constructor's keywords) from a file's arrays."""
    get = {name: (_restored(arrays[name], dtypes[name]) if name in arrays else None)
           for name in _FIELDS + tuple(metrics)}
    return dict(rounds=_restored(rounds, dtypes["rounds"]), gap=get["gap"],
                grad_norm_sq=get["grad_norm_sq"], x=get["x"], x_final=get["x_final"],
                config=config, diverged_at=get["diverged_at"],
                metrics={name: get[name] for name in metrics}, client_x=get["client_x"],
                client_loss=get["client_loss"])


def _file_path(path, what: str) -> str:
    """``path`` as a string: TypeError naming ``what``'s argument if it is not a path."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise TypeError(f"{what}: path must be a file path (str or os.PathLike), got {path!r}")
    return os.fspath(path)


def _dataset(path):
    """The file's Dataset, checked: written by fedjax_abc, a known format, its checksum."""
    import xarray as xr

    path = _file_path(path, "load")
    if not os.path.exists(path):
        raise FileNotFoundError(f"load: no result file at {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"load: {path} is a folder, not a result file")
    try:
        with xr.open_dataset(os.fspath(path), engine="scipy", mask_and_scale=False,
                             decode_times=False) as ds:
            ds = ds.load()
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - a damaged header: any error, one line
        first = (str(err).strip().splitlines() or [""])[0]
        raise ValueError(f"{path} cannot be read as a netCDF result file "
                         f"({type(err).__name__}: {first})") from None
    kind = ds.attrs.get("fedjax_abc")
    if kind not in ("SimResult", "SweepResult"):
        raise ValueError(f"{path} is not a result file written by fedjax_abc")
    version = ds.attrs.get("format")
    if isinstance(version, (np.integer, np.ndarray)) and np.size(version) == 1:
        version = int(np.asarray(version).reshape(()))
    if not isinstance(version, int) or version not in _READS:
        raise ValueError(f"{path} has result format {version!r}; this fedjax_abc reads formats "
                         f"{', '.join(map(str, _READS))} (written by a newer fedjax_abc?)")
    saved = ds.attrs.get("checksum")
    if version >= 2 or saved is not None:
        try:
            ok = saved == _checksum(ds)
        except Exception:  # noqa: BLE001 - damaged attributes or arrays
            ok = False
        if not ok:
            raise ValueError(f"{path} is damaged: its data do not match the checksum saved "
                             "with them")
    return ds


def attributes(path) -> dict:
    """The attributes of a result file (those ``save(..., attrs=...)`` added among them),
    the file checked as by :func:`load`."""
    return dict(_dataset(path).attrs)


def read(path) -> tuple[Optional[dict], list]:
    """A result file's contents as plain values, checked as :func:`attributes` checks the
    file: (None, [fields]) for a SimResult, (axes, [fields per grid point]) for a
    SweepResult, ``fields`` a SimResult's constructor keywords (``SimResult.load`` builds
    them)."""
    ds = _dataset(path)
    kind = ds.attrs["fedjax_abc"]
    dtypes = json.loads(ds.attrs["dtypes"])
    metrics = json.loads(ds.attrs.get("metrics", "[]"))
    names = _FIELDS + tuple(metrics)
    rounds = ds["round"].values
    if kind == "SimResult":
        arrays = {name: ds[name].values for name in names if name in ds}
        fields = _fields(arrays, rounds, json.loads(ds.attrs["config"]), dtypes, metrics)
        if "settings" in ds.attrs:  # digests of the run's settings (SimResult._settings)
            fields["_digests"] = json.loads(ds.attrs["settings"])
        return None, [fields]
    axes = {name: tuple(labels) for name, labels in json.loads(ds.attrs["axes"])}
    configs = json.loads(ds.attrs["configs"])
    grid = len(axes)
    points = []
    for g, config in enumerate(configs):
        index = np.unravel_index(g, tuple(len(v) for v in axes.values()))
        arrays = {name: ds[name].values[index] for name in names if name in ds}
        assert all(np.ndim(ds[name].values) - grid == np.ndim(a) for name, a in arrays.items())
        points.append(_fields(arrays, rounds, config, dtypes, metrics))
    return axes, points
