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

Both happen in one small ``jit`` call (the shape checks while it is traced, once per
structure of problem, oracle and sampler, as for any ``jit``); a
:class:`~fedjax_abc.Simulation` makes them once for all its runs. Components that are the
library's own through and through (classes and functions defined in fedjax_abc, as the
built-in samplers, oracles and problems) are not probed: their shapes and values are
tested, and the probe would cost a short run more than its rounds.

Three more mistakes run without an error and give wrong numbers, and are refused too: a
:class:`~fedjax_abc.Problem` built by hand whose ``local_minima`` (or ``x_star``,
``f_star``, a leaf of ``params``) does not have the shape n (d, ...) sets; a step's noise
that the gradient uses and that broadcasts to the model's shape (d,) without having it
(noise of shape (Q,) for (Q, d): every coordinate gets the same draw); a sampler or oracle
that draws from NumPy's (or Python's) global random generator while traced, or from one it
makes, holds in a field, or reads from outside (a generator made at module level, in a
closure or a default argument of its code, found in the names its methods read): the draw
is made once, at trace time, and repeats in every round and trial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import random

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._args import DTYPES
from fedjax_abc._problems._host import method
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import (Problem, cast_floating, renamed,
                                          with_placeholder_minima)
from fedjax_abc._problems._samplers import AbstractSampler

__all__ = ["check_components", "reads_local_minima"]

_WORD_SETS = 30  # random word sets on which the sampler's values are checked, plus 2 extremes
_SEED = 20240601  # fixed: the check is deterministic


def _count(owner: str, what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{owner}.{what} must return an integer >= 0, got {value!r}")
    return int(value)


def _describe(tree) -> str:
    leaves = jax.tree_util.tree_leaves(tree)
    return ", ".join(f"{leaf.dtype}{list(leaf.shape)}" for leaf in leaves) or "nothing"


def _global_generators() -> tuple:
    """The states of NumPy's and Python's global random generators."""
    state = np.random.get_state(legacy=False)
    inner = state["state"]
    return (np.asarray(inner["key"]).tobytes(), int(inner["pos"]), state["has_gauss"],
            float(state["gauss"]), random.getstate())


_GENERATOR_MAKERS = ("default_rng", "Generator", "RandomState")
_GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)


class _GeneratorMade(Exception):
    """A NumPy or Python random generator was made while a component was traced."""


@contextlib.contextmanager
def _no_generators():
    """While a component is traced, making a NumPy or Python random generator raises
    :class:`_GeneratorMade`: its draws would be made once, at trace time (the names are
    put back when the block ends, also on an error)."""
    def refuse(*args, **kwargs):
        raise _GeneratorMade

    saved = [(np.random, name, getattr(np.random, name)) for name in _GENERATOR_MAKERS]
    saved.append((random, "Random", random.Random))
    try:
        for module, name, _ in saved:
            setattr(module, name, refuse)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def _held_generator(obj, depth: int = 0):
    """The dotted field of ``obj`` (a module's fields, to a few levels) holding a NumPy or
    Python random generator, or None."""
    if depth > 4 or not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return None
    for f in dataclasses.fields(obj):
        value = object.__getattribute__(obj, f.name)
        if isinstance(value, _GENERATORS):
            return f.name
        inner = _held_generator(value, depth + 1)
        if inner is not None:
            return f"{f.name}.{inner}"
    return None


_DRAWN_ONCE = ("the draw is made once and repeats every round; draw from the random words (or "
               "key) it is given")

# modules whose code is not the user's: not walked for generators
_LIBRARIES = ("fedjax_abc", "jax", "jaxlib", "numpy", "equinox", "jaxtyping", "optax", "scipy",
              "builtins", "functools", "abc", "math", "typing", "dataclasses")


def _user_function(fn) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return hasattr(fn, "__code__") and module.split(".")[0] not in _LIBRARIES


def _names_used(code) -> set:
    """The global and attribute names a code object (and the functions inside it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_used(const)
    return names


def _outside_generators(owner: str, obj) -> list:
    """(where, generator) of the NumPy and Python random generators that ``obj``'s own code
    can reach outside its fields: names its methods and functions read from their modules
    (a generator made at module level), their closures and defaults, to a few calls deep.
    ``owner`` names ``obj`` in ``where``."""
    found, seen = {}, set()

    def note(where, value):
        if isinstance(value, _GENERATORS):
            found.setdefault(id(value), (where, value))
            return True
        return False

    def function(fn, depth):
        if id(fn) in seen or depth > 3 or not _user_function(fn):
            return
        seen.add(id(fn))
        where = f"{fn.__module__}.{getattr(fn, '__qualname__', fn.__name__)}"
        space = getattr(fn, "__globals__", {})
        for name in _names_used(fn.__code__):
            if name not in space:
                continue
            value = space[name]
            if note(f"{fn.__module__}.{name} (read by {where})", value):
                continue
            if hasattr(value, "__code__"):
                function(value, depth + 1)
            elif isinstance(value, type(np)):  # a module: its names this code reads too
                for attr in _names_used(fn.__code__):
                    inner = getattr(value, attr, None)
                    note(f"{value.__name__}.{attr} (read by {where})", inner)
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if not note(f"a variable of {where}", value):
                walk(value, depth + 1)
        for value in (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values()):
            if not note(f"a default argument of {where}", value):
                walk(value, depth + 1)

    def walk(value, depth):
        if depth > 4 or id(value) in seen or isinstance(value, _PLAIN):
            return
        if isinstance(value, functools.partial):
            seen.add(id(value))
            for inner in (value.func,) + value.args + tuple(value.keywords.values()):
                walk(inner, depth + 1)
        elif hasattr(value, "__func__") and hasattr(value, "__self__"):  # a bound method
            function(value.__func__, depth)
        elif hasattr(value, "__code__"):
            function(value, depth)
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item, depth + 1)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            seen.add(id(value))
            for cls in type(value).__mro__:  # the methods of its own classes
                for attr in vars(cls).values():
                    attr = getattr(attr, "__func__", attr)  # static and class methods
                    attr = getattr(attr, "fget", attr)  # properties
                    if hasattr(attr, "__code__"):
                        function(attr, depth + 1)
            for f in dataclasses.fields(value):
                inner = object.__getattribute__(value, f.name)
                if not note(f"{owner}.{f.name}", inner):
                    walk(inner, depth + 1)

    walk(obj, 0)
    return list(found.values())


def _generator_state(generator):
    """A generator's state, comparable with ``==``."""
    if isinstance(generator, random.Random):
        return generator.getstate()
    state = (generator.bit_generator.state if isinstance(generator, np.random.Generator)
             else generator.get_state(legacy=False))
    return _frozen(state)


def _frozen(value):
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in sorted(value.items()))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return value


def _abstract(owner: str, fn, *args):
    """``jax.eval_shape(fn, *args)``, a failure reported in one line naming ``owner``; so is a
    draw from NumPy's or Python's global generator, or from a generator made, while traced
    (made once, at trace time: the same numbers in every round)."""
    before = _global_generators()
    try:
        with _no_generators():
            out = jax.eval_shape(fn, *args)
    except _GeneratorMade:
        raise ValueError(f"{owner} makes a NumPy or Python random generator (np.random."
                         f"default_rng, ...) when traced: {_DRAWN_ONCE}") from None
    except Exception as err:  # noqa: BLE001 - user code: any error, one line
        text = str(err).strip()
        first = text.splitlines()[0] if text else ""
        raise ValueError(f"{owner} raised {type(err).__name__} when traced: {first}") from None
    if _global_generators() != before:
        raise ValueError(f"{owner} draws from NumPy's or Python's global random generator "
                         f"(np.random.*, random.*) when traced: {_DRAWN_ONCE}")
    return out


def _check_problem(problem: Problem) -> None:
    """Raises ValueError unless f_i*, f*, x* and the params' leaves have the shapes n, d set."""
    leaves = jax.tree_util.tree_leaves(problem.params)
    if not leaves or any(np.ndim(a) == 0 for a in leaves):
        raise ValueError("Problem.params must have array leaves with leading axis n (clients)")
    n = problem.num_clients
    lengths = sorted({int(np.shape(a)[0]) for a in leaves})
    if lengths != [n]:
        raise ValueError(f"Problem.params leaves have leading axes {lengths}: every leaf needs "
                         f"the same leading axis n (clients)")
    minima = problem.minima
    if minima.deferred:
        return  # computed on demand, of the shapes n and d set
    if np.ndim(minima.x_star) != 1:
        raise ValueError(f"Problem.x_star must have shape (d,), got {np.shape(minima.x_star)}")
    if np.shape(minima.local_minima) != (n,):
        raise ValueError(f"Problem.local_minima must have shape (n={n},) (one f_i* per client), "
                         f"got {np.shape(minima.local_minima)}")
    if np.shape(minima.f_star) != ():
        raise ValueError(f"Problem.f_star must be a scalar, got shape {np.shape(minima.f_star)}")
    for name in ("local_minima", "f_star", "x_star"):
        value = np.asarray(getattr(minima, name))
        if value.dtype.kind not in "iuf" or not np.all(np.isfinite(value)):
            raise ValueError(f"Problem.{name} must be finite numbers, got {value.tolist()}"[:200])


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

    def step(w):
        z = oracle_c.noise_from_words(w, shape, dtype)
        return oracle_c.step_noise(z, jnp.asarray(0, jnp.int32), shape, dtype)

    def gradient(z_0):
        return oracle_c.gradient(problem_c, problem_c.client(0), jnp.zeros((d,), dtype), z_0)

    g = _abstract(f"{name}.gradient", lambda w: gradient(step(w)), words)
    _step_noise_shapes(name, gradient, _abstract(f"{name}.step_noise", step, words), shape)
    if getattr(g, "shape", None) != (d,):
        raise ValueError(f"{name}.gradient must return one step's gradient of shape (d={d},), "
                         f"got {_describe(g)}")
    if jnp.result_type(dtype, g.dtype) != jnp.dtype(dtype):
        raise ValueError(f"{name}.gradient must keep the run's dtype {jnp.dtype(dtype).name}, "
                         f"got {g.dtype}")


def reads_local_minima(problem: Problem, oracle: AbstractOracle, local_steps: int,
                       dtype) -> bool:
    """Whether ``oracle``'s gradient reads a client's f_i* (``Client.local_min``), as the
    paper's oracle (26) does: found from its traced program, so it holds for a user's
    oracle too. The trace is cached like any ``jit``'s: a second call with components of
    the same structure costs a lookup."""
    jdtype = jnp.dtype(DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    problem_c = renamed(with_placeholder_minima(problem).astype(jdtype), "")
    shape = (local_steps, problem.dim)
    words = jax.ShapeDtypeStruct((method(oracle, "num_words")(shape),), jnp.uint32)
    traced = _gradient_of_minimum.trace(jax.ShapeDtypeStruct((), jdtype), words, problem_c,
                                        cast_floating(oracle, jdtype), shape, jdtype)
    return _read_inputs(traced.jaxpr.jaxpr)[0]


@functools.partial(jax.jit, static_argnums=(4, 5))
def _gradient_of_minimum(local_min, words, problem, oracle, shape, dtype):
    """One step's gradient of client 0 at x = 0 as a function of its f_i* (``local_min``)."""
    z = oracle.noise_from_words(words, shape, dtype)
    z_0 = oracle.step_noise(z, jnp.asarray(0, jnp.int32), shape, dtype)
    client = problem.client(0)._replace(local_min=local_min)
    return oracle.gradient(problem, client, jnp.zeros((shape[1],), dtype), z_0)


def _used_inputs(fn, *args) -> list:
    """Whether each leaf of ``args`` is read by ``fn`` (its traced program uses it)."""
    return _read_inputs(jax.make_jaxpr(fn)(*args).jaxpr)


def _read_inputs(jaxpr) -> list:
    """Whether each input of ``jaxpr`` is read by one of its equations or is an output."""
    var = jax.extend.core.Var
    used = {v for eqn in jaxpr.eqns for v in eqn.invars if isinstance(v, var)}
    used |= {v for v in jaxpr.outvars if isinstance(v, var)}
    return [v in used for v in jaxpr.invars]


def _step_noise_shapes(name: str, gradient, z_0, shape: tuple) -> None:
    """Raises ValueError if ``gradient`` uses a floating leaf of a step's noise ``z_0`` that
    broadcasts to the model's shape shape[1:] without having it (one draw for every entry)."""
    model = tuple(shape[1:])
    leaves = jax.tree_util.tree_leaves(z_0)
    suspect = [leaf for leaf in leaves
               if jnp.issubdtype(leaf.dtype, jnp.floating) and leaf.shape != model
               and math.prod(model) > 1 and _broadcasts(leaf.shape, model)]
    if not suspect:
        return
    zeros = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), z_0)
    for leaf, used in zip(leaves, _used_inputs(gradient, zeros)):
        if used and any(leaf is s for s in suspect):
            raise ValueError(f"{name}: a step's noise has shape {tuple(leaf.shape)}, which "
                             f"broadcasts to the model's shape {model}: every entry would get "
                             f"the same draw; noise(key, shape, dtype) must return noise of "
                             f"shape {tuple(shape)} (one slice per local step)")


def _broadcasts(small: tuple, big: tuple) -> bool:
    try:
        return np.broadcast_shapes(small, big) == big
    except ValueError:
        return False


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


_PLAIN = (jax.Array, np.ndarray, np.generic, str, int, float, bool, type(None))


def _library_code(*objs, depth: int = 0) -> bool:
    """Whether every class and function in ``objs`` (their fields, to a few levels) is
    defined in fedjax_abc (a user's subclass, loss or magnitude function is not).

    Types are read with ``type`` and fields with ``object.__getattribute__``: on an equinox
    module, ``isinstance`` and ``getattr`` go through its ``__getattribute__``, which made
    this walk a tenth of a short ``simulate`` call."""
    for obj in objs:
        cls = type(obj)
        if issubclass(cls, _PLAIN):
            continue
        if issubclass(cls, (tuple, list)):
            if not _library_code(*obj, depth=depth):
                return False
            continue
        instance = not issubclass(cls, type) and hasattr(cls, "__dataclass_fields__")
        module = getattr(obj, "__module__", None) if callable(obj) and not issubclass(
            cls, eqx.Module) and not (instance or dataclasses.is_dataclass(obj)) \
            else cls.__module__
        if not (module or "").startswith("fedjax_abc."):
            return False
        if instance:
            if depth >= 4 or not _library_code(
                    *(object.__getattribute__(obj, f.name) for f in dataclasses.fields(cls)),
                    depth=depth + 1):
                return False
    return True


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
    jdtype = jnp.dtype(DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    _check_problem(problem)
    problem = with_placeholder_minima(problem)  # traced below: deferred values not computed
    n, Q = problem.num_clients, local_steps
    method(oracle, "validate")(problem)  # e.g. a mini-batch larger than a client's data
    name = type(sampler).__name__
    m = _count(name, f"num_slots({n})", method(sampler, "num_slots")(n))
    W = _count(name, f"num_words({n})", method(sampler, "num_words")(n))
    shape = (Q, problem.dim)
    W_oracle = _count(type(oracle).__name__, f"num_words({shape})",
                      method(oracle, "num_words")(shape))
    if _library_code(problem, oracle, sampler):
        return  # the library's own components: their shapes and values are tested
    for owner in (sampler, oracle):
        field = _held_generator(owner)
        if field is not None:
            raise ValueError(f"{type(owner).__name__}.{field} is a NumPy or Python random "
                             f"generator: drawn from when traced, {_DRAWN_ONCE}")
    # generators made outside the components (at module level, in a closure) that their
    # code reads: a draw from one while traced changes its state, and is made once
    outside = [(type(owner).__name__, where, g) for owner in (sampler, oracle, problem)
               for where, g in _outside_generators(type(owner).__name__, owner)]
    before = [_generator_state(g) for _, _, g in outside]
    problem = renamed(problem, "")  # a label: no new trace for a new name
    idx, w = _probe(problem, oracle, sampler, jnp.asarray(_word_sets(W)), n, m, Q, W_oracle,
                    jdtype)
    for (owner, where, g), state in zip(outside, before):
        if _generator_state(g) != state:
            raise ValueError(f"{owner} draws from the {type(g).__name__} {where}, made outside "
                             f"it, when traced: {_DRAWN_ONCE}")
    _sampler_values(name, np.asarray(idx), np.asarray(w), n)
