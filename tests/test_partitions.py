"""Partitioners, each tested for what it promises: every row exactly once, the classes per
client, the sizes; the size laws against their closed forms."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fedjax_abc as fa

D = fa.data


def _every_row_once(parts, m):
    rows = np.concatenate(parts)
    assert rows.size == m and np.array_equal(np.sort(rows), np.arange(m))
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, no repeats


def test_shard_partition_deals_shards_and_bounds_the_classes():
    y = np.repeat(np.arange(10), 60)  # 600 rows, 100 clients x 2 shards of 3: within a class
    parts = D.shard_partition(jax.random.key(0), y, 100, 2)
    _every_row_once(parts, y.size)
    assert {len(p) for p in parts} == {6}
    assert max(len(np.unique(y[p])) for p in parts) <= 2
    uneven = np.random.default_rng(0).integers(0, 7, 503)  # shards straddle the classes
    parts = D.shard_partition(jax.random.key(1), uneven, 20, 3)
    _every_row_once(parts, uneven.size)
    assert max(len(np.unique(uneven[p])) for p in parts) <= 6
    assert max(map(len, parts)) - min(map(len, parts)) <= 3
    # the control: IID clients of this size hold about every class
    iid = D.iid_partition(jax.random.key(2), y.size, 100)
    assert np.mean([len(np.unique(y[p])) for p in iid]) > 3


def test_label_quantity_partition_gives_exactly_k_classes():
    y = np.random.default_rng(1).integers(0, 10, 2000)
    for n, k in [(10, 1), (20, 3), (7, 2)]:
        parts = D.label_quantity_partition(jax.random.key(n), y, n, k)
        assert [len(np.unique(y[p])) for p in parts] == [k] * n
        rows = np.concatenate(parts)
        assert rows.size == np.unique(rows).size  # disjoint
        held = np.unique(y[rows])
        assert np.array_equal(np.sort(rows), np.flatnonzero(np.isin(y, held)))  # all of them
    _every_row_once(D.label_quantity_partition(jax.random.key(0), y, 20, 3), y.size)
    with pytest.raises(ValueError, match="classes_per_client"):
        D.label_quantity_partition(jax.random.key(0), y, 5, 11)


def test_lognormal_sizes_follow_the_law():
    """log m_i - mean(log m_i) ~ N(0, sigma^2) up to rounding: the standard deviation of the
    log sizes over 4000 clients within 4 standard errors of sigma."""
    m, n, sigma = 2_000_000, 4000, 0.8
    parts = D.lognormal_partition(jax.random.key(0), m, n, sigma)
    _every_row_once(parts, m)
    logs = np.log([len(p) for p in parts])
    se = sigma / np.sqrt(2 * (n - 1))
    assert abs(logs.std(ddof=1) - sigma) < 4 * se
    equal = D.lognormal_partition(jax.random.key(0), 1000, 8, 0.0)
    assert {len(p) for p in equal} == {125}


def test_power_law_sizes_are_the_closed_form():
    """Sizes 1 + round((m - n) r^-a / sum_r r^-a) by largest remainders, in a random order."""
    m, n, a = 10_000, 50, 1.2
    parts = D.power_law_partition(jax.random.key(3), m, n, a)
    _every_row_once(parts, m)
    shares = np.arange(1, n + 1) ** -a
    expected = 1 + (m - n) * shares / shares.sum()
    assert np.all(np.abs(np.sort([len(p) for p in parts])[::-1] - expected) < 1)
    assert min(map(len, D.power_law_partition(jax.random.key(0), 60, 60, 3.0))) == 1


def test_column_partition_and_bad_arguments():
    ids = np.array([3, 1, 3, 2, 1, 1])
    parts = D.column_partition(ids)
    assert [p.tolist() for p in parts] == [[1, 4, 5], [3], [0, 2]]
    for call, words in [(lambda: D.shard_partition(jax.random.key(0), np.arange(5), 3, 2), "need"),
                        (lambda: D.lognormal_partition(jax.random.key(0), 5, 6, 1.0), "num_clients"),
                        (lambda: D.power_law_partition(jax.random.key(0), 5, 2, -1.0), "exponent"),
                        (lambda: D.shard_partition(jax.random.key(0), [0.5, 1.0], 1, 1), "integers"),
                        (lambda: D.column_partition([]), "non-empty")]:
        with pytest.raises(ValueError, match=words) as e:
            call()
        assert "\n" not in str(e.value)
