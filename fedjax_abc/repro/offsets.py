"""The random offsets of problem (27) (Section IV-B) and how the paper's draw was identified.

The paper draws d_3, ..., d_n ~ U[0, Dmax] and prints sigma_f* to three decimals for
Dmax = 20, 50, 100, 200 (Table II). :func:`search_draw` tries common seeding conventions
over a range of seeds and keeps those that reproduce all four printed values at once;
:data:`PAPER_DRAW` is the one found, and :func:`paper_offsets` rebuilds it.
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

import numpy as np

from fedjax_abc.repro import paper



class Draw(NamedTuple):
    """A seeding convention and seed for d_3, ..., d_n."""

    convention: str
    seed: int
    description: str


def _legacy_uniform(seed, d_max, count):
    rng = np.random.RandomState(seed)
    return rng.uniform(0.0, d_max, count)


def _legacy_rand_n(seed, d_max, count):  # n draws, d_1 = d_2 overwritten with 0
    return d_max * np.random.RandomState(seed).random_sample(count + 2)[2:]


def _generator_uniform(seed, d_max, count):
    return np.random.default_rng(seed).uniform(0.0, d_max, count)


def _jax_uniform(seed, d_max, count):
    return _jax_batch([seed], d_max, count)[0]


def _jax_batch(seeds, d_max, count):
    import jax
    import jax.numpy as jnp

    keys = jax.vmap(jax.random.key)(jnp.asarray(list(seeds), jnp.uint32))
    draw = jax.vmap(lambda k: jax.random.uniform(k, (count,), jnp.float64, 0.0, d_max))
    return np.asarray(draw(keys))


def _batch(conv, seeds, d_max, count):
    if conv == "jax":
        return _jax_batch(seeds, d_max, count)
    fn, _ = CONVENTIONS[conv]
    return np.stack([fn(s, d_max, count) for s in seeds])


CONVENTIONS: dict[str, tuple[Callable, str]] = {
    "numpy-legacy": (_legacy_uniform, "np.random.seed({seed}); np.random.uniform(0, Dmax, n - 2)"
                     " for each Dmax (equivalently Dmax * np.random.rand(n - 2))"),
    "numpy-legacy-n": (_legacy_rand_n, "np.random.seed({seed}); Dmax * np.random.rand(n), first two"
                       " set to 0"),
    "numpy-generator": (_generator_uniform, "np.random.default_rng({seed}).uniform(0, Dmax, n - 2)"),
    "jax": (_jax_uniform, "jax.random.uniform(jax.random.key({seed}), (n - 2,), float64, 0, Dmax)"),
}

# What :func:`search_draw` found over seeds 0..10000 with every convention (re-run by the
# slow test tests/test_report.py::test_offsets_search_full).
SEARCH_NOTE = ("search_draw over conventions numpy-legacy, numpy-legacy-n, numpy-generator, jax "
               "and seeds 0..10000: exactly one match, numpy-legacy seed 42")

PAPER_DRAW = Draw("numpy-legacy", 42, CONVENTIONS["numpy-legacy"][1].format(seed=42))


def offsets(draw: Draw, d_max: float, n: int = 40) -> np.ndarray:
    """The n offsets (d_1 = d_2 = 0, then the draw) for one Dmax."""
    fn, _ = CONVENTIONS[draw.convention]
    return np.concatenate([np.zeros(2), fn(draw.seed, float(d_max), n - 2)])


def paper_offsets(d_max: float, n: int = 40) -> np.ndarray:
    """The offsets of :data:`PAPER_DRAW` (reproduces Table II's sigma_f* to 3 decimals)."""
    return offsets(PAPER_DRAW, d_max, n)


def huber_f_star(d: np.ndarray) -> np.ndarray:
    """f* = min_x (1/n) sum_i Huber(x - d_i) for each row of d (vectorised bisection)."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    lo, hi = d.min(1) - 2.0, d.max(1) + 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        up = np.clip(mid[:, None] - d, -1.0, 1.0).mean(1) > 0
        hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
    z = 0.5 * (lo + hi)[:, None] - d
    a = np.abs(z)
    return np.where(a < 1, 0.5 * z * z, a - 0.5).mean(1)


def matches(sigma: float, d_max: float) -> bool:
    """Whether sigma rounds to the paper's printed sigma_f* for Dmax."""
    return abs(sigma - paper.TABLE2_SIGMA[float(d_max)]) <= 5e-4 + 1e-12


def search_draw(seeds: Iterable[int] = range(10001), conventions: Iterable[str] = tuple(CONVENTIONS),
                n: int = 40) -> list[Draw]:
    """All (convention, seed) whose draws give the paper's four sigma_f* values at once.

    (A Huber f* is a fast vectorised bisection, so 10^4 seeds take seconds per convention.)
    """
    seeds = list(seeds)
    found = []
    for conv in conventions:
        desc = CONVENTIONS[conv][1]
        ok = np.ones(len(seeds), bool)
        for d_max in paper.TABLE2_SIGMA:
            rest = _batch(conv, seeds, d_max, n - 2)
            sig = huber_f_star(np.concatenate([np.zeros((len(seeds), 2)), rest], 1))
            ok &= np.abs(sig - paper.TABLE2_SIGMA[d_max]) <= 5e-4 + 1e-12
        found += [Draw(conv, s, desc.format(seed=s)) for s, good in zip(seeds, ok) if good]
    return found
