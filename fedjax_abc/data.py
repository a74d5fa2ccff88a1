"""Federated data sets and partitions (plain NumPy arrays, drawn from JAX keys).

- :func:`synthetic_data`: Synthetic(alpha, beta) of Li et al. 2020 (FedProx).
- :func:`load_digits`: scikit-learn's digits (shipped, no download), a held-out test split,
  the rest split over n clients, non-IID by default.
- :func:`dirichlet_partition` (Hsu et al. 2019), :func:`iid_partition`, :func:`split`: split
  any labelled data set over clients.
- :class:`FederatedData`: per-client features and labels and a pooled test set.

The learning problems of :mod:`fedjax_abc.problems` (``softmax_regression``,
``logistic_regression``, ``mlp``) take the ``features`` and ``labels`` lists.
"""

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
    "dirichlet_partition",
    "iid_partition",
    "load_digits",
    "split",
    "synthetic_data",
]
