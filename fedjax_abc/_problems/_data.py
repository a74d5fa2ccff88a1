"""Federated data sets: Li et al.'s Synthetic(alpha, beta), scikit-learn's digits, partitions.

- :func:`synthetic_data`: Synthetic(alpha, beta) of Li et al. 2020 (FedProx, MLSys), as
  their generator ``data/synthetic_*/generate_synthetic.py`` in github.com/litian96/FedProx
  builds it, drawn from a JAX key.
- :func:`iid_partition`, :func:`dirichlet_partition`: split any labelled data set over n
  clients, uniformly at random or with Dirichlet(alpha) label proportions (Hsu et al. 2019).
- :func:`load_digits`: scikit-learn's 8x8 digits (shipped with scikit-learn, no download),
  a held-out test split and the training part partitioned over n clients.

Every function returns plain NumPy arrays (float64 features, int32 labels) in a
:class:`FederatedData`; the learning problems (``fedjax_abc.problems.softmax_regression``
and others) take its ``features`` and ``labels`` lists.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "FederatedData",
    "dirichlet_partition",
    "iid_partition",
    "load_digits",
    "split",
    "synthetic_data",
]


class FederatedData(NamedTuple):
    """Per-client training data and a pooled held-out test set.

    Attributes:
      features: n arrays (m_i, p), float64, client i's training features.
      labels: n arrays (m_i,), int32 in [0, num_classes), client i's training labels.
      test_features: (m_test, p) float64.
      test_labels: (m_test,) int32.
      num_classes: K.
    """

    features: list
    labels: list
    test_features: np.ndarray
    test_labels: np.ndarray
    num_classes: int

    @property
    def num_clients(self) -> int:
        return len(self.features)

    @property
    def sizes(self) -> np.ndarray:
        """m_i, the number of training samples of each client."""
        return np.array([len(y) for y in self.labels])


def _key_check(key) -> jax.Array:
    if not (isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
            and key.shape == ()):
        raise ValueError("key must be a single JAX PRNG key, e.g. jax.random.key(0)")
    return key


def _positive_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _nonneg(name: str, value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not (np.isfinite(out) and out >= 0):
        raise ValueError(f"{name} ({value}) must be finite and >= 0")
    return out


_CHUNK = 1 << 16


@jax.jit
def _chunk(key, j):
    k = jax.random.fold_in(key, j)
    return jax.random.normal(k, (_CHUNK,), jnp.float64), jax.random.uniform(k, (_CHUNK,), jnp.float64)


def _draws(key, shape, kind: str = "normal") -> np.ndarray:
    """Standard normals (or uniforms on [0, 1)) of any shape from chunks of fixed size: one
    compiled program whatever the shapes (a data set's sizes are random)."""
    count = int(np.prod(shape))
    pick = 0 if kind == "normal" else 1
    parts = [np.asarray(_chunk(key, j)[pick]) for j in range(-(-count // _CHUNK))]
    flat = np.concatenate(parts) if parts else np.zeros(0)
    return flat[:count].reshape(shape)


def split(features, labels, parts, *, partial: bool = False) -> tuple[list, list]:
    """(features[idx], labels[idx]) for every index array idx of ``parts``, as two lists.

    The parts must be disjoint (a row in two clients, or twice in one, is a ValueError
    naming it) and, unless ``partial``, cover every row (a row no part holds is a
    ValueError naming how many are left out)."""
    features, labels = np.asarray(features), np.asarray(labels)
    if features.ndim < 1 or labels.ndim != 1 or features.shape[0] != labels.shape[0]:
        raise ValueError(f"features (m, p) and labels (m,) must have the same rows, got "
                         f"{features.shape} and {labels.shape}")
    if isinstance(parts, (str, bytes, dict)) or not hasattr(parts, "__iter__"):
        raise ValueError(f"parts must be a list of index arrays (e.g. from iid_partition), "
                         f"got {parts!r}"[:200])
    parts = [np.asarray(idx) for idx in parts]
    m = labels.shape[0]
    for i, idx in enumerate(parts):
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise ValueError(f"parts[{i}] must be a 1-D array of integer indices, got "
                             f"{idx.dtype} of shape {idx.shape}")
        if idx.size and not (0 <= idx.min() and idx.max() < m):
            raise ValueError(f"parts[{i}] holds index {int(idx.max() if idx.max() >= m else idx.min())} "
                             f"outside 0..{m - 1} (the {m} samples)")
    owner = np.full(m, -1)
    for i, idx in enumerate(parts):
        taken = np.flatnonzero(owner[idx] >= 0)
        twice = np.flatnonzero(np.bincount(idx) > 1) if idx.size else idx
        if taken.size or twice.size:
            row = int(idx[taken[0]]) if taken.size else int(twice[0])
            where = f"parts[{int(owner[row])}] and parts[{i}]" if taken.size else \
                f"parts[{i}] twice"
            raise ValueError(f"row {row} is in {where}: the parts must be disjoint")
        owner[idx] = i
    missing = int(np.sum(owner < 0))
    if missing and not partial:
        raise ValueError(f"{missing} of the {m} rows are in no part (the first: row "
                         f"{int(np.flatnonzero(owner < 0)[0])}); give parts that cover every "
                         "row, or partial=True to leave them out")
    return [features[idx] for idx in parts], [labels[idx] for idx in parts]


# --------------------------------------------------------------------------- Synthetic


def synthetic_data(key, alpha: float, beta: float, num_clients: int = 30, *,
                   num_features: int = 60, num_classes: int = 10,
                   train_fraction: float = 0.9,
                   max_samples: Optional[int] = None) -> FederatedData:
    """Synthetic(alpha, beta) of Li et al. 2020 (FedProx), drawn from a JAX key.

    As in their generator (``generate_synthetic.py`` of github.com/litian96/FedProx, read for
    this implementation): client k has N_k = floor(LogNormal(4, 2)) + 50 samples; u_k ~
    N(0, alpha), B_k ~ N(0, beta); W_k ~ N(u_k, 1) of shape (p, K) and b_k ~ N(u_k, 1) of
    shape (K,); v_k ~ N(B_k, 1) in R^p; features x ~ N(v_k, Sigma) with Sigma = diag(j^-1.2),
    j = 1..p; label y = argmax(x W_k + b_k). Each client's samples are shuffled and its
    first floor(0.9 N_k) are its training data, the rest go to the pooled test set (their
    90/10 split). p = 60 and K = 10 as in the paper.

    The draws use JAX's generator, so the numbers differ from theirs (NumPy's global seed)
    while the distribution is the same. Note that u_k shifts every entry of W_k and b_k by
    the same amount, which changes no argmax: alpha leaves the distribution of (x, y)
    unchanged, only beta moves it (it is so in the published generator too).

    Args:
      key: a JAX PRNG key.
      alpha, beta: >= 0.
      num_clients: n (30 in the paper).
      num_features: p (60). num_classes: K (10).
      train_fraction: the share of each client's samples kept for training (0.9).
      max_samples: cap on N_k (default None: the published generator, uncapped). The
        log-normal sizes have a heavy tail (the largest of 30 clients is often several
        thousand samples, sometimes tens of thousands) and full-batch evaluations (f, grad f,
        the records of a run) cost n x max_k m_k per point, the data being padded.

    Returns:
      A :class:`FederatedData`.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, num_clients=5)
      >>> data.features[0].shape[1], data.num_classes, int(data.sizes.min()) >= 45
      (60, 10, True)

    Reference: T. Li et al., "Federated optimization in heterogeneous networks", MLSys 2020,
    Section 5.1.
    """
    key = _key_check(key)
    alpha, beta = _nonneg("alpha", alpha), _nonneg("beta", beta)
    n = _positive_int("num_clients", num_clients)
    p = _positive_int("num_features", num_features)
    K = _positive_int("num_classes", num_classes, 2)
    if not 0.0 < float(train_fraction) <= 1.0:
        raise ValueError(f"train_fraction ({train_fraction}) must be in (0, 1]")
    k_size, k_u, k_b, k_v, k_w, k_bias, k_x, k_perm = jax.random.split(key, 8)
    sizes = np.floor(np.exp(4.0 + 2.0 * _draws(k_size, (n,)))).astype(np.int64) + 50
    if max_samples is not None:
        sizes = np.minimum(sizes, _positive_int("max_samples", max_samples, 2))
    u = alpha * _draws(k_u, (n,))
    B = beta * _draws(k_b, (n,))
    v = B[:, None] + _draws(k_v, (n, p))
    W = u[:, None, None] + _draws(k_w, (n, p, K))
    b = u[:, None] + _draws(k_bias, (n, K))
    total = int(sizes.sum())
    owner = np.repeat(np.arange(n), sizes)  # the client of each of the N samples
    scale = np.arange(1, p + 1, dtype=np.float64) ** -0.6  # sqrt of diag(j^-1.2)
    x = v[owner] + scale * _draws(k_x, (total, p))
    y = np.argmax(np.einsum("np,npk->nk", x, W[owner]) + b[owner], axis=1).astype(np.int32)
    shuffle = _draws(k_perm, (total,), "uniform")
    feats, labs, test_x, test_y = [], [], [], []
    for k, (lo, hi) in enumerate(zip(np.cumsum(sizes) - sizes, np.cumsum(sizes))):
        order = lo + np.argsort(shuffle[lo:hi], kind="stable")  # a uniform shuffle of client k
        m = int(train_fraction * sizes[k])
        feats.append(x[order[:m]])
        labs.append(y[order[:m]])
        test_x.append(x[order[m:]])
        test_y.append(y[order[m:]])
    return FederatedData(feats, labs, np.concatenate(test_x).reshape(-1, p),
                         np.concatenate(test_y).astype(np.int32), K)


# -------------------------------------------------------------------------- partitions


def _labels_check(labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ValueError("labels must be integers >= 0")
    return labels


def _rng(key) -> np.random.Generator:
    """A NumPy generator seeded by a JAX key's bits (partitions are host-side bookkeeping)."""
    return np.random.default_rng(np.asarray(jax.random.bits(_key_check(key), (4,), jnp.uint32)))


def iid_partition(key, num_examples: int, num_clients: int) -> list:
    """A uniformly random split of ``range(num_examples)`` into n parts of (almost) equal size.

    Args:
      key: a JAX PRNG key.
      num_examples: how many examples (>= num_clients).
      num_clients: n.

    Returns:
      n sorted int64 index arrays; sizes differ by at most one.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> [len(p) for p in fa.data.iid_partition(jax.random.key(0), 10, 3)]
      [4, 3, 3]
    """
    m = _positive_int("num_examples", num_examples)
    n = _positive_int("num_clients", num_clients)
    if n > m:
        raise ValueError(f"num_clients ({n}) must be <= num_examples ({m}): a client would be empty")
    order = _rng(key).permutation(m)
    return [np.sort(part) for part in np.array_split(order, n)]


def dirichlet_partition(key, labels, num_clients: int, alpha: float, *,
                        samples_per_client: Optional[int] = None) -> list:
    """A non-IID split by Dirichlet label proportions (Hsu, Qi and Brown, 2019).

    Client i draws its class proportions q_i ~ Dir(alpha p), p the class frequencies of
    ``labels``, then takes ``samples_per_client`` examples (default: an equal share of all),
    each from class k with probability q_ik, without replacement from a common pool; when
    a class runs out, q_i is renormalised over the classes left. alpha -> infinity gives
    about IID clients, alpha -> 0 clients of a single class.

    Args:
      key: a JAX PRNG key.
      labels: (m,) integer labels.
      num_clients: n.
      alpha: the Dirichlet concentration (> 0).
      samples_per_client: examples per client (default floor(m / n)); n times it must not
        exceed m.

    Returns:
      n sorted int64 index arrays into ``labels``, disjoint, each of the same length.

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> y = np.repeat(np.arange(4), 25)
      >>> parts = fa.data.dirichlet_partition(jax.random.key(0), y, 4, alpha=0.1)
      >>> [len(p) for p in parts], len(np.unique(np.concatenate(parts)))
      ([25, 25, 25, 25], 100)

    Reference: T.-M. H. Hsu, H. Qi, M. Brown, "Measuring the effects of non-identical data
    distribution for federated visual classification", arXiv:1909.06335, 2019.
    """
    labels = _labels_check(labels)
    n = _positive_int("num_clients", num_clients)
    a = float(alpha)
    if not (np.isfinite(a) and a > 0):
        raise ValueError(f"alpha ({alpha}) must be finite and > 0")
    m = labels.size
    per = m // n if samples_per_client is None else _positive_int("samples_per_client",
                                                                  samples_per_client)
    if per < 1 or per * n > m:
        raise ValueError(f"{n} clients x {per} samples need {n * per} examples, have {m}")
    rng = _rng(key)
    K = int(labels.max()) + 1
    prior = np.bincount(labels, minlength=K) / m
    pools = [list(rng.permutation(np.flatnonzero(labels == k))) for k in range(K)]
    parts = []
    for _ in range(n):
        present = prior > 0
        q = np.zeros(K)
        q[present] = rng.dirichlet(a * prior[present])
        if not (np.all(np.isfinite(q)) and q.sum() > 0):  # alpha so small that Dir underflows
            q = np.eye(K)[rng.choice(K, p=prior)]
        left = np.array([len(pool) for pool in pools], dtype=np.float64)
        take = []
        for _ in range(per):
            w = q * (left > 0)
            if w.sum() <= 0:  # q put all its mass on classes that ran out: any class left
                w = (left > 0).astype(np.float64)
            k = int(rng.choice(K, p=w / w.sum()))
            take.append(pools[k].pop())
            left[k] -= 1
        parts.append(np.sort(np.array(take, dtype=np.int64)))
    return parts


# ------------------------------------------------------------------------------ digits


def held_out_split(key, y: np.ndarray, num_classes: int, test_fraction: float):
    """(train rows, test rows, the key left for the partition): a stratified random
    ``test_fraction`` of every class's rows held out (rounded per class)."""
    k_test, k_part = jax.random.split(_key_check(key))
    rng = _rng(k_test)
    test = []
    for k in range(num_classes):  # stratified: the same share of every class
        idx = rng.permutation(np.flatnonzero(y == k))
        test.append(idx[: int(round(test_fraction * idx.size))])
    test = np.sort(np.concatenate(test)).astype(np.int64)
    return np.setdiff1d(np.arange(y.size), test), test, k_part


def load_digits(key, num_clients: int = 10, *, alpha: Optional[float] = 0.5,
                test_fraction: float = 0.2) -> FederatedData:
    """scikit-learn's digits (1797 8x8 images, 10 classes; shipped, no download), federated.

    The features are the 64 pixel intensities divided by 16 (in [0, 1]). A stratified
    random ``test_fraction`` of the examples is held out as the test set; the rest is split
    over the clients by :func:`dirichlet_partition` with ``alpha`` (non-IID), or uniformly
    at random by :func:`iid_partition` when ``alpha`` is None.

    Args:
      key: a JAX PRNG key.
      num_clients: n.
      alpha: Dirichlet concentration, or None for an IID split.
      test_fraction: share held out, in (0, 1).

    Returns:
      A :class:`FederatedData` with p = 64, K = 10.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> data = fa.data.load_digits(jax.random.key(0), num_clients=5)
      >>> data.num_clients, data.features[0].shape[1], len(data.test_labels)
      (5, 64, 359)
    """
    from sklearn.datasets import load_digits as sk_load_digits

    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction ({test_fraction}) must be in (0, 1)")
    raw = sk_load_digits()
    X = np.asarray(raw.data, np.float64) / 16.0
    y = np.asarray(raw.target, np.int32)
    train, test, k_part = held_out_split(key, y, 10, test_fraction)
    if alpha is None:
        parts = iid_partition(k_part, train.size, num_clients)
    else:
        parts = dirichlet_partition(k_part, y[train], num_clients, alpha)
    feats, labs = split(X[train], y[train], parts, partial=True)  # a partition's leftovers
    return FederatedData(feats, labs, X[test], y[test], 10)
