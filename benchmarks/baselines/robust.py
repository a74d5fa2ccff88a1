"""Byzantine-robust federated rounds on diagonal quadratics: two baselines, float64.

Both run the round of ``fedjax_abc.simulate(..., aggregator=..., byzantine=...)`` with full
participation: each honest client takes Q local gradient steps from x_t (exact gradients,
or the Gaussian oracle of :class:`~benchmarks.baselines.problems.Quadratics`), its update
is u_i = y_i - x_t, the f Byzantine clients all send the attack's vector computed from the
honest updates, and x_{t+1} = x_t + F(updates) for the robust rule F. The Byzantine set is
given, or drawn per trial (f of the n clients, uniformly, fixed through the trial).

- :func:`numpy_robust`: our NumPy loop, vectorised over trials (and clients), Python loops
  over rounds and local steps; the rules and attacks written here from ByzFL's definitions.
- :func:`byzfl_robust`: ByzFL's own objects (``byzfl`` 0.0.11: ``RobustAggregator`` and
  ``ByzantineClient`` of its ``fed_framework``, or, where that cannot be imported, its
  ``aggregators`` and ``attacks`` classes) in a training loop written after its DSGD loop
  (``byzfl/benchmark/train.py``): one trajectory at a time, honest vectors in a list, the f
  Byzantine copies appended after them. ByzFL's loop aggregates gradients and steps with
  its optimizer; here the vectors are the updates y_i - x_t, as in the package (for Q = 1,
  u_i = -alpha g_i: the same rounds for the sign-symmetric rules and attacks; for
  ALittleIsEnough, mean + tau std of the updates is mean - tau std of the gradients).

Rules: ``"median"`` (ByzFL ``Median``), ``"trimmed_mean"`` (``TrMean(f)``), ``"krum"``
(``Krum(f)``); attacks: ``"sign_flip"`` (``SignFlipping``), ``"ipm"``
(``InnerProductManipulation(tau)``), ``"alie"`` (``ALittleIsEnough(tau)``).

Nothing here imports ``fedjax_abc``. ByzFL's package ``__init__`` imports its benchmark
module, which imports torchvision; :func:`load_byzfl` imports the modules needed without
running that ``__init__``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Optional, Sequence

import numpy as np

from benchmarks.baselines.problems import Quadratics

__all__ = ["ATTACKS", "RULES", "byzantine_sets", "byzfl_robust", "load_byzfl", "numpy_robust",
           "objective"]

RULES = ("median", "trimmed_mean", "krum")
ATTACKS = ("sign_flip", "ipm", "alie")
BYZFL_RULES = {"median": "Median", "trimmed_mean": "TrMean", "krum": "Krum"}
BYZFL_ATTACKS = {"sign_flip": "SignFlipping", "ipm": "InnerProductManipulation",
                 "alie": "ALittleIsEnough"}

_CACHE: list = []


# ------------------------------------------------------------------------------ shared parts


def objective(problem: Quadratics, x) -> np.ndarray:
    """f(x) = (1/n) sum_i (1/2) sum_j a_ij (x_j - c_ij)^2 for each row of x (R, d)."""
    x = np.asarray(x, dtype=np.float64)
    r = x[:, None, :] - problem.c[None]
    return 0.5 * np.mean(np.sum(problem.a[None] * r * r, axis=-1), axis=-1)


def byzantine_sets(rng: np.random.Generator, trials: int, n: int, f: int,
                   clients: Optional[Sequence[int]] = None) -> np.ndarray:
    """(trials, n) bool: each trial's Byzantine clients, the given ``clients`` in every trial,
    else f distinct clients uniformly at random (the f smallest of n uniforms)."""
    mask = np.zeros((trials, n), bool)
    if clients is not None:
        mask[:, np.asarray(clients, dtype=np.int64)] = True
    elif f:
        idx = np.argpartition(rng.random((trials, n)), f - 1, axis=1)[:, :f]
        np.put_along_axis(mask, idx, True, axis=1)
    return mask


def _check(problem, rule, attack, f, declared_f, local_steps, rounds, trials, mask):
    n = problem.num_clients
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if attack not in ATTACKS:
        raise ValueError(f"attack must be one of {ATTACKS}, got {attack!r}")
    if not 0 <= f < n:
        raise ValueError(f"f ({f}) must be in [0, n={n})")
    if rule != "median" and not n > 2 * declared_f:
        raise ValueError(f"{rule} with declared f={declared_f} needs n > 2f, n={n}")
    if mask.sum(axis=1).max(initial=0) != f:
        raise ValueError(f"the given Byzantine clients are not f={f} per trial")
    if local_steps < 1 or rounds < 0 or trials < 1:
        raise ValueError("local_steps >= 1, rounds >= 0 and trials >= 1")


def _local_steps(a, c, y, problem, local_steps, stepsize, exact, rng):
    """Q gradient steps from y (..., h, d) on the clients of curvatures a and centres c."""
    d = y.shape[-1]
    for _ in range(local_steps):
        r = y - c
        g = a * r
        if not exact:
            fv = 0.5 * np.sum(a * r * r, axis=-1, keepdims=True)  # f_i(y) - f_i* (f_i* = 0)
            var = problem.C * np.maximum(fv, 0.0) + problem.D
            g = g + rng.standard_normal(y.shape) * np.sqrt(var / d)
        y = y - stepsize * g
    return y


# ----------------------------------------------------------------- our NumPy loop, R trials


def _median(u, f):
    return np.median(u, axis=1)


def _trimmed_mean(u, f):
    m = u.shape[1]
    if f == 0:
        return np.mean(u, axis=1)
    return np.mean(np.sort(u, axis=1)[:, f:m - f], axis=1)


def _krum(u, f):
    m = u.shape[1]
    diff = u[:, :, None, :] - u[:, None, :, :]
    sq = np.sum(diff * diff, axis=-1)  # (R, m, m), as cdist(...)**2 up to rounding
    scores = np.mean(np.sort(sq, axis=2)[:, :, 1:m - f], axis=2)
    best = np.argmin(scores, axis=1)
    return u[np.arange(len(u)), best]


def _sign_flip(h, tau):
    return -np.mean(h, axis=1)


def _ipm(h, tau):
    return -tau * np.mean(h, axis=1)


def _alie(h, tau):
    return np.mean(h, axis=1) + tau * np.sqrt(np.var(h, axis=1, ddof=1))


_NUMPY_RULES = {"median": _median, "trimmed_mean": _trimmed_mean, "krum": _krum}
_NUMPY_ATTACKS = {"sign_flip": _sign_flip, "ipm": _ipm, "alie": _alie}


def numpy_robust(problem: Quadratics, *, rule: str, attack: str, f: int, declared_f: int,
                 tau: float, local_steps: int, stepsize: float, rounds: int, x0, trials: int,
                 seed: int, exact: bool = False,
                 clients: Optional[Sequence[int]] = None) -> np.ndarray:
    """x_T of every trial (trials, d): our NumPy loop, R trials at once.

    Args:
      problem: the quadratics (a, c and the oracle's C, D).
      rule, attack: names in :data:`RULES`, :data:`ATTACKS`.
      f: Byzantine clients per trial; declared_f: the f the rule tolerates (TrMean, Krum).
      tau: the attack's scale (IPM, ALIE; unused by the sign flip).
      local_steps, stepsize, rounds, x0, trials: Q, alpha, T, x_0 (d,), R.
      seed: NumPy's generator (the Byzantine sets and the oracle's noise).
      exact: exact gradients (no noise).
      clients: the Byzantine clients of every trial (else drawn per trial).
    """
    rng = np.random.default_rng(seed)
    n, d = problem.num_clients, problem.dim
    byz = byzantine_sets(rng, trials, n, f, clients)
    _check(problem, rule, attack, f, declared_f, local_steps, rounds, trials, byz)
    honest = np.nonzero(~byz)[1].reshape(trials, n - f)  # (R, h), in client order
    a, c = problem.a[honest], problem.c[honest]  # (R, h, d)
    aggregate, lie = _NUMPY_RULES[rule], _NUMPY_ATTACKS[attack]
    x = np.array(np.broadcast_to(np.asarray(x0, dtype=np.float64), (trials, d)))
    for _ in range(rounds):
        y = _local_steps(a, c, np.broadcast_to(x[:, None, :], a.shape), problem, local_steps,
                         stepsize, exact, rng)
        u = y - x[:, None, :]
        if f:
            v = lie(u, tau)
            u = np.concatenate([u, np.broadcast_to(v[:, None, :], (trials, f, d))], axis=1)
        x = x + aggregate(u, declared_f)
    return x


# ---------------------------------------------------------------------------- ByzFL's loop


def load_byzfl():
    """``(modules, reason)``: ``modules`` a namespace with ByzFL's ``aggregators``,
    ``preaggregators`` and ``attacks`` modules, its ``fed_framework`` (None where it cannot
    be imported) and its ``version``, or None when ByzFL or torch cannot be imported, with
    ``reason`` saying why (else the empty string).

    ByzFL's ``__init__`` imports its benchmark module, which imports torchvision. A bare
    package module named ``byzfl`` whose ``__path__`` is the installed folder (found with
    ``importlib.util.find_spec``, which runs nothing) is registered first, so that its
    submodules import without that ``__init__``."""
    if not _CACHE:
        _CACHE.append(_load())
    return _CACHE[0]


def _load():
    try:
        spec = importlib.util.find_spec("byzfl")
    except (ImportError, ValueError) as e:
        return None, f"byzfl cannot be located: {e}"
    if spec is None or not spec.submodule_search_locations:
        return None, "byzfl is not installed (pip install byzfl)"
    try:
        if importlib.util.find_spec("torch") is None:
            return None, "torch is not installed (ByzFL's rules import it)"
        import torch  # noqa: F401
    except Exception as e:  # a broken torch install
        return None, f"torch cannot be imported: {type(e).__name__}: {e}"
    try:
        from importlib.metadata import version

        ver = version("byzfl")
    except Exception:
        ver = "unknown"
    existing = sys.modules.get("byzfl")
    if existing is None:
        package = types.ModuleType("byzfl")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__package__ = "byzfl"
        package.__spec__ = spec
        sys.modules["byzfl"] = package
    try:
        aggregators = importlib.import_module("byzfl.aggregators.aggregators")
        preaggregators = importlib.import_module("byzfl.aggregators.preaggregators")
        attacks = importlib.import_module("byzfl.attacks.attacks")
    except Exception as e:
        if existing is None:  # leave no half-made package behind
            for name in [n for n in sys.modules if n == "byzfl" or n.startswith("byzfl.")]:
                del sys.modules[name]
        return None, f"byzfl {ver} cannot be imported: {type(e).__name__}: {e}"
    try:
        framework = importlib.import_module("byzfl.fed_framework")
    except Exception:  # its models or data loaders need more than the rules
        framework = None
    modules = types.SimpleNamespace(aggregators=aggregators, preaggregators=preaggregators,
                                    attacks=attacks, fed_framework=framework, version=ver)
    return modules, ""


def _byzfl_objects(byzfl, rule, attack, f, declared_f, tau):
    """ByzFL's server-side rule and Byzantine client: ``aggregate(vectors)`` and
    ``apply_attack(honest) -> [vector] * f``."""
    rule_info = {"name": BYZFL_RULES[rule], "parameters": {"f": int(declared_f)}}
    attack_info = {"f": int(f), "name": BYZFL_ATTACKS[attack], "parameters": {"tau": float(tau)}}
    framework = byzfl.fed_framework
    if framework is not None:
        server_rule = framework.RobustAggregator(rule_info)
        return server_rule.aggregate_vectors, framework.ByzantineClient(attack_info).apply_attack
    rule_cls = getattr(byzfl.aggregators, rule_info["name"])
    attack_cls = getattr(byzfl.attacks, attack_info["name"])
    server_rule = rule_cls() if rule == "median" else rule_cls(f=int(declared_f))
    lie = attack_cls() if attack == "sign_flip" else attack_cls(tau=float(tau))
    return server_rule, (lambda honest: [lie(honest)] * int(f) if f else [])


def byzfl_robust(problem: Quadratics, *, rule: str, attack: str, f: int, declared_f: int,
                 tau: float, local_steps: int, stepsize: float, rounds: int, x0, trials: int,
                 seed: int, exact: bool = False,
                 clients: Optional[Sequence[int]] = None) -> np.ndarray:
    """x_T of every trial (trials, d): ByzFL's rule and attack objects in a training loop,
    one trajectory after another (arguments as :func:`numpy_robust`). Raises RuntimeError
    when ByzFL cannot be imported (:func:`load_byzfl` says why)."""
    byzfl, reason = load_byzfl()
    if byzfl is None:
        raise RuntimeError(reason)
    rng = np.random.default_rng(seed)
    n, d = problem.num_clients, problem.dim
    byz = byzantine_sets(rng, trials, n, f, clients)
    _check(problem, rule, attack, f, declared_f, local_steps, rounds, trials, byz)
    aggregate, apply_attack = _byzfl_objects(byzfl, rule, attack, f, declared_f, tau)
    out = np.empty((trials, d))
    for r in range(trials):
        honest = np.flatnonzero(~byz[r])
        a, c = problem.a[honest], problem.c[honest]  # (h, d)
        x = np.array(x0, dtype=np.float64)
        for _ in range(rounds):
            y = _local_steps(a, c, np.broadcast_to(x, a.shape), problem, local_steps, stepsize,
                             exact, rng)
            honest_vectors = list(y - x)
            vectors = honest_vectors + apply_attack(honest_vectors)
            x = x + aggregate(vectors)
        out[r] = x
    return out
