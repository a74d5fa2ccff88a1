"""Closed forms for robust aggregation under attack, to check simulated rounds against.

Plain NumPy/SciPy; nothing here imports fedjax_abc. Each function's docstring carries its
derivation or its source. Notation: n messages, f of them Byzantine, h = n - f honest;
Phi and phi the standard normal CDF and density; Z_(r:h) the r-th smallest of h independent
standard normals (ranks are 1-based).

Contents
--------
- IPM against the mean: :func:`ipm_mean_factor`.
- Coordinate median with f messages at +infinity, honest N(mu, sigma^2) per coordinate:
  :func:`median_inf_order_statistics`, :func:`median_inf_moments` (exact),
  :func:`median_inf_bias_large_n` (asymptotic).
- Trimmed mean under the same attack: :func:`trimmed_mean_inf_surviving_ranks`,
  :func:`trimmed_mean_inf_moments` (exact).
- Normal order statistics: :func:`normal_order_stat_moment`,
  :func:`normal_order_stat_cross_moment`.
- Krum and the mean without attack: :func:`mean_mse`, :func:`krum_mse_bounds`,
  :func:`krum_mean_ratio_bounds`.
- (f, kappa)-robustness coefficients: :func:`kappa_lower_bound`, :func:`kappa`,
  :func:`kappa_mda_derived`.
- Heterogeneity and breakdown: :func:`breakdown_fraction`, :func:`error_floor_shape`,
  :func:`error_lower_bound_shape`, :func:`breakdown_f`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate, special
from scipy.stats import binom, chi2, norm

_LO, _HI = -12.0, 12.0  # the normal density is below 1e-31 outside; integrals are cut there

# ------------------------------------------------------------------------------- IPM / mean


def ipm_mean_factor(n: int, f: int, tau: float) -> float:
    """The mean of n messages when f of them are IPM(tau)'s -tau * mean_honest:

        aggregate = ((n - f) mu_h - f tau mu_h) / n = ((n - f) - f tau) / n * mu_h,

    with mu_h the mean of the n - f honest messages. The identity holds round by round (not
    only in expectation), so E[aggregate] = ((n - f) - f tau) / n * E[mu_h]. The factor is
    below 0 (the aggregate points against the honest mean) once tau > (n - f) / f.
    Xie, Koyejo, Gupta, UAI 2019 (the attack); ByzFL ``InnerProductManipulation``."""
    return ((n - f) - f * tau) / n


# ------------------------------------------------------------------- normal order statistics


def _gauss_legendre_panels(a: float, b: float, panels: int, order: int = 20, edges=None):
    """Nodes and weights of a composite Gauss-Legendre rule on [a, b] (``panels`` equal
    panels, or the panels between the given ``edges``)."""
    t, wt = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(a, b, panels + 1) if edges is None else np.asarray(edges, dtype=float)
    half = 0.5 * np.diff(edges)
    mid = 0.5 * (edges[:-1] + edges[1:])
    nodes = (mid[:, None] + half[:, None] * t[None, :]).ravel()
    weights = (half[:, None] * wt[None, :]).ravel()
    return nodes, weights


_GL_X, _GL_W = None, None


def _integrate_line(fn) -> float:
    """int_{-12}^{12} fn(x) dx for a smooth vectorised fn, by a composite Gauss-Legendre rule
    (96 panels of 20 nodes; exact to rounding for the order-statistic integrands here)."""
    global _GL_X, _GL_W
    if _GL_X is None:
        _GL_X, _GL_W = _gauss_legendre_panels(_LO, _HI, 96)
    return float(np.dot(_GL_W, fn(_GL_X)))


def _os_density(x, r: int, h: int):
    """Density of Z_(r:h) at x: h * C(h-1, r-1) Phi^(r-1) (1 - Phi)^(h-r) phi, written as
    h * binom.pmf(r - 1, h - 1, Phi(x)) * phi(x) (stable for large h)."""
    return h * binom.pmf(r - 1, h - 1, norm.cdf(x)) * norm.pdf(x)


def normal_order_stat_moment(r: int, h: int, k: int = 1) -> float:
    """E[Z_(r:h)^k] by numerical integration of x^k times the order-statistic density."""
    if not 1 <= r <= h:
        raise ValueError(f"rank r={r} outside 1..{h}")
    return _integrate_line(lambda x: x**k * _os_density(x, r, h))


def normal_order_stat_cross_moment(r: int, s: int, h: int) -> float:
    """E[Z_(r:h) Z_(s:h)] for r < s, by numerical integration of x y times the joint density

        h! / ((r-1)! (s-r-1)! (h-s)!) Phi(x)^(r-1) (Phi(y) - Phi(x))^(s-r-1) (1 - Phi(y))^(h-s)
        phi(x) phi(y)   on x < y.

    Substituting y = x + t (t >= 0) makes the integrand smooth on the whole domain, which a
    composite Gauss-Legendre product rule integrates: x in [-12, 12] in panels of width
    about 4 / sqrt(h) at most 1, t in [0, 24] in geometrically growing panels from 1e-7 (the
    gap between adjacent order statistics is of order 1/h). About 1e-13 absolute for
    h <= 1000 (checked against finer rules)."""
    if not 1 <= r < s <= h:
        raise ValueError(f"ranks need 1 <= r < s <= h, got r={r}, s={s}, h={h}")
    logc = (special.gammaln(h + 1) - special.gammaln(r) - special.gammaln(s - r)
            - special.gammaln(h - s + 1))
    x, wx = _gauss_legendre_panels(_LO, _HI, 24 * max(1, math.ceil(math.sqrt(h) / 4)))
    t_edges = np.concatenate([[0.0], np.geomspace(1e-7, _HI - _LO, 48)])
    t, wt = _gauss_legendre_panels(0.0, _HI - _LO, 0, edges=t_edges)
    X, T = np.meshgrid(x, t, indexing="ij")
    Y = X + T
    logv = logc + norm.logpdf(X) + norm.logpdf(Y)
    if r > 1:
        logv = logv + (r - 1) * norm.logcdf(X)
    if h > s:
        logv = logv + (h - s) * norm.logsf(Y)
    if s - r > 1:
        gap = norm.cdf(Y) - norm.cdf(X)
        with np.errstate(divide="ignore"):
            logv = logv + (s - r - 1) * np.log(gap)
    vals = X * Y * np.exp(logv)
    return float(wx @ vals @ wt)


# --------------------------------------------------------- coordinate median, f at +infinity


def median_inf_order_statistics(n: int, f: int) -> tuple:
    """Which honest order statistics the coordinate median of n values is, when f of them are
    +infinity and the h = n - f honest ones are finite.

    Sorted, the n values are X_(1:h) <= ... <= X_(h:h) followed by the f infinities. The
    median of n values (``np.median``) is the value of rank (n + 1)/2 for n odd and the mean
    of the values of ranks n/2 and n/2 + 1 for n even; as long as those ranks are <= h they
    are honest order statistics of the same rank:

        n odd:  median = X_((n+1)/2 : h)
        n even: median = (X_(n/2 : h) + X_(n/2+1 : h)) / 2

    Both need 2f < n (n odd: (n+1)/2 <= n - f iff f <= (n-1)/2; n even: n/2 + 1 <= n - f iff
    f <= n/2 - 1); otherwise the median is infinite. Returns the tuple of ranks (1-based) in
    the honest sample of size h."""
    if not 0 <= 2 * f < n:
        raise ValueError(f"the median is infinite unless 2f < n; got n={n}, f={f}")
    if n % 2:
        return ((n + 1) // 2,)
    return (n // 2, n // 2 + 1)


def median_inf_moments(n: int, f: int, mu: float = 0.0, sigma: float = 1.0) -> tuple:
    """(E, Var) of one coordinate of the coordinate median when f of n messages are at
    +infinity and the n - f honest ones are N(mu, sigma^2) in that coordinate, exactly (by
    numerical integration of the order-statistic densities; see
    :func:`median_inf_order_statistics` for which statistics):

        n odd (r = (n+1)/2):  E = mu + sigma E[Z_(r:h)],  Var = sigma^2 Var(Z_(r:h));
        n even (r = n/2):     E = mu + sigma (E[Z_(r)] + E[Z_(r+1)]) / 2,
                              Var = sigma^2 (Var Z_(r) + Var Z_(r+1) + 2 Cov(Z_(r), Z_(r+1))) / 4.

    The bias is E - mu (the same in every coordinate; coordinates are independent)."""
    ranks = median_inf_order_statistics(n, f)
    h = n - f
    m1 = [normal_order_stat_moment(r, h, 1) for r in ranks]
    m2 = [normal_order_stat_moment(r, h, 2) for r in ranks]
    if len(ranks) == 1:
        return mu + sigma * m1[0], sigma**2 * (m2[0] - m1[0] ** 2)
    cross = normal_order_stat_cross_moment(ranks[0], ranks[1], h)
    mean = 0.5 * (m1[0] + m1[1])
    second = 0.25 * (m2[0] + m2[1] + 2 * cross)
    return mu + sigma * mean, sigma**2 * (second - mean**2)


def median_inf_bias_large_n(n: int, f: int, sigma: float = 1.0) -> float:
    """Large-n approximation of the median's bias under f messages at +infinity:

        E[median] - mu  ~  sigma * Phi^{-1}( n / (2 (n - f)) ).

    The median is the point with n/2 of the n values below it; all of those are honest, so it
    is the empirical quantile of level (n/2)/(n - f) of the honest sample, which converges to
    the population quantile mu + sigma Phi^{-1}(n / (2(n - f))). Exact moments:
    :func:`median_inf_moments`."""
    if not 0 <= 2 * f < n:
        raise ValueError(f"needs 2f < n; got n={n}, f={f}")
    return sigma * float(norm.ppf(n / (2.0 * (n - f))))


# ------------------------------------------------------------ trimmed mean, f at +infinity


def trimmed_mean_inf_surviving_ranks(n: int, f: int, trim: int | None = None) -> range:
    """Honest order statistics (ranks in the honest sample of h = n - f) averaged by the
    coordinate-wise trimmed mean that drops ``trim`` (default f) values at each end, when f of
    the n values are at +infinity (needs f <= trim and 2 trim < n).

    Sorted: X_(1:h) .. X_(h:h), then the f infinities. The ``trim`` smallest removed are the
    honest X_(1) .. X_(trim); the ``trim`` largest removed are the f infinities and the
    trim - f largest honest values. Left: X_(trim+1 : h) .. X_(h - (trim - f) : h), i.e.
    n - 2 trim values. With trim = f: ranks f+1 .. n-f of the honest sample (all the honest
    values but the f smallest)."""
    t = f if trim is None else trim
    if not (0 <= f <= t and 2 * t < n):
        raise ValueError(f"needs 0 <= f <= trim and 2 trim < n; got n={n}, f={f}, trim={t}")
    h = n - f
    return range(t + 1, h - (t - f) + 1)


def trimmed_mean_inf_moments(n: int, f: int, mu: float = 0.0, sigma: float = 1.0,
                             trim: int | None = None) -> tuple:
    """(E, Var) of one coordinate of the trimmed mean (``trim`` per side, default f) when f of
    n messages are at +infinity and the h = n - f honest ones are N(mu, sigma^2).

    TM = mu + sigma S / (n - 2 trim), S = sum of Z_(r:h) over the surviving ranks
    (:func:`trimmed_mean_inf_surviving_ranks`). Exact by numerical integration:

    E[S] = sum_r E[Z_(r:h)]. Writing S = sum_i Z_i 1{rank_i survives} (the Z_i the honest
    values in their original order), with rank_i - 1 ~ Binomial(h - 1, Phi(Z_i)) given Z_i:

        E[S]   = h int x phi(x) P(trim <= Bin(h-1, Phi(x)) <= h - 1 - (trim - f)) dx,
        E[S^2] = h int x^2 phi(x) P(same) dx
                 + h (h-1) E[Z_1 Z_2 1{both survive}].

    For trim = f the top of the surviving range is h, so "both survive" given Z_1 = x < y = Z_2
    is just Bin(h-2, Phi(x)) >= f, and int_x^inf y phi(y) dy = phi(x) gives

        h (h-1) E[Z_1 Z_2 1{both}] = 2 h (h-1) int x phi(x)^2 P(Bin(h-2, Phi(x)) >= f) dx.

    For trim > f the variance needs a two-dimensional integral and is returned as None.
    The bias is E - mu > 0 for f >= 1 (the lowest f honest values are cut, the highest kept)."""
    t = f if trim is None else trim
    ranks = trimmed_mean_inf_surviving_ranks(n, f, t)
    h = n - f
    lo, hi = t, h - 1 - (t - f)

    def p_survive(x):
        p = norm.cdf(x)
        return binom.cdf(hi, h - 1, p) - binom.cdf(lo - 1, h - 1, p)

    es = _integrate_line(lambda x: h * x * norm.pdf(x) * p_survive(x))
    cnt = n - 2 * t
    assert cnt == len(ranks)
    mean = mu + sigma * es / cnt
    if t != f:
        return mean, None
    e1 = _integrate_line(lambda x: h * x * x * norm.pdf(x) * p_survive(x))
    if h >= 2:
        e2 = _integrate_line(
            lambda x: 2 * h * (h - 1) * x * norm.pdf(x) ** 2 * binom.sf(f - 1, h - 2, norm.cdf(x)))
    else:
        e2 = 0.0
    var = sigma**2 * (e1 + e2 - es**2) / cnt**2
    return mean, var


# ---------------------------------------------------------------- Krum and the mean, no attack


def mean_mse(n: int, d: int, sigma: float = 1.0) -> float:
    """E||mean - mu||^2 = d sigma^2 / n for n independent N(mu, sigma^2 I_d) messages."""
    return d * sigma**2 / n


def krum_mse_bounds(n: int, d: int, sigma: float = 1.0) -> tuple:
    """Bounds on E||Krum - mu||^2 for n independent N(mu, sigma^2 I_d) messages, no attack.

    Krum outputs one of the messages, X_{i*}, so pointwise
    min_i ||X_i - mu||^2 <= ||X_{i*} - mu||^2 <= max_i ||X_i - mu||^2, whatever the selection.
    With ||X_i - mu||^2 / sigma^2 independent chi^2_d (CDF F):

        sigma^2 int_0^inf (1 - F(t))^n dt  <=  E||Krum - mu||^2  <=  sigma^2 int_0^inf (1 - F(t)^n) dt.

    If the index were independent of the noise the value would be exactly d sigma^2; Krum picks
    the message with the smallest distances to its neighbours, which favours messages near the
    centre, so E||Krum - mu||^2 lies below d sigma^2 (by an amount of order sigma^2 sqrt(2d)
    times the expected maximum of n standard normals, for large d). Both bounds tend to
    d sigma^2 relative to d as d grows (the chi^2_d spread is sqrt(2d) against a mean of d)."""
    sf = lambda t: chi2.sf(t, d)  # noqa: E731
    cdf = lambda t: chi2.cdf(t, d)  # noqa: E731
    top = chi2.isf(1e-18 / max(n, 1), d)
    lo, _ = integrate.quad(lambda t: sf(t) ** n, 0, top, limit=400)
    hi, _ = integrate.quad(lambda t: -math.expm1(n * math.log(max(cdf(t), 1e-300))), 0, top, limit=400)
    return sigma**2 * lo, sigma**2 * hi


def krum_mean_ratio_bounds(n: int, d: int) -> tuple:
    """Bounds on E||Krum - mu||^2 / E||mean - mu||^2 = E||Krum - mu||^2 / (d sigma^2 / n),
    without attack (from :func:`krum_mse_bounds`): (n E[min chi^2_d] / d, n E[max chi^2_d] / d).
    The naive value is n (selection independent of the noise). What a test can assert without
    Monte Carlo reference values: the measured ratio lies in these bounds (within its standard
    error), and for d large against log n it is close to n (the bounds close in on n)."""
    lo, hi = krum_mse_bounds(n, d, 1.0)
    return n * lo / d, n * hi / d


# ------------------------------------------------------------------ (f, kappa)-robustness


def kappa_lower_bound(n: int, f: int) -> float:
    """No aggregation rule is (f, kappa)-robust with kappa < f / (n - 2f) (f >= 1, 2f < n).

    (f, kappa)-robustness (Allouah et al., "Fixing by Mixing", AISTATS 2023, Definition of
    (f, kappa)-robustness): for all x_1..x_n and every S of size n - f,
    ||F(x) - mean_S||^2 <= kappa / |S| * sum_{i in S} ||x_i - mean_S||^2. The lower bound
    f/(n - 2f) is the one stated in that paper (its proposition number is not checked here)."""
    if not 0 <= 2 * f < n:
        raise ValueError(f"needs 2f < n; got n={n}, f={f}")
    return f / (n - 2 * f)


def _ratio(n, f):
    if not 0 <= 2 * f < n:
        raise ValueError(f"needs 2f < n; got n={n}, f={f}")
    return f / (n - 2 * f)


def kappa(rule: str, n: int, f: int, nnm: bool = False):
    """Upper bound kappa(n, f) such that the rule is (f, kappa)-robust, or None where no
    published constant was recovered. ``rule`` one of "trimmed_mean", "krum",
    "geometric_median", "coordinate_median", "mda", "multi_krum", "mean".

    Values (Allouah et al., AISTATS 2023, the table of robustness coefficients), with
    r = f / (n - 2f):

    - trimmed mean (trim f):   6 r (1 + r)   -- as recalled from that table and as listed by a
      secondary source quoting it; not checked against the paper's text here.
    - Krum:                    6 (1 + r)     -- same status as the trimmed mean.
    - geometric median (exact minimiser):  4 (1 + r)^2 = 4 ((n - f)/(n - 2f))^2 -- the listed
      value, and a complete proof is short: with z the geometric median, S the n - f
      reference messages, mu their mean, optimality sum_i ||z - x_i|| <= sum_i ||mu - x_i||
      and the triangle inequality on each term give (n - 2f) ||z - mu|| <= 2 sum_S ||x_i - mu||
      <= 2 (n - f) sqrt(mean_S ||x_i - mu||^2) (Cauchy-Schwarz); square. ByzFL's
      ``GeometricMedian`` is T smoothed Weiszfeld steps, not the exact minimiser: the bound
      is not proven for it.
    - coordinate median:       4 (1 + r)^2 -- the listed value; the same proof applied to
      each coordinate (the median minimises sum_i |z - x_ij|; for n even any point between
      the two middle values does, np.median's midpoint included), then summed over coordinates.
    - MDA, MultiKrum: None (no published constant recovered here). A bound proven here for MDA
      is :func:`kappa_mda_derived` (not a published constant).
    - mean: None for f >= 1 (not robust); 0 for f = 0.

    ``nnm=True`` (the rule after NNM(f)): None. Allouah et al. prove that composing any
    (f, kappa)-robust rule with NNM gives kappa' = O(f/n) (kappa + 1); the exact constant
    (recalled as 8 f / (n - f) (kappa + 1)) was not verified against the paper and is not
    returned."""
    r = _ratio(n, f)
    if nnm:
        return None
    table = {
        "trimmed_mean": 6 * r * (1 + r),
        "krum": 6 * (1 + r),
        "geometric_median": 4 * (1 + r) ** 2,
        "coordinate_median": 4 * (1 + r) ** 2,
        "mda": None,
        "multi_krum": None,
        "mean": 0.0 if f == 0 else None,
    }
    if rule not in table:
        raise ValueError(f"unknown rule {rule!r}; one of {sorted(table)}")
    return table[rule]


def kappa_mda_derived(n: int, f: int) -> float:
    """A valid (f, kappa) bound for MDA, proven here (not a published constant):
    kappa = 8 f^2 / (n - f).

    Proof. Let S be any reference set of size n - f with mean mu and
    V = mean_S ||x_i - mu||^2, and S* the subset MDA selects (size n - f, minimal diameter,
    so diam(S*) <= diam(S) =: D). With I = S* & S, J = S* \\ S and K = S \\ S*
    (|J| = |K| = k <= f): mean(S*) - mu = (k / (n - f)) (mean(J) - mean(K)), and
    ||mean(J) - mean(K)|| <= ||mean(J) - mean(I)|| + ||mean(I) - mean(K)|| <= 2D (J, I in
    S*; I, K in S; if I is empty, J and K alone give <= 2D too). For a, b in S,
    ||x_a - x_b||^2 <= 2 ||x_a - mu||^2 + 2 ||x_b - mu||^2 <= 2 (n - f) V, so
    ||MDA - mu||^2 <= (f / (n - f))^2 4 D^2 <= 8 f^2 / (n - f) V."""
    _ratio(n, f)
    return 8.0 * f * f / (n - f)


# ------------------------------------------------------------ heterogeneity and breakdown


def breakdown_fraction(B: float) -> float:
    """The breakdown point under (G, B)-gradient dissimilarity: no algorithm can be robust
    when f / n >= 1 / (2 + B^2). Allouah, Guerraoui, Gupta, Pinot, Rizk, "Robust Distributed
    Learning: Tight Error Bounds and Breakdown Point under Data Heterogeneity", NeurIPS 2023
    (their lower-bound theorem). (G, B)-gradient dissimilarity: for all theta,
    (1/|H|) sum_{i in H} ||grad L_i(theta) - grad L_H(theta)||^2 <= G^2 + B^2 ||grad L_H(theta)||^2
    (also Karimireddy, He, Jaggi, ICLR 2022). B = 0 gives the classical 1/2.

    The same point follows from the rule-level condition kappa B^2 < 1 with the optimal
    kappa = f / (n - 2f): f B^2 < n - 2f iff f / n < 1 / (2 + B^2)."""
    return 1.0 / (2.0 + B * B)


def error_floor_shape(kappa_value, G: float, B: float) -> float:
    """kappa G^2 / (1 - kappa B^2), +inf when kappa B^2 >= 1 (or kappa is None).

    The form of the asymptotic error (on ||grad L_H||^2) of robust distributed gradient
    descent with an (f, kappa)-robust rule under (G, B)-gradient dissimilarity: Allouah et
    al., NeurIPS 2023 (upper bound for robust D-GD; also Allouah et al., AISTATS 2023 with
    B = 0, and Karimireddy, He, Jaggi, ICLR 2022 with c delta in place of kappa). It is the
    shape only: the papers' constant factors (and step-size conditions) are not reproduced
    here. Breakdown of the rule where kappa B^2 >= 1. With the optimal kappa = f / (n - 2f)
    it equals f G^2 / (n - (2 + B^2) f), the shape of the matching lower bound
    (:func:`error_lower_bound_shape`)."""
    if kappa_value is None:
        return math.inf
    den = 1.0 - kappa_value * B * B
    return math.inf if den <= 0 else kappa_value * G * G / den


def error_lower_bound_shape(n: int, f: int, G: float, B: float) -> float:
    """f G^2 / (n - (2 + B^2) f), +inf at or past the breakdown fraction 1 / (2 + B^2): the
    shape of the lower bound on the error of any robust algorithm under (G, B)-gradient
    dissimilarity (Allouah et al., NeurIPS 2023), up to its constant factor (not reproduced
    here)."""
    den = n - (2.0 + B * B) * f
    return math.inf if den <= 0 else f * G * G / den


def breakdown_f(kappa_fn, n: int, B: float):
    """The smallest f in 0 .. ceil(n/2) - 1 with kappa_fn(n, f) B^2 >= 1 (the rule's predicted
    breakdown under (G, B)-dissimilarity), or None if kappa B^2 < 1 for every f with 2f < n.
    ``kappa_fn(n, f)`` returns kappa (e.g. ``lambda n, f: kappa("trimmed_mean", n, f)``)."""
    for f in range(0, (n + 1) // 2):
        k = kappa_fn(n, f)
        if k is not None and k * B * B >= 1:
            return f
    return None
