"""Checks of a run's sampler and oracle before the simulator compiles anything with them.

The oracle's own ``validate(problem)`` runs first (a mini-batch oracle checks that every
client has enough samples). A custom :class:`~fedjax_abc.AbstractSampler` or
:class:`~fedjax_abc.AbstractOracle` that returns arrays of the wrong shape would otherwise
fail deep inside the compiled program, or worse, run: an index outside [0, n) is clamped by the gather, a noise leaf without the
leading axis Q is sliced anyway. :func:`check_components` finds these in two steps:

- shapes and dtypes, by abstract evaluation (``jax.eval_shape``: traced, never compiled):
  the sampler's m = ``num_slots(n)`` integer indices and m weights, the oracle's noise
  leaves with leading axis Q (when it slices them the default way), one step's gradient
  of shape (d,) that keeps the run's dtype;
- values only a run can show, on a few dozen word sets (random, and the extremes all-0 and
  all-1 bits): the indices in [0, n), the weights finite and >= 0.

Both happen in one small ``jit`` call (the shape checks while it is traced): about 0.1 s
the first time for a structure of problem, oracle and sampler. Both depend on nothing but
that structure (the tree, its static fields and the shapes and dtypes of its arrays), the
sampler's values too when it has no array leaf (the built-in ones): such a structure,
once passed, is not checked again (a set of at most ``_PASSED_MAX`` of them), which keeps
the checks out of the cost of a short run.
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem, cast_floating
from fedjax_abc._problems._samplers import AbstractSampler

__all__ = ["check_components"]

_DTYPES = {"float64": jnp.float64, "float32": jnp.float32}
_WORD_SETS = 30  # random word sets on which the sampler's values are checked, plus 2 extremes
_SEED = 20240601  # fixed: the check is deterministic
_PASSED_MAX = 256
_PASSED: dict = {}  # the structures that passed (insertion-ordered: the oldest leaves first)


def _count(owner: str, what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{owner}.{what} must return an integer >= 0, got {value!r}")
    return int(value)


def _describe(tree) -> str:
    leaves = jax.tree_util.tree_leaves(tree)
    return ", ".join(f"{leaf.dtype}{list(leaf.shape)}" for leaf in leaves) or "nothing"


def _abstract(owner: str, fn, *args):
    """``jax.eval_shape(fn, *args)``, a failure reported in one line naming ``owner``."""
    try:
        return jax.eval_shape(fn, *args)
    except Exception as err:  # noqa: BLE001 - user code: any error, one line
        text = str(err).strip()
        first = text.splitlines()[0] if text else ""
        raise ValueError(f"{owner} raised {type(err).__name__} when traced: {first}") from None


def _sampler_shapes(sampler: AbstractSampler, n: int, m: int, W: int) -> None:
    """Raises ValueError unless ``from_words`` gives m integer indices and m real weights."""
    name = type(sampler).__name__
    out = _abstract(f"{name}.from_words", lambda w: sampler.from_words(w, n),
                    jax.ShapeDtypeStruct((W,), jnp.uint32))
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"{name}.from_words must return (indices, weights), got {_describe(out)}")
    idx, w = out
    if idx.shape != (m,) or not jnp.issubdtype(idx.dtype, jnp.integer):
        raise ValueError(f"{name}.from_words must return indices of shape (num_slots={m},) and an "
                         f"integer dtype, got {idx.dtype}{list(idx.shape)}")
    if w.shape != (m,) or not (jnp.issubdtype(w.dtype, jnp.floating)
                               or jnp.issubdtype(w.dtype, jnp.integer)):
        raise ValueError(f"{name}.from_words must return real weights of shape (num_slots={m},), "
                         f"got {w.dtype}{list(w.shape)}")


def _sampler_values(name: str, idx: np.ndarray, w: np.ndarray, n: int) -> None:
    """Raises ValueError unless every index is in [0, n) and every weight finite and >= 0."""
    bad_idx = (idx < 0) | (idx >= n)
    if bad_idx.any():
        j, k = np.argwhere(bad_idx)[0]
        raise ValueError(f"{name}.from_words returned client index {int(idx[j, k])} outside "
                         f"[0, n={n}) (slot {k} of word set {j} of the check)")
    bad_w = ~np.isfinite(w) | (w < 0)
    if bad_w.any():
        j, k = np.argwhere(bad_w)[0]
        raise ValueError(f"{name}.from_words returned weight {float(w[j, k])!r}: weights must be "
                         f"finite and >= 0 (slot {k} of word set {j} of the check)")


def _oracle_shapes(problem: Problem, oracle: AbstractOracle, Q: int, W: int, dtype) -> None:
    """Raises ValueError unless the round noise and one step's gradient fit (Q, d) and dtype."""
    name = type(oracle).__name__
    d = problem.dim
    shape = (Q, d)
    problem_c = problem.astype(dtype)
    oracle_c = cast_floating(oracle, dtype)
    words = jax.ShapeDtypeStruct((W,), jnp.uint32)
    noise = _abstract(f"{name}.noise_from_words",
                      lambda w: oracle_c.noise_from_words(w, shape, dtype), words)
    if type(oracle).step_noise is AbstractOracle.step_noise:  # slices the leading axis
        leaves = jax.tree_util.tree_leaves(noise)
        if any(leaf.ndim == 0 or leaf.shape[0] != Q for leaf in leaves):
            raise ValueError(f"{name}.noise_from_words must return leaves with leading axis "
                             f"Q={Q} (one slice per local step) for shape {shape}, "
                             f"got {_describe(noise)}")

    def one_step(w):
        z = oracle_c.noise_from_words(w, shape, dtype)
        z_0 = oracle_c.step_noise(z, jnp.asarray(0, jnp.int32), shape, dtype)
        return oracle_c.gradient(problem_c, problem_c.client(0), jnp.zeros((d,), dtype), z_0)

    g = _abstract(f"{name}.gradient", one_step, words)
    if getattr(g, "shape", None) != (d,):
        raise ValueError(f"{name}.gradient must return one step's gradient of shape (d={d},), "
                         f"got {_describe(g)}")
    if jnp.result_type(dtype, g.dtype) != jnp.dtype(dtype):
        raise ValueError(f"{name}.gradient must keep the run's dtype {jnp.dtype(dtype).name}, "
                         f"got {g.dtype}")


# a tiny program run once per structure: compile it fast (about half the time), not well
@functools.partial(eqx.filter_jit, compiler_options={"xla_backend_optimization_level": 0})
def _probe(problem, oracle, sampler, words, n, m, Q, W_oracle, dtype):
    """The shape checks (at trace time: once per structure, then cached with the program)
    and the sampler's slots for every word set in ``words``."""
    _sampler_shapes(sampler, n, m, words.shape[1])
    _oracle_shapes(problem, oracle, Q, W_oracle, dtype)
    return jax.vmap(lambda w: sampler.from_words(w, n))(words)


def _word_sets(W: int) -> np.ndarray:
    """The check's word sets: all-0 bits, all-1 bits and ``_WORD_SETS`` random ones."""
    rng = np.random.default_rng(_SEED)
    return np.concatenate([np.zeros((1, W), np.uint32), np.full((1, W), 2 ** 32 - 1, np.uint32),
                           rng.integers(0, 2 ** 32, (_WORD_SETS, W), dtype=np.uint32)])


def _structure(problem: Problem, oracle: AbstractOracle, sampler: AbstractSampler, Q: int,
               dtype):
    """What the checks depend on, hashable; None where that is not known from the structure
    (a sampler with array leaves, or unhashable static fields)."""
    if any(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in jax.tree_util.tree_leaves(sampler)):
        return None
    leaves, treedef = jax.tree_util.tree_flatten((problem, oracle, sampler))
    described = tuple((leaf.shape, leaf.dtype) if isinstance(leaf, (jax.Array, np.ndarray))
                      else (type(leaf), leaf) for leaf in leaves)
    key = (treedef, described, Q, dtype)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def check_components(problem: Problem, oracle: AbstractOracle, sampler: AbstractSampler,
                     local_steps: int, dtype) -> None:
    """Checks a run's sampler and oracle (see the module docstring) before it compiles.

    The shape checks run while a small program (the sampler on the check's word sets) is
    traced; it is cached like any ``jit``, so a second run with components of the same
    structure costs one call of it.

    Args:
      problem: the run's problem.
      oracle: the run's oracle.
      sampler: the run's sampler (already ``validate``d for the problem's n).
      local_steps: Q.
      dtype: "float64", "float32" or a floating dtype.

    Raises:
      ValueError: in one line naming the sampler's or oracle's class and what is wrong.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> from fedjax_abc._problems._checks import check_components
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=10)
      >>> check_components(p, p.oracle, fa.UniformWithoutReplacement(3), 5, "float64")
    """
    jdtype = jnp.dtype(_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    n, Q = problem.num_clients, local_steps
    oracle.validate(problem)  # e.g. a mini-batch larger than a client's data
    structure = _structure(problem, oracle, sampler, Q, jdtype)
    if structure is not None and structure in _PASSED:
        return
    name = type(sampler).__name__
    m = _count(name, f"num_slots({n})", sampler.num_slots(n))
    W = _count(name, f"num_words({n})", sampler.num_words(n))
    shape = (Q, problem.dim)
    W_oracle = _count(type(oracle).__name__, f"num_words({shape})", oracle.num_words(shape))
    problem = dataclasses.replace(problem, name="")  # a label: no new trace for a new name
    idx, w = _probe(problem, oracle, sampler, jnp.asarray(_word_sets(W)), n, m, Q, W_oracle,
                    jdtype)
    _sampler_values(name, np.asarray(idx), np.asarray(w), n)
    if structure is not None:
        if len(_PASSED) >= _PASSED_MAX:
            del _PASSED[next(iter(_PASSED))]
        _PASSED[structure] = True
