"""Plain-NumPy references for Byzantine-robust aggregation, pre-aggregation and attacks.

Nothing here imports fedjax_abc or ByzFL: every function is written from the definitions of
ByzFL (the EPFL library, ``byzfl`` 0.0.11: ``byzfl/aggregators/aggregators.py``,
``byzfl/aggregators/preaggregators.py``, ``byzfl/attacks/attacks.py``) and of the papers
those classes cite. Each function names the ByzFL class it mirrors.

Conventions
-----------
- Messages are an array ``x`` of shape (m, d) with an optional weight vector ``w`` of shape
  (m,). A weight of 0 marks an absent slot: absent rows are dropped first (keeping the order
  of the present rows) and ByzFL's rule is then applied to the k present rows. Non-zero
  weights only mark presence; ByzFL's rules are unweighted, so are these.
- Everything is computed in float64.
- Ties are broken as ByzFL does where ByzFL fixes the order (Krum: first index of the
  minimal score; MDA: first minimal subset in ``itertools.combinations`` order). Where ByzFL
  uses ``argpartition`` (MultiKrum, NNM), whose choice among tied candidates at the boundary
  is unspecified, these functions take the lowest indices (a stable sort); the outputs agree
  whenever the tied candidates are equal vectors.
- Distances are Euclidean, formed as ``sqrt(sum((x_i - x_j)^2))`` as SciPy's ``cdist`` does;
  Krum's squared distances are that value squared (ByzFL: ``cdist(...)**2``), so exact ties
  on integer-valued inputs fall the same way as in ByzFL.
- Attacks receive the honest messages (h, d) (with an optional weight vector of the same
  convention) and return one Byzantine message (d,); :func:`with_byzantine` appends f copies
  AFTER the honest rows, as ByzFL's ``Optimal_*`` attacks and training loop do.

References
----------
- Blanchard, El Mhamdi, Guerraoui, Stainer, "Machine Learning with Adversaries: Byzantine
  Tolerant Gradient Descent", NeurIPS 2017 (Krum, Multi-Krum).
- Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust Distributed Learning: Towards Optimal
  Statistical Rates", ICML 2018 (coordinate-wise median and trimmed mean).
- Pillutla, Kakade, Harchaoui, "Robust Aggregation for Federated Learning", IEEE TSP 2022
  (smoothed Weiszfeld geometric median).
- Karimireddy, He, Jaggi, "Learning from History for Byzantine Robust Optimization", ICML
  2021 (centered clipping); "Byzantine-Robust Learning on Heterogeneous Datasets via
  Bucketing", ICLR 2022 (bucketing).
- El Mhamdi, Guerraoui, Rouault, "The Hidden Vulnerability of Distributed Learning in
  Byzantium", ICML 2018, and Rousseeuw 1985 (minimum diameter averaging, MDA).
- Allouah, Farhadkhani, Guerraoui, Gupta, Pinot, Stephan, "Fixing by Mixing: A Recipe for
  Optimal Byzantine ML under Heterogeneity", AISTATS 2023 (nearest neighbour mixing, NNM).
- Allen-Zhu, Ebrahimian, Li, Alistarh, "Byzantine-Resilient Non-Convex Stochastic Gradient
  Descent", ICLR 2021 (sign flipping).
- Xie, Koyejo, Gupta, "Fall of Empires: Breaking Byzantine-tolerant SGD by Inner Product
  Manipulation", UAI 2019 (IPM).
- Baruch, Baruch, Goldberg, "A Little Is Enough: Circumventing Defenses for Distributed
  Learning", NeurIPS 2019 (ALIE and its z_max).
- Karimireddy, He, Jaggi, ICLR 2022 (above) (Mimic).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np
from scipy.stats import norm

__all__ = [
    "present",
    "average",
    "coordinate_median",
    "trimmed_mean",
    "krum_scores",
    "krum",
    "multi_krum",
    "geometric_median",
    "centered_clipping",
    "mda",
    "nnm",
    "bucketing",
    "clipping",
    "compose",
    "sign_flip",
    "ipm",
    "alie",
    "mimic",
    "inf_attack",
    "gaussian",
    "with_byzantine",
    "optimal_ipm_tau",
    "optimal_ipm",
    "optimal_alie_tau",
    "optimal_alie",
    "alie_z_max",
]


# --------------------------------------------------------------------------------- helpers


def present(x, w=None) -> np.ndarray:
    """The present rows of ``x`` (m, d) as float64 (k, d): rows whose weight is non-zero,
    in their original order. ``w=None`` means every row is present."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"messages must be (m, d), got shape {x.shape}")
    if w is None:
        return x
    w = np.asarray(w)
    if w.shape != (x.shape[0],):
        raise ValueError(f"weights must be ({x.shape[0]},), got shape {w.shape}")
    return x[w != 0]


def _distances(x: np.ndarray) -> np.ndarray:
    """Pairwise Euclidean distances (k, k), sqrt of the summed squared differences."""
    diff = x[:, None, :] - x[None, :, :]
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.sum(diff * diff, axis=-1))


def _check_f(f: int, k: int, name: str) -> None:
    if not isinstance(f, (int, np.integer)) or f < 0:
        raise ValueError(f"{name}: f must be a non-negative integer, got {f!r}")
    if 2 * f >= k:
        raise ValueError(f"{name}: needs 2f < k present messages, got f={f}, k={k}")


# ----------------------------------------------------------------------------- aggregators


def average(x, w=None) -> np.ndarray:
    """Mean of the present rows. ByzFL ``Average``."""
    return np.mean(present(x, w), axis=0)


def coordinate_median(x, w=None) -> np.ndarray:
    """Coordinate-wise median of the present rows (``np.median``: the mean of the two middle
    values when k is even). ByzFL ``Median``; Yin et al., ICML 2018."""
    return np.median(present(x, w), axis=0)


def trimmed_mean(x, w=None, f: int = 0) -> np.ndarray:
    """Coordinate-wise trimmed mean: per coordinate, sort the k present values, drop the f
    smallest and the f largest, average the k - 2f left. f = 0 is the mean. Needs 2f < k.
    ByzFL ``TrMean(f)``; Yin et al., ICML 2018."""
    v = present(x, w)
    _check_f(f, len(v), "trimmed_mean")
    if f == 0:
        return np.mean(v, axis=0)
    return np.mean(np.sort(v, axis=0)[f : len(v) - f], axis=0)


def krum_scores(x, w=None, f: int = 0) -> np.ndarray:
    """Krum's score of each present row: the mean of its squared distances to the others,
    sorted ascending, positions 1 .. k-f-1 (position 0, the distance to itself, dropped),
    i.e. the mean over its k - f - 1 nearest neighbours. ByzFL ``Krum``: ``mean(sort(cdist**2,
    axis=1)[:, 1:k-f], axis=1)``. (Blanchard et al. sum over the k - f - 2 nearest
    neighbours; the neighbour count differs, so the argmin can differ; ByzFL's count is the
    one mirrored here.)"""
    v = present(x, w)
    _check_f(f, len(v), "krum")
    k = len(v)
    sq = _distances(v) ** 2
    return np.mean(np.sort(sq, axis=1)[:, 1 : k - f], axis=1)


def krum(x, w=None, f: int = 0) -> np.ndarray:
    """The present row of minimal Krum score (first index on ties). ByzFL ``Krum(f)``;
    Blanchard et al., NeurIPS 2017."""
    v = present(x, w)
    return v[int(np.argmin(krum_scores(v, None, f)))].copy()


def multi_krum(x, w=None, f: int = 0) -> np.ndarray:
    """Mean of the k - f present rows of lowest Krum score (lowest index first among ties at
    the boundary). ByzFL ``MultiKrum(f)`` (which keeps k - f rows); Blanchard et al. 2017."""
    v = present(x, w)
    scores = krum_scores(v, None, f)
    keep = np.argsort(scores, kind="stable")[: len(v) - f]
    return np.mean(v[keep], axis=0)


def geometric_median(x, w=None, nu: float = 0.1, T: int = 3) -> np.ndarray:
    """Smoothed Weiszfeld iterations exactly as ByzFL ``GeometricMedian(nu, T)``
    (Pillutla et al., IEEE TSP 2022): rows containing an infinite entry are left out; z starts
    at 0; T times, beta_i = (1/k) / max(||x_i - z||, nu) over the kept rows and
    z = sum_i beta_i x_i / sum_i beta_i. (The factor 1/k, k the number of present rows
    including left-out ones, cancels.) T = 0 returns 0."""
    v = present(x, w)
    if not isinstance(T, (int, np.integer)) or T < 0:
        raise ValueError(f"geometric_median: T must be a non-negative integer, got {T!r}")
    z = np.zeros(v.shape[1])
    kept = v[~np.any(np.isinf(v), axis=1)]
    alpha = 1.0 / len(v)
    for _ in range(T):
        dist = np.linalg.norm(kept - z, axis=1)
        dist = np.maximum(dist, nu)
        betas = (alpha / dist)[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.sum(kept * betas, axis=0) / np.sum(betas)
    return z


def centered_clipping(x, w=None, tau: float = 100.0, L: int = 1, center=None) -> np.ndarray:
    """Centered clipping as ByzFL ``CenteredClipping(m, L, tau)`` on a fresh instance
    (Karimireddy et al., ICML 2021): v = center (0 by default); L times,
    v <- v + mean_i (x_i - v) min(1, tau / ||x_i - v||). (A ByzFL instance keeps v as the
    centre of its next call; this function is stateless: pass the centre.)"""
    v_rows = present(x, w)
    v = np.zeros(v_rows.shape[1]) if center is None else np.array(center, dtype=np.float64)
    for _ in range(L):
        diff = v_rows - v
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.minimum(1.0, tau / np.linalg.norm(diff, axis=1))
            v = v + np.mean(diff * factor[:, None], axis=0)
    return v


def mda(x, w=None, f: int = 0) -> np.ndarray:
    """Minimum diameter averaging: among all subsets of k - f present rows (in
    ``itertools.combinations`` order), the first one of minimal diameter (largest pairwise
    distance, strict improvement only), averaged. ByzFL ``MDA(f)``; El Mhamdi et al., ICML
    2018. Exhaustive: C(k, f) subsets. A subset of one row has diameter 0 (ByzFL raises on
    the max of an empty set; only k - f = 1, i.e. k = 1, f = 0)."""
    v = present(x, w)
    _check_f(f, len(v), "mda")
    k = len(v)
    size = k - f
    dist = _distances(v)
    best, best_diam = tuple(range(size)), np.inf
    for subset in itertools.combinations(range(k), size):
        if size == 1:
            diam = 0.0
        else:
            idx = np.array(subset)
            diam = np.max(dist[np.ix_(idx, idx)])
        if diam < best_diam:
            best, best_diam = subset, diam
    return np.mean(v[np.array(best)], axis=0)


# ------------------------------------------------------------------------- pre-aggregators


def nnm(x, w=None, f: int = 0) -> np.ndarray:
    """Nearest neighbour mixing: each present row replaced by the mean of its k - f nearest
    present rows (itself included, Euclidean distance, lowest index first among ties).
    Returns (k, d). ByzFL ``NNM(f)`` (needs f < k); Allouah et al., AISTATS 2023."""
    v = present(x, w)
    k = len(v)
    if not isinstance(f, (int, np.integer)) or f < 0 or not f < k:
        raise ValueError(f"nnm: needs 0 <= f < k present messages, got f={f}, k={k}")
    idx = np.argsort(_distances(v), axis=1, kind="stable")[:, : k - f]
    return np.mean(v[idx], axis=1)


def bucketing(x, w=None, s: int = 1, perm=None) -> np.ndarray:
    """Bucketing: the present rows taken in the order ``perm`` gives, cut into consecutive
    buckets of s, each bucket averaged; a last partial bucket (k mod s rows) is averaged too.
    Returns (ceil(k / s), d). ByzFL ``Bucketing(s)`` draws ``perm`` with
    ``np.random.permutation``; here it is an argument. ``perm`` may be a permutation of the k
    present rows (indices 0..k-1 into the present rows) or of all m slots (absent slots are
    then skipped, keeping the permuted order of the present ones); when k = m both read the
    same. ``perm=None`` keeps the given order. Karimireddy, He, Jaggi, ICLR 2022."""
    x = np.asarray(x, dtype=np.float64)
    v = present(x, w)
    k = len(v)
    if not isinstance(s, (int, np.integer)) or s <= 0:
        raise ValueError(f"bucketing: s must be a positive integer, got {s!r}")
    if perm is None:
        order = v
    else:
        perm = np.asarray(perm)
        if len(perm) == k and np.array_equal(np.sort(perm), np.arange(k)):
            order = v[perm]
        elif len(perm) == len(x) and np.array_equal(np.sort(perm), np.arange(len(x))):
            mask = np.ones(len(x), bool) if w is None else (np.asarray(w) != 0)
            order = x[perm[mask[perm]]]
        else:
            raise ValueError(f"bucketing: perm must permute the {k} present rows or all {len(x)} slots")
    full = k // s
    out = [np.mean(order[i * s : (i + 1) * s], axis=0) for i in range(full)]
    if full * s != k:
        out.append(np.mean(order[full * s :], axis=0))
    return np.stack(out)


def clipping(x, w=None, c: float = 2.0) -> np.ndarray:
    """Each present row scaled by c / ||x_i|| when its norm exceeds c. Returns (k, d) (a new
    array; ByzFL's ``Clipping(c)`` writes into its input). ByzFL ``Clipping(c)``."""
    v = present(x, w).copy()
    # row by row, as ByzFL (a 1-D norm rounds differently from ``norm(axis=1)``; on the flat
    # stretches of the Optimal_* line searches that last bit decides which tau is kept)
    norms = np.array([np.linalg.norm(row) for row in v])
    over = norms > c
    v[over] = v[over] * (c / norms[over])[:, None]
    return v


def compose(aggregator: Callable, pre_aggregators: Sequence[Callable] = ()) -> Callable:
    """``x, w -> aggregator(p_n(...p_1(present(x, w))))``: the pre-aggregators applied in
    order to the present rows, then the aggregator (ByzFL's ``RobustAggregator`` order)."""

    def composed(x, w=None):
        v = present(x, w)
        for p in pre_aggregators:
            v = p(v)
        return aggregator(v)

    return composed


# --------------------------------------------------------------------------------- attacks


def sign_flip(honest, w=None) -> np.ndarray:
    """-mean of the honest messages. ByzFL ``SignFlipping``; Allen-Zhu et al., ICLR 2021."""
    return -np.mean(present(honest, w), axis=0)


def ipm(honest, w=None, tau: float = 2.0) -> np.ndarray:
    """-tau mean of the honest messages. ByzFL ``InnerProductManipulation(tau)``; Xie,
    Koyejo, Gupta, UAI 2019."""
    return np.mean(present(honest, w), axis=0) * (-tau)


def alie(honest, w=None, tau: float = 1.5) -> np.ndarray:
    """mean + tau * std of the honest messages, coordinate-wise, std with ddof = 1 (one
    honest message gives nan). ByzFL ``ALittleIsEnough(tau)``; Baruch et al., NeurIPS 2019."""
    h = present(honest, w)
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.sqrt(np.var(h, axis=0, ddof=1))
    return np.mean(h, axis=0) + sd * tau


def mimic(honest, w=None, epsilon: int = 0) -> np.ndarray:
    """A copy of honest message number ``epsilon`` (an index into the present honest rows).
    ByzFL ``Mimic(epsilon)``; Karimireddy, He, Jaggi, ICLR 2022."""
    h = present(honest, w)
    if not 0 <= epsilon < len(h):
        raise ValueError(f"mimic: epsilon must be < {len(h)} honest messages, got {epsilon}")
    return h[epsilon].copy()


def inf_attack(honest, w=None) -> np.ndarray:
    """+inf in every coordinate. ByzFL ``Inf``."""
    return np.full(present(honest, w).shape[1], np.inf)


def gaussian(honest, w=None, mu: float = 0.0, sigma: float = 1.0, z=None) -> np.ndarray:
    """mu + sigma * z, z a standard normal vector (d,) given as an argument (ByzFL
    ``Gaussian(mu, sigma)`` draws ``np.random.normal(mu, sigma, d)``, which after the same
    seed equals mu + sigma * ``np.random.standard_normal(d)``)."""
    d = present(honest, w).shape[1]
    z = np.asarray(z, dtype=np.float64)
    if z.shape != (d,):
        raise ValueError(f"gaussian: z must have shape ({d},), got {z.shape}")
    return mu + sigma * z


def with_byzantine(honest, byzantine_vector, f: int, w=None) -> np.ndarray:
    """The present honest rows followed by f copies of the Byzantine message: (h + f, d)."""
    h = present(honest, w)
    b = np.broadcast_to(np.asarray(byzantine_vector, dtype=np.float64), (f, h.shape[1]))
    return np.concatenate([h, b], axis=0)


def _line_search(
    honest: np.ndarray,
    attack: Callable[[np.ndarray, float], np.ndarray],
    f: int,
    aggregator: Callable,
    pre_aggregators: Sequence[Callable],
    evals: int,
    start: float,
    delta: float,
    ratio: float,
) -> float:
    """ByzFL's ``Optimal_*._expansion_phase`` then ``_contraction_phase``: maximise the
    distance ||agg(pre(honest ++ f copies of attack(tau))) - mean(honest)|| over tau.

    Expansion: y0 at start (one evaluation); then while evaluations remain, try best + delta:
    if strictly better, accept it and double delta; otherwise delta *= ratio and stop.
    Contraction: while evaluations remain, try best + delta, accept if strictly better, and
    delta *= ratio after every try. ``evals`` evaluations in all."""
    if not isinstance(evals, (int, np.integer)) or evals <= 0:
        raise ValueError("evals must be a positive integer")
    if delta == 0:
        raise ValueError("delta must be non-zero")
    if not 0.5 < ratio < 1:
        raise ValueError("ratio must lie in (0.5, 1)")
    mean_h = np.mean(honest, axis=0)

    def evaluate(tau: float) -> float:
        v = with_byzantine(honest, attack(honest, tau), f)
        for p in pre_aggregators:
            v = p(v)
        return float(np.linalg.norm(aggregator(v) - mean_h))

    best_x = float(start)
    best_y = evaluate(best_x)
    remaining = evals - 1
    while remaining > 0:  # expansion
        prop_x = best_x + delta
        prop_y = evaluate(prop_x)
        remaining -= 1
        if prop_y > best_y:
            best_x, best_y = prop_x, prop_y
            delta *= 2
        else:
            delta *= ratio
            break
    while remaining > 0:  # contraction
        prop_x = best_x + delta
        prop_y = evaluate(prop_x)
        remaining -= 1
        if prop_y > best_y:
            best_x, best_y = prop_x, prop_y
        delta *= ratio
    return best_x


_DEFAULT_PRE = (lambda v: clipping(v, None, 2.0),)  # ByzFL's default pre_agg_list=[Clipping()]


def optimal_ipm_tau(honest, f: int = 1, aggregator: Callable = average,
                    pre_aggregators: Sequence[Callable] = _DEFAULT_PRE, w=None, evals: int = 20,
                    start: float = 0.0, delta: float = 10.0, ratio: float = 0.8) -> float:
    """The IPM factor tau chosen by ByzFL's ``Optimal_InnerProductManipulation`` line search
    (defaults as ByzFL's: Average after Clipping(2.0), f=1, evals=20, start=0, delta=10,
    ratio=0.8). ``aggregator`` maps (n, d) -> (d,); each pre-aggregator (n, d) -> (n', d)."""
    h = present(honest, w)
    return _line_search(h, lambda hh, t: ipm(hh, None, t), f, aggregator, pre_aggregators,
                        evals, start, delta, ratio)


def optimal_ipm(honest, f: int = 1, aggregator: Callable = average,
                pre_aggregators: Sequence[Callable] = _DEFAULT_PRE, w=None, evals: int = 20,
                start: float = 0.0, delta: float = 10.0, ratio: float = 0.8) -> np.ndarray:
    """ByzFL ``Optimal_InnerProductManipulation``: IPM with the tau of :func:`optimal_ipm_tau`."""
    tau = optimal_ipm_tau(honest, f, aggregator, pre_aggregators, w, evals, start, delta, ratio)
    return ipm(honest, w, tau)


def optimal_alie_tau(honest, f: int = 1, aggregator: Callable = average,
                     pre_aggregators: Sequence[Callable] = _DEFAULT_PRE, w=None, evals: int = 20,
                     start: float = 0.0, delta: float = 10.0, ratio: float = 0.8) -> float:
    """The ALIE factor tau chosen by ByzFL's ``Optimal_ALittleIsEnough`` line search (same
    search and defaults as :func:`optimal_ipm_tau`)."""
    h = present(honest, w)
    return _line_search(h, lambda hh, t: alie(hh, None, t), f, aggregator, pre_aggregators,
                        evals, start, delta, ratio)


def optimal_alie(honest, f: int = 1, aggregator: Callable = average,
                 pre_aggregators: Sequence[Callable] = _DEFAULT_PRE, w=None, evals: int = 20,
                 start: float = 0.0, delta: float = 10.0, ratio: float = 0.8) -> np.ndarray:
    """ByzFL ``Optimal_ALittleIsEnough``: ALIE with the tau of :func:`optimal_alie_tau`."""
    tau = optimal_alie_tau(honest, f, aggregator, pre_aggregators, w, evals, start, delta, ratio)
    return alie(honest, w, tau)


def alie_z_max(n: int, f: int) -> float:
    """Baruch et al. (NeurIPS 2019), Algorithm 1: with s = floor(n/2 + 1) - f supporters
    needed among the honest workers, z_max = max{z : Phi(z) < (n - s)/n}; Phi being
    continuous and increasing, that supremum is z_max = Phi^{-1}((n - s)/n) (the form used
    here, and by the public implementations of the attack). n total workers, f of them
    Byzantine. +inf when s <= 0."""
    if n <= 0 or f < 0:
        raise ValueError("alie_z_max: needs n > 0 and f >= 0")
    s = math.floor(n / 2 + 1) - f
    return float(norm.ppf((n - s) / n))
