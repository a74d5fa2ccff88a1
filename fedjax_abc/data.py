"""Federated data sets and partitions (plain NumPy arrays, drawn from JAX keys).

- :func:`synthetic_data`: Synthetic(alpha, beta) of Li et al. 2020 (FedProx).
- :func:`load_digits`: scikit-learn's digits (shipped, no download), a held-out test split,
  the rest split over n clients, non-IID by default.
- from files, no download: :func:`load_leaf` (LEAF's JSON), :func:`load_svmlight` (LIBSVM),
  :func:`load_table` (CSV, Parquet or NPZ with a client-id column); scikit-learn's shipped
  :func:`load_breast_cancer` and :func:`load_wine`.
- partitions of any labelled pool: :func:`dirichlet_partition` (Hsu et al. 2019),
  :func:`iid_partition`, :func:`shard_partition` (McMahan et al.'s shards),
  :func:`label_quantity_partition` (k classes a client), :func:`lognormal_partition` and
  :func:`power_law_partition` (skewed sizes), :func:`column_partition` (by an id column);
  :func:`split` applies one; :func:`client_holdout` splits each client's rows into its own
  training and held-out rows.
- :class:`FederatedData`: per-client features and labels and a pooled test set.

The learning problems of :mod:`fedjax_abc.problems` (``softmax_regression``,
``logistic_regression``, ``mlp``) take the ``features`` and ``labels`` lists.
"""

from fedjax_abc._problems._files import (
    load_breast_cancer,
    load_leaf,
    load_svmlight,
    load_table,
    load_wine,
)
from fedjax_abc._problems._partitions import (
    client_holdout,
    column_partition,
    label_quantity_partition,
    lognormal_partition,
    power_law_partition,
    shard_partition,
)
from fedjax_abc._problems._data import (
    FederatedData,
    dirichlet_partition,
    iid_partition,
    load_digits,
    split,
    synthetic_data,
)

__all__ = [
    "FederatedData",
    "client_holdout",
    "column_partition",
    "dirichlet_partition",
    "iid_partition",
    "label_quantity_partition",
    "load_breast_cancer",
    "load_digits",
    "load_leaf",
    "load_svmlight",
    "load_table",
    "load_wine",
    "lognormal_partition",
    "power_law_partition",
    "shard_partition",
    "split",
    "synthetic_data",
]
