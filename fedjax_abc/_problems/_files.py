"""Federated data from files, read without any download: LEAF's JSON, LIBSVM, and tables with
a client-id column; scikit-learn's shipped breast cancer and wine sets.

- :func:`load_leaf`: LEAF's layout (``users``, ``num_samples``, ``user_data`` with ``x`` and
  ``y``), one client per user (FEMNIST, CelebA features, Synthetic; numeric ``x`` only);
- :func:`load_svmlight`: a LIBSVM/svmlight file, then an IID or Dirichlet split;
- :func:`load_table`: a CSV, Parquet or NPZ table whose client-id column is the natural
  partition;
- :func:`load_breast_cancer`, :func:`load_wine`: scikit-learn's shipped sets, standardised,
  split as :func:`~fedjax_abc.data.load_digits` splits the digits.

Each returns a :class:`~fedjax_abc.data.FederatedData`; labels are mapped to 0..K-1 in the
order of their sorted values. A bad file gets a one-line ValueError that names it.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np

from fedjax_abc._problems._data import (
    FederatedData,
    _positive_int,
    dirichlet_partition,
    held_out_split,
    iid_partition,
    split,
)

__all__ = ["load_breast_cancer", "load_leaf", "load_svmlight", "load_table", "load_wine"]


def _path(path, what: str) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"{what} {path!r} does not exist")
    return path


def _integer_labels(values, where: str) -> np.ndarray:
    """Labels as an int64 array; a ValueError naming ``where`` if they are not integers."""
    y = np.asarray(values)
    if y.dtype.kind in "iub":
        return y.astype(np.int64)
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        return y.astype(np.int64)
    sample = y.ravel()[:3].tolist()
    raise ValueError(f"{where}: labels must be integers (class ids), got {y.dtype} values "
                     f"such as {sample}"[:200])


def _classes(labels: Sequence[np.ndarray], extra: Sequence[np.ndarray] = ()):
    """Labels mapped to 0..K-1 by their sorted distinct values (over all arrays), and K."""
    values = np.unique(np.concatenate([np.asarray(y) for y in list(labels) + list(extra)]))
    index = {v: i for i, v in enumerate(values.tolist())}
    remap = [np.array([index[v] for v in np.asarray(y).tolist()], np.int32).reshape(-1)
             for y in labels]
    remap_extra = [np.array([index[v] for v in np.asarray(y).tolist()], np.int32).reshape(-1)
                   for y in extra]
    return remap, remap_extra, len(values)


# ------------------------------------------------------------------------------- LEAF


def _leaf_files(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".json"))
        if not files:
            raise ValueError(f"LEAF folder {path!r} holds no .json file")
        return files
    return [path]


def _read_leaf(path: str) -> tuple[list, list, list]:
    """(users, features per user, labels per user) of one LEAF file or folder."""
    users, feats, labs = [], [], []
    for file in _leaf_files(path):
        try:
            with open(file) as fh:
                doc = json.load(fh)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:  # a binary file too
            raise ValueError(f"{file}: not a readable JSON file ({type(e).__name__}: {e})"[:300]) \
                from None
        if not isinstance(doc, dict):
            raise ValueError(f"{file}: a LEAF file is a JSON object, got {type(doc).__name__}")
        for key in ("users", "user_data"):
            if key not in doc:
                raise ValueError(f"{file}: missing key {key!r} (LEAF's layout: users, "
                                 "num_samples, user_data)")
        counts = doc.get("num_samples")
        if counts is not None and len(counts) != len(doc["users"]):
            raise ValueError(f"{file}: {len(counts)} num_samples for {len(doc['users'])} users")
        for j, user in enumerate(doc["users"]):
            data = doc["user_data"].get(user)
            if not isinstance(data, dict) or "x" not in data or "y" not in data:
                raise ValueError(f"{file}: user {user!r} has no user_data with 'x' and 'y'")
            try:
                x = np.asarray(data["x"], dtype=np.float64)
            except (ValueError, TypeError):
                raise ValueError(f"{file}: user {user!r}'s x is ragged or not numeric (rows of "
                                 "numbers of one length are needed)") from None
            if x.ndim < 2 or x.shape[0] != len(data["y"]):
                raise ValueError(f"{file}: user {user!r} has x of shape {x.shape} and "
                                 f"{len(data['y'])} labels: one row of features per label")
            if counts is not None and int(counts[j]) != x.shape[0]:
                raise ValueError(f"{file}: user {user!r} has {x.shape[0]} samples, num_samples "
                                 f"says {counts[j]}")
            users.append(user)
            feats.append(x.reshape(x.shape[0], -1))
            labs.append(_integer_labels(data["y"], f"{file}, user {user!r}"))
    widths = {f.shape[1] for f in feats}
    if len(widths) > 1:
        raise ValueError(f"{path}: users' feature rows have different lengths {sorted(widths)}")
    if not users:
        raise ValueError(f"{path}: no users")
    return users, feats, labs


def load_leaf(path, *, test_path=None) -> FederatedData:
    """A LEAF data set: one client per user, in the files' order of users.

    Args:
      path: a LEAF JSON file, or a folder of them (LEAF writes its splits in parts): each
        an object with ``users``, ``num_samples`` (checked where present) and
        ``user_data[user] = {"x": rows, "y": labels}``; rows are flattened (FEMNIST's
        28 x 28 images become 784 features). Numeric ``x`` only (Shakespeare's strings need
        a tokenizer first).
      test_path: the test split in the same layout, pooled as the test set (default: none,
        an empty test set).

    Returns:
      A :class:`~fedjax_abc.data.FederatedData`.

    Example:
      >>> import json, os, tempfile, fedjax_abc as fa
      >>> doc = {"users": ["a", "b"], "num_samples": [2, 1],
      ...        "user_data": {"a": {"x": [[0.0, 1.0], [1.0, 0.0]], "y": [3, 5]},
      ...                      "b": {"x": [[0.5, 0.5]], "y": [5]}}}
      >>> path = os.path.join(tempfile.mkdtemp(), "train.json")
      >>> with open(path, "w") as fh:
      ...     json.dump(doc, fh)
      >>> data = fa.data.load_leaf(path)
      >>> data.num_clients, data.num_classes, data.labels[0].tolist()
      (2, 2, [0, 1])
    """
    path = _path(path, "LEAF path")
    _, feats, labs = _read_leaf(path)
    test_x, test_y = np.zeros((0, feats[0].shape[1])), []
    if test_path is not None:
        _, tf, tl = _read_leaf(_path(test_path, "LEAF test path"))
        if tf[0].shape[1] != feats[0].shape[1]:
            raise ValueError(f"{test_path}: {tf[0].shape[1]} features, the training data has "
                             f"{feats[0].shape[1]}")
        test_x, test_y = np.concatenate(tf), [np.concatenate(tl)]
    labels, extra, K = _classes(labs, test_y)
    return FederatedData(feats, labels, test_x, extra[0] if extra else np.zeros(0, np.int32), K)


# ---------------------------------------------------------------------- splits of a pool


def _federate(key, X: np.ndarray, y: np.ndarray, num_clients: int, alpha: Optional[float],
              test_fraction: float, where: str, standardise: bool = False) -> FederatedData:
    """A stratified test split, then the rest over the clients (Dirichlet(alpha) or IID)."""
    if not 0.0 <= float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction ({test_fraction}) must be in [0, 1)")
    n = _positive_int("num_clients", num_clients)
    y = _integer_labels(y, where)
    (y,), _, K = _classes([y])
    train, test, k_part = held_out_split(key, y, K, test_fraction)
    if train.size < n:
        raise ValueError(f"{where}: {train.size} training rows for {n} clients")
    if standardise:  # z-scores from the training rows' statistics
        mean, std = X[train].mean(0), X[train].std(0)
        X = (X - mean) / np.where(std > 0, std, 1.0)
    if alpha is None:
        parts = iid_partition(k_part, train.size, n)
    else:
        parts = dirichlet_partition(k_part, y[train], n, alpha)
    feats, labs = split(X[train], y[train], parts, partial=True)  # a partition's leftovers
    return FederatedData(feats, [a.astype(np.int32) for a in labs], X[test],
                         y[test].astype(np.int32), K)


def load_svmlight(path, key, num_clients: int, alpha: Optional[float] = None, *,
                  test_fraction: float = 0.0, num_features: Optional[int] = None
                  ) -> FederatedData:
    """A LIBSVM (svmlight) file, split over ``num_clients`` clients.

    Rows ``label index:value ...`` (scikit-learn's reader); features dense, float64. Labels
    must be class ids (-1/+1 or 0..K-1; mapped to 0..K-1). A stratified ``test_fraction``
    is held out; the rest is split IID (``alpha=None``: every row) or by
    :func:`~fedjax_abc.data.dirichlet_partition` with ``alpha`` (clients of floor(m / n)
    rows each: up to n - 1 rows are left out).

    Args:
      path: the file. key: a JAX PRNG key. num_clients: n. alpha: None or > 0.
      test_fraction: in [0, 1). num_features: p, if the file's largest index is smaller.

    Example:
      >>> import os, tempfile, jax, fedjax_abc as fa
      >>> path = os.path.join(tempfile.mkdtemp(), "a.svm")
      >>> with open(path, "w") as fh:
      ...     _ = fh.write("+1 1:0.5 3:1\\n-1 2:1\\n+1 1:1\\n-1 3:0.25\\n")
      >>> data = fa.data.load_svmlight(path, jax.random.key(0), num_clients=2)
      >>> [x.shape for x in data.features], data.num_classes
      ([(2, 3), (2, 3)], 2)
    """
    from sklearn.datasets import load_svmlight_file

    path = _path(path, "svmlight file")
    try:
        X, y = load_svmlight_file(path, n_features=num_features, dtype=np.float64)
    except (ValueError, OSError) as e:
        raise ValueError(f"{path}: not a readable svmlight file ({e})"[:300]) from None
    if y.size == 0:
        raise ValueError(f"{path}: no rows (an empty svmlight file)")
    return _federate(key, np.asarray(X.todense()), y, num_clients, alpha, test_fraction, path)


def _read_table(path: str):
    """The table at ``path`` as a pandas DataFrame (CSV, Parquet) or a dict of columns (NPZ)."""
    import pandas as pd

    ext = os.path.splitext(path)[1].lower()
    if ext == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return {name: np.asarray(z[name]) for name in z.files}
    if ext in (".parquet", ".pq"):
        try:
            return pd.read_parquet(path)
        except ImportError as e:
            first = (str(e).splitlines() or [""])[0]
            raise ValueError(f"{path}: reading Parquet needs pyarrow or fastparquet "
                             f"(pip install pyarrow): {first}"[:300]) from None
    if ext in (".csv", ".txt", ".tsv"):
        try:
            return pd.read_csv(path, sep="\t" if ext == ".tsv" else ",")
        except (ValueError, OSError) as e:
            raise ValueError(f"{path}: not a readable CSV file ({e})"[:300]) from None
    raise ValueError(f"{path}: a table is a .csv, .tsv, .parquet or .npz file, got {ext!r}")


def load_table(path, *, client: str, label: str, features: Optional[Sequence[str]] = None,
               test_path=None) -> FederatedData:
    """A table with a client-id column: its natural partition, one client per distinct id.

    Args:
      path: a CSV (or TSV), Parquet or NPZ file (NPZ: one array per column; a 2-D array is
        a block of feature columns).
      client: the client-id column; clients in the order of its sorted distinct values.
      label: the integer label column.
      features: the feature columns (default: every other column), numeric.
      test_path: a table of the same columns pooled as the test set (its client column
        is ignored); default none.

    Example:
      >>> import os, tempfile, fedjax_abc as fa
      >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
      >>> with open(path, "w") as fh:
      ...     _ = fh.write("user,x1,x2,y\\nu2,0,1,1\\nu1,1,0,0\\nu2,1,1,0\\n")
      >>> data = fa.data.load_table(path, client="user", label="y")
      >>> [len(y) for y in data.labels]
      [1, 2]
    """
    path = _path(path, "table")
    ids, X, y = _table_arrays(path, client, label, features)
    order, inverse = np.unique(ids, return_inverse=True)
    parts = [np.flatnonzero(inverse == j) for j in range(order.size)]
    feats, labs = split(X, y, parts)
    test_x, test_y = np.zeros((0, X.shape[1])), []
    if test_path is not None:
        tpath = _path(test_path, "test table")
        _, test_x, ty = _table_arrays(tpath, client, label, features, need_client=False)
        if test_x.shape[1] != X.shape[1]:
            raise ValueError(f"{tpath}: {test_x.shape[1]} features, the training table has "
                             f"{X.shape[1]}")
        test_y = [ty]
    labels, extra, K = _classes(labs, test_y)
    return FederatedData(feats, labels, test_x, extra[0] if extra else np.zeros(0, np.int32), K)


def _table_arrays(path, client, label, features, need_client: bool = True):
    """(client ids, features (m, p), integer labels (m,)) of a table."""
    table = _read_table(path)
    columns = list(table.keys()) if isinstance(table, dict) else list(table.columns)
    for name, role in ((client, "client"), (label, "label")):
        if name not in columns and (role == "label" or need_client):
            raise ValueError(f"{path}: no {role} column {name!r} (columns: "
                             f"{', '.join(map(str, columns))})"[:300])
    if len(np.asarray(table[label])) == 0:
        raise ValueError(f"{path}: no rows (columns {', '.join(map(str, columns))} and nothing "
                         "under them)"[:300])
    chosen = [c for c in columns if c not in (client, label)] if features is None else \
        list(features)
    missing = [c for c in chosen if c not in columns]
    if missing:
        raise ValueError(f"{path}: no feature column {missing[0]!r}")
    if not chosen:
        raise ValueError(f"{path}: no feature columns besides {client!r} and {label!r}")
    blocks = []
    for c in chosen:
        a = np.asarray(table[c])
        if a.dtype.kind not in "iufb":
            raise ValueError(f"{path}: feature column {c!r} is not numeric ({a.dtype})")
        blocks.append(a.reshape(a.shape[0], -1).astype(np.float64))
    rows = {b.shape[0] for b in blocks} | {len(np.asarray(table[label]))}
    if len(rows) > 1:
        raise ValueError(f"{path}: columns of different lengths {sorted(rows)}")
    X = np.concatenate(blocks, axis=1)
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{path}: missing or non-finite feature values")
    y = _integer_labels(np.asarray(table[label]), f"{path}, column {label!r}")
    ids = np.asarray(table[client]) if client in columns else np.zeros(y.size)
    return ids, X, y


# ---------------------------------------------------------------- scikit-learn's sets


def _sklearn_set(loader, key, num_clients, alpha, test_fraction, name) -> FederatedData:
    raw = loader()
    return _federate(key, np.asarray(raw.data, np.float64), np.asarray(raw.target),
                     num_clients, alpha, test_fraction, name, standardise=True)


def load_breast_cancer(key, num_clients: int = 10, *, alpha: Optional[float] = 0.5,
                       test_fraction: float = 0.2) -> FederatedData:
    """scikit-learn's breast cancer set (569 rows, 30 features, 2 classes; shipped), federated.

    Features standardised with the training rows' mean and standard deviation; a stratified
    ``test_fraction`` held out; the rest split by Dirichlet(alpha) label proportions (clients
    of floor(m / n) rows: up to n - 1 rows left out), or IID for ``alpha=None``.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> data = fa.data.load_breast_cancer(jax.random.key(0), num_clients=4)
      >>> data.num_classes, data.features[0].shape[1], len(data.test_labels)
      (2, 30, 113)
    """
    from sklearn.datasets import load_breast_cancer as loader

    return _sklearn_set(loader, key, num_clients, alpha, test_fraction, "breast cancer")


def load_wine(key, num_clients: int = 5, *, alpha: Optional[float] = 0.5,
              test_fraction: float = 0.2) -> FederatedData:
    """scikit-learn's wine set (178 rows, 13 features, 3 classes; shipped), federated as
    :func:`load_breast_cancer`.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> data = fa.data.load_wine(jax.random.key(0), num_clients=3)
      >>> data.num_classes, data.features[0].shape[1]
      (3, 13)
    """
    from sklearn.datasets import load_wine as loader

    return _sklearn_set(loader, key, num_clients, alpha, test_fraction, "wine")
