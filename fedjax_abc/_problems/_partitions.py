"""More partitions of a labelled pool over clients: pathological shards, label-quantity skew,
log-normal and power-law sizes, and a split by a column.

Each returns n sorted int64 index arrays into the pool, disjoint and together every row
exactly once (``fedjax_abc.data.split`` turns them into per-client arrays). The draws come
from a JAX key (a NumPy generator seeded by its bits).

References: McMahan et al. 2017 (shards: "Communication-efficient learning of deep networks
from decentralized data", AISTATS); Li, Diao, Chen and He 2022 (label-quantity skew #C = k
and quantity skew: "Federated learning on non-IID data silos: an experimental study", ICDE).
"""

from __future__ import annotations

import numpy as np

from fedjax_abc._problems._data import _labels_check, _nonneg, _positive_int, _rng

__all__ = ["client_holdout", "column_partition", "label_quantity_partition",
           "lognormal_partition", "power_law_partition", "shard_partition"]


def _sorted_parts(parts) -> list:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def shard_partition(key, labels, num_clients: int, shards_per_client: int) -> list:
    """McMahan et al.'s pathological non-IID split: the rows sorted by label are cut into
    n s shards of (almost) equal size, and each client gets s of them at random.

    A shard lies within one class unless it straddles a class boundary, so a client holds
    at most 2 s classes, and at most s when every class's size is a multiple of the shard
    size (MNIST's 60000 rows, 100 clients, s = 2: shards of 300).

    Args:
      key: a JAX PRNG key. labels: (m,) integer labels. num_clients: n.
      shards_per_client: s >= 1, with n s <= m.

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> y = np.repeat(np.arange(5), 20)
      >>> parts = fa.data.shard_partition(jax.random.key(0), y, 5, 2)
      >>> sorted(len(np.unique(y[p])) <= 2 for p in parts), sum(map(len, parts))
      ([True, True, True, True, True], 100)
    """
    labels = _labels_check(labels)
    n = _positive_int("num_clients", num_clients)
    s = _positive_int("shards_per_client", shards_per_client)
    if n * s > labels.size:
        raise ValueError(f"{n} clients x {s} shards need at least {n * s} rows, have "
                         f"{labels.size}")
    rng = _rng(key)
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, n * s)
    deal = rng.permutation(n * s).reshape(n, s)
    return _sorted_parts(np.concatenate([shards[j] for j in row]) for row in deal)


def label_quantity_partition(key, labels, num_clients: int, classes_per_client: int) -> list:
    """Label-quantity skew (#C = k of Li et al. 2022): each client holds exactly k classes.

    Client i gets class i mod K first (so that every class has a holder when n >= K) and
    k - 1 more distinct classes at random; each class's rows are then split at random into
    (almost) equal parts among its holders. A class no client drew (n < K) is left out.

    Args:
      key: a JAX PRNG key. labels: (m,) integer labels.
      num_clients: n. classes_per_client: k, 1 <= k <= K (the number of classes present).

    Returns:
      n index arrays; client i's rows are of exactly k classes while every class has at
      least as many rows as holders.

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> y = np.repeat(np.arange(4), 30)
      >>> parts = fa.data.label_quantity_partition(jax.random.key(0), y, 6, 2)
      >>> [len(np.unique(y[p])) for p in parts]
      [2, 2, 2, 2, 2, 2]
    """
    labels = _labels_check(labels)
    n = _positive_int("num_clients", num_clients)
    k = _positive_int("classes_per_client", classes_per_client)
    classes = np.unique(labels)
    K = classes.size
    if k > K:
        raise ValueError(f"classes_per_client ({k}) must be <= the {K} classes present")
    rng = _rng(key)
    held = []
    for i in range(n):
        first = classes[i % K]
        others = rng.permutation(classes[classes != first])[: k - 1]
        held.append(np.concatenate([[first], others]))
    parts = [[] for _ in range(n)]
    for c in classes:
        holders = [i for i in range(n) if c in held[i]]
        if not holders:
            continue
        rows = rng.permutation(np.flatnonzero(labels == c))
        for i, chunk in zip(holders, np.array_split(rows, len(holders))):
            parts[i].append(chunk)
    return _sorted_parts(np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts)


def _sizes_from_shares(shares: np.ndarray, m: int) -> np.ndarray:
    """Client sizes >= 1 summing to m, proportional to ``shares`` (largest remainders)."""
    n = shares.size
    extra = (m - n) * shares / shares.sum()
    sizes = np.floor(extra).astype(np.int64)
    left = (m - n) - sizes.sum()
    sizes[np.argsort(-(extra - sizes), kind="stable")[:left]] += 1
    return sizes + 1


def _skewed(key, num_examples, num_clients, name: str, value, shares_of) -> list:
    """IID rows in client sizes proportional to ``shares_of(rng, n, value)``, each >= 1."""
    m = _positive_int("num_examples", num_examples)
    n = _positive_int("num_clients", num_clients)
    value = _nonneg(name, value)
    if n > m:
        raise ValueError(f"num_clients ({n}) must be <= num_examples ({m}): a client would be empty")
    rng = _rng(key)
    sizes = _sizes_from_shares(shares_of(rng, n, value), m)
    order = rng.permutation(m)
    return _sorted_parts(np.split(order, np.cumsum(sizes)[:-1]))


def lognormal_partition(key, num_examples: int, num_clients: int, sigma: float) -> list:
    """Quantity skew with log-normal sizes: m_i proportional to exp(sigma Z_i), Z_i ~ N(0, 1),
    every client at least one row; the rows themselves IID.

    Args:
      key: a JAX PRNG key. num_examples: m. num_clients: n <= m. sigma: >= 0 (0: equal).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> parts = fa.data.lognormal_partition(jax.random.key(0), 1000, 5, 1.0)
      >>> sum(map(len, parts)), min(map(len, parts)) >= 1
      (1000, True)
    """
    return _skewed(key, num_examples, num_clients, "sigma", sigma,
                   lambda rng, n, s: np.exp(s * rng.standard_normal(n)))


def power_law_partition(key, num_examples: int, num_clients: int, exponent: float) -> list:
    """Quantity skew with power-law sizes: the client of rank r (a random order) gets a share
    proportional to r^-exponent, every client at least one row; the rows IID.

    Args:
      key: a JAX PRNG key. num_examples: m. num_clients: n <= m. exponent: >= 0 (0: equal).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> sizes = sorted(map(len, fa.data.power_law_partition(jax.random.key(0), 100, 4, 1.0)))
      >>> sizes  # 1 + the 96 rows left in shares 1 : 1/2 : 1/3 : 1/4, largest remainders
      [13, 16, 24, 47]
    """
    return _skewed(key, num_examples, num_clients, "exponent", exponent,
                   lambda rng, n, a: rng.permutation(np.arange(1, n + 1, dtype=np.float64) ** -a))


def column_partition(values) -> list:
    """One client per distinct value of a column (a user or device id), in sorted order.

    Example:
      >>> import fedjax_abc as fa
      >>> [p.tolist() for p in fa.data.column_partition(["b", "a", "b", "c"])]
      [[1], [0, 2], [3]]
    """
    values = np.asarray(values)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values must be a non-empty 1-D column, got shape {values.shape}")
    _, inverse = np.unique(values, return_inverse=True)
    return _sorted_parts(np.flatnonzero(inverse == j) for j in range(inverse.max() + 1))


def client_holdout(key, features, labels,
                   test_fraction: float) -> tuple[list, list, list, list]:
    """Each client's rows split into its own training and held-out rows (per-client test sets,
    for :func:`~fedjax_abc.problems.client_metrics`'s held-out rows).

    Client i keeps round(test_fraction m_i) of its m_i rows for testing, clipped to
    1 .. m_i - 1, chosen uniformly at random (a permutation of each client's rows); the
    order of the rows is kept within each part.

    Args:
      key: a JAX PRNG key.
      features, labels: n arrays each, client i's (m_i, ...) features and (m_i,) labels,
        every m_i >= 2.
      test_fraction: in (0, 1).

    Returns:
      (train_features, train_labels, test_features, test_labels): four lists of n arrays.

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> X = [np.arange(10.0)[:, None], np.arange(4.0)[:, None]]
      >>> y = [np.zeros(10, int), np.ones(4, int)]
      >>> tx, ty, vx, vy = fa.data.client_holdout(jax.random.key(0), X, y, 0.25)
      >>> [len(v) for v in ty], [len(v) for v in vy]
      ([8, 3], [2, 1])
    """
    fraction = _nonneg("test_fraction", test_fraction)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    if isinstance(features, np.ndarray) or isinstance(labels, np.ndarray) or len(
            features) != len(labels):
        raise ValueError("features and labels must be two lists of n per-client arrays of the "
                         "same length")
    rng = _rng(key)
    train_x, train_y, test_x, test_y = [], [], [], []
    for i, (X, y) in enumerate(zip(features, labels)):
        X, y = np.asarray(X), np.asarray(y)
        if y.ndim != 1 or X.ndim < 1 or X.shape[0] != y.shape[0]:
            raise ValueError(f"client {i}: features {X.shape} and labels {y.shape} must have "
                             "the same rows")
        m = y.shape[0]
        if m < 2:
            raise ValueError(f"client {i} has {m} row(s): a holdout needs at least 2 a client")
        k = min(max(int(round(fraction * m)), 1), m - 1)
        test = np.zeros(m, bool)
        test[rng.permutation(m)[:k]] = True
        train_x.append(X[~test])
        train_y.append(y[~test])
        test_x.append(X[test])
        test_y.append(y[test])
    return train_x, train_y, test_x, test_y
