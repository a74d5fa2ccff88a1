"""The data sets: Synthetic(alpha, beta) against a NumPy rewrite of the published generator,
the Dirichlet and IID partitions, and the digits split.

``_published`` below follows Li et al.'s ``generate_synthetic.py`` line by line with NumPy's
generator (sizes floor(LogNormal(4, 2)) + 50, W_k, b_k ~ N(u_k, 1), v_k ~ N(B_k, 1),
x ~ N(v_k, diag(j^-1.2)), y = argmax(x W_k + b_k)); the package's draws come from JAX keys,
so the two are compared in distribution.
"""

import jax
import numpy as np
import pytest
from scipy import stats

import fedjax_abc as fa


def _published(rng, alpha, beta, n, p=60, K=10, cap=None):
    sizes = rng.lognormal(4, 2, n).astype(int) + 50
    if cap is not None:
        sizes = np.minimum(sizes, cap)
    mean_W = rng.normal(0, alpha, n)
    B = rng.normal(0, beta, n)
    cov = np.diag(np.power(np.arange(1, p + 1), -1.2))
    out = []
    for i in range(n):
        mean_x = rng.normal(B[i], 1, p)
        W = rng.normal(mean_W[i], 1, (p, K))
        b = rng.normal(mean_W[i], 1, K)
        x = rng.multivariate_normal(mean_x, cov, sizes[i])
        out.append((sizes[i], np.argmax(x @ W + b, axis=1)))
    return out


def _majority_share(labels, K=10):
    return np.array([np.bincount(y, minlength=K).max() / len(y) for y in labels])


def test_client_sizes_follow_the_published_law():
    data = fa.data.synthetic_data(jax.random.key(0), 0.0, 0.0, num_clients=600, num_features=2,
                                  num_classes=2, train_fraction=1.0)
    rng = np.random.default_rng(0)
    published = rng.lognormal(4, 2, 20_000).astype(int) + 50
    assert data.sizes.min() >= 50
    assert stats.ks_2samp(data.sizes, published).pvalue > 1e-3


@pytest.mark.parametrize("ab", [(0.0, 0.0), (1.0, 1.0)])
def test_class_balance_matches_the_published_generator(ab):
    n, cap = 200, 120
    data = fa.data.synthetic_data(jax.random.key(1), *ab, num_clients=n, max_samples=cap,
                                  train_fraction=1.0)
    pub = _published(np.random.default_rng(1), *ab, n, cap=cap)
    mine, theirs = _majority_share(data.labels), _majority_share([y for _, y in pub])
    se = np.hypot(mine.std(ddof=1), theirs.std(ddof=1)) / np.sqrt(n)
    assert abs(mine.mean() - theirs.mean()) < 4 * se, (mine.mean(), theirs.mean(), se)
    freq = np.bincount(np.concatenate(data.labels), minlength=10) / sum(data.sizes)
    assert np.all(freq > 0.02)  # every class present overall


def test_beta_skews_labels_and_alpha_changes_nothing():
    key = jax.random.key(2)
    a0 = fa.data.synthetic_data(key, 0.0, 1.0, num_clients=20, max_samples=100)
    a1 = fa.data.synthetic_data(key, 1.0, 1.0, num_clients=20, max_samples=100)
    for x0, x1, y0, y1 in zip(a0.features, a1.features, a0.labels, a1.labels):
        np.testing.assert_array_equal(x0, x1)
        np.testing.assert_array_equal(y0, y1)  # u_k shifts every logit alike: argmax unchanged
    b0 = fa.data.synthetic_data(jax.random.key(3), 0.0, 0.0, num_clients=200, max_samples=100)
    b2 = fa.data.synthetic_data(jax.random.key(3), 0.0, 2.0, num_clients=200, max_samples=100)
    assert _majority_share(b2.labels).mean() > _majority_share(b0.labels).mean() + 0.05


@pytest.mark.slow
def test_sigma_f_star_against_alpha_and_beta():
    """Measured, not the expected "larger alpha, beta -> larger sigma_f*": alpha leaves the data
    unchanged, and sigma_f* falls as beta grows (the mean loss falls with it)."""
    sig = {}
    for ab in [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)]:
        sig[ab] = np.mean([fa.theory.sigma_f_star(fa.problems.synthetic(
            jax.random.key(k), *ab, num_clients=30, max_samples=400)) for k in range(3)])
    assert sig[1.0, 0.0] == sig[0.0, 0.0] and sig[1.0, 1.0] == sig[0.0, 1.0]
    assert sig[0.0, 1.0] < sig[0.0, 0.0]


def test_dirichlet_partition():
    y = np.repeat(np.arange(5), 40)
    for alpha, lo, hi in [(0.05, 0.8, 1.01), (1000.0, 0.0, 0.45)]:
        parts = fa.data.dirichlet_partition(jax.random.key(4), y, 8, alpha)
        flat = np.concatenate(parts)
        assert [len(q) for q in parts] == [25] * 8 and len(np.unique(flat)) == flat.size
        share = _majority_share([y[q] for q in parts], 5).mean()
        assert lo <= share <= hi, (alpha, share)
    again = fa.data.dirichlet_partition(jax.random.key(4), y, 8, 1000.0)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_iid_partition_and_digits():
    parts = fa.data.iid_partition(jax.random.key(0), 103, 10)
    assert sorted(np.concatenate(parts).tolist()) == list(range(103))
    assert {len(q) for q in parts} == {10, 11}
    d = fa.data.load_digits(jax.random.key(0), num_clients=6, alpha=0.3)
    assert d.num_clients == 6 and d.num_classes == 10 and d.features[0].shape[1] == 64
    assert len(d.test_labels) + d.sizes.sum() <= 1797 and d.sizes.min() > 0
    assert np.all(np.bincount(d.test_labels, minlength=10) >= 35)  # stratified, ~20% of each
    assert max(np.max(f) for f in d.features) <= 1.0
    iid = fa.data.load_digits(jax.random.key(0), num_clients=6, alpha=None)
    assert _majority_share(iid.labels).mean() < _majority_share(d.labels).mean()
