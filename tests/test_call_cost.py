"""What keeps a short run cheap, and that it changes no result.

- ``flat_jit`` (the simulator's programs): the numbers of ``eqx.filter_jit``, one trace per
  structure and static leaves, a new trace for a new static leaf, none for new array values;
- the component checks run once per structure, never skipped for one that failed or for
  a sampler with array leaves;
- f_i* that are all +0 become a compile-time 0 in the simulator's copy of a problem (with
  native loops), with the same numbers bit for bit as the f_i* read from the array;
- a run's host-side preparations are remembered for the same immutable objects, forgotten
  with them, and never for objects with a leaf that can change in place.
"""

import dataclasses
import gc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._engine import _memo, _round, _run
from fedjax_abc._engine._jit import flat_jit
from fedjax_abc._engine._memo import remembered
from fedjax_abc._engine._run import checked
from fedjax_abc._engine._xla_loops import loop_flags
from fedjax_abc._problems import _checks
from fedjax_abc._problems._checks import check_components
from fedjax_abc._problems._problem import Problem, cast_floating, with_constant_zero_minima

N = 13  # a client count of its own


class Scaled(eqx.Module):
    scale: jax.Array
    power: int = eqx.field(static=True)


def _fn(module, x, label, shift):
    return module.scale * x ** module.power + shift * len(label)


# ------------------------------------------------------------------------------ flat_jit


def test_flat_jit_gives_filter_jit_numbers_and_static_leaves():
    x = jnp.linspace(0.0, 1.0, 7)
    m = Scaled(jnp.asarray(1.5), 3)
    want = eqx.filter_jit(_fn)(m, x, "ab", 0.25)
    got = flat_jit(_fn)(m, x, "ab", 0.25)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert np.asarray(got).dtype == np.asarray(want).dtype


def test_flat_jit_traces_once_per_structure_and_static_leaves():
    traces = []

    def fn(module, x, label):
        traces.append(label)
        return module.scale * x ** module.power

    call = flat_jit(fn)
    x = jnp.ones(4)
    call(Scaled(jnp.asarray(1.0), 2), x, "a")
    call(Scaled(jnp.asarray(3.0), 2), x + 1, "a")  # new array values: same program
    call(Scaled(jnp.asarray(3.0), 2), np.ones(4), "a")  # a NumPy array is traced too
    assert traces == ["a"]
    call(Scaled(jnp.asarray(3.0), 5), x, "a")  # a static field
    call(Scaled(jnp.asarray(3.0), 2), x, "b")  # a static leaf
    call(Scaled(jnp.asarray(3.0), 2), jnp.ones(5), "a")  # a shape
    call(Scaled(jnp.asarray(3.0), 2), x, 1)
    call(Scaled(jnp.asarray(3.0), 2), x, 1.0)  # 1.0 == 1, another type
    assert traces == ["a", "a", "b", "a", 1, 1.0]
    np.testing.assert_array_equal(call(Scaled(jnp.asarray(2.0), 3), jnp.arange(3.0), "a"),
                                  [0.0, 2.0, 16.0])


# ------------------------------------------------------------------- component checks


@pytest.fixture
def probes(monkeypatch):
    """The probe calls of check_components, counted (the cache starts empty)."""
    calls = []
    original = _checks._probe
    monkeypatch.setattr(_checks, "_PASSED", {})
    monkeypatch.setattr(_checks, "_probe", lambda *a: (calls.append(1), original(*a))[1])
    return calls


class OutOfRange(fa.UniformWithoutReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx + n, w


class Weighted(fa.UniformWithoutReplacement):
    """A sampler with an array leaf: its values are checked at every run."""

    weights: jax.Array = eqx.field(default_factory=lambda: jnp.ones(3))

    def from_words(self, words, n):
        idx, _ = super().from_words(words, n)
        return idx, self.weights


def test_a_structure_that_passed_is_not_probed_again(probes):
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    sampler = fa.UniformWithoutReplacement(3)
    check_components(p, p.oracle, sampler, 4, "float64")
    check_components(p, p.oracle, fa.UniformWithoutReplacement(3), 4, "float64")
    other = fa.problems.huber_offsets(jax.random.key(1), n=N)  # other values, same shapes
    check_components(other, other.oracle, sampler, 4, "float64")
    assert len(probes) == 1
    check_components(p, p.oracle, sampler, 5, "float64")  # Q
    check_components(p, p.oracle, fa.UniformWithoutReplacement(4), 4, "float64")  # static field
    check_components(p, p.oracle, sampler, 4, "float32")  # dtype
    q = fa.problems.huber_offsets(jax.random.key(0), n=N + 1)  # shapes
    check_components(q, q.oracle, sampler, 4, "float64")
    assert len(probes) == 5


def test_a_failed_structure_and_an_array_sampler_are_checked_every_time(probes):
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    for _ in range(2):
        with pytest.raises(ValueError, match="OutOfRange.from_words returned client index"):
            check_components(p, p.oracle, OutOfRange(3), 4, "float64")
    assert len(probes) == 2
    check_components(p, p.oracle, Weighted(3), 4, "float64")
    with pytest.raises(ValueError, match=r"Weighted.from_words returned weight -1.0"):
        check_components(p, p.oracle, Weighted(3, jnp.array([1.0, -1.0, 1.0])), 4, "float64")
    assert len(probes) == 4


# ------------------------------------------------------------------ f_i* all zero


def _round_of(problem, mode):
    """One round of 16 trials from x = 3 (problem (27)'s oracle reads f_i - f_i*)."""
    key_data = jax.random.key_data(jax.random.split(jax.random.key(5), 16)).T
    state = _round.init_state(fa.algorithms.FedAvg(), jnp.full((16, problem.dim), 3.0), N)
    step = jax.jit(lambda p, s, k: _round.batched_round(
        p, p.oracle, fa.UniformWithoutReplacement(4), fa.algorithms.FedAvg(), s, k, 0.1, 6,
        mode))
    return np.asarray(step(problem, state, key_data).server.x)


@pytest.mark.parametrize("mode", ["mask", "gather"])
@pytest.mark.parametrize("make", [
    lambda: fa.problems.huber_offsets(jax.random.key(0), n=N),  # problem (27), f_i* = 0
    lambda: fa.problems.quadratics(jax.random.key(0), n=N, d=3, C=2.0, D=0.5),
])
def test_zero_minima_as_a_constant_change_no_bit(make, mode):
    problem = make()
    assert np.all(np.asarray(problem.local_minima) == 0)
    constant = with_constant_zero_minima(problem)
    assert type(constant) is not Problem and isinstance(constant, Problem)
    assert constant.client(2).local_min.shape == () and float(constant.client(2).local_min) == 0
    np.testing.assert_array_equal(_round_of(constant, mode), _round_of(problem, mode))


def test_other_minima_keep_the_problem():
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    minima = np.zeros(N)
    for changed in (dataclasses.replace(p, local_minima=jnp.asarray(minima + np.eye(N)[3])),
                    dataclasses.replace(p, local_minima=jnp.asarray(-minima))):  # -0.0
        assert with_constant_zero_minima(changed) is changed
    seen = []
    jax.jit(lambda m: seen.append(with_constant_zero_minima(
        dataclasses.replace(p, local_minima=m))) or m)(jnp.zeros(N))  # traced
    assert type(seen[0]) is Problem



@pytest.mark.parametrize("flags, constant", [
    ("", False),
    ("--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=1024", False),
    (loop_flags(""), True),  # what use_cpu_cores(native_loops=True) sets
])
def test_the_simulator_uses_the_constant_in_native_loops_only(monkeypatch, flags, constant):
    monkeypatch.setenv("XLA_FLAGS", flags)
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    run = checked(p, 3, 2, 0.1, 4, p.x_star, 8, jax.random.key(0), 2, "gather", None, None, None,
                  "float64", None, True, None)
    assert (type(run.problem) is not Problem) == constant
    assert isinstance(run.problem, Problem)


# ------------------------------------------------------------- remembered preparations


def _entries(fn):
    return [key for key in _memo._ENTRIES if key[0] is fn]


def test_remembered_keys_on_identity_and_forgets_with_the_objects():
    calls = []

    def prepare(sampler, n):
        calls.append(n)
        return [n]

    s = fa.UniformWithoutReplacement(3)
    first = remembered(prepare, (s,), 10)
    assert remembered(prepare, (s,), 10) is first and calls == [10]
    assert remembered(prepare, (s,), 11) == [11]  # other arguments
    assert remembered(prepare, (fa.UniformWithoutReplacement(3),), 10) is not first  # equal, not it
    assert calls == [10, 11, 10]
    assert len(_entries(prepare)) == 2  # the equal sampler's entry went with it
    del s
    gc.collect()
    assert _entries(prepare) == []


def test_remembered_leaves_out_mutable_leaves_failures_and_unhashable_arguments():
    leaf = np.zeros(3)
    module = Scaled(leaf, 1)  # a NumPy leaf can change in place
    total = lambda m: float(np.sum(m.scale))  # noqa: E731
    assert remembered(total, (module,)) == 0.0
    leaf[:] = 1.0
    assert remembered(total, (module,)) == 3.0
    assert _entries(total) == []

    calls = []

    def fails(m):
        calls.append(1)
        raise ValueError("no")

    jax_module = Scaled(jnp.ones(3), 1)
    for _ in range(2):
        with pytest.raises(ValueError, match="no"):
            remembered(fails, (jax_module,))
    assert len(calls) == 2
    count = lambda m, extra: calls.append(2) or len(extra)  # noqa: E731
    assert remembered(count, (jax_module,), [1, 2]) == remembered(count, (jax_module,), [1, 2]) == 2
    assert calls.count(2) == 2  # a list argument is not hashable: computed each time


def test_a_second_run_of_the_same_objects_skips_the_checks_and_keeps_its_numbers(monkeypatch):
    checks = []
    real = _run.check_components
    monkeypatch.setattr(_run, "check_components",
                        lambda *args: checks.append(1) or real(*args))
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    kw = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=6, x0=3.0, trials=8,
              key=jax.random.key(2), record_every=2)
    runs = [fa.simulate(p, **kw) for _ in range(2)]
    assert len(checks) == 1
    fresh = fa.simulate(fa.problems.huber_offsets(jax.random.key(0), n=N), **kw)
    assert len(checks) == 2
    for res in runs:
        np.testing.assert_array_equal(res.gap, fresh.gap)
    runs[0].config["key"].append(7)  # a result's config is its own
    assert runs[1].config["key"] == fresh.config["key"] == [0, 2]


def test_a_problem_changed_in_place_is_prepared_again():
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    offsets = np.array(p.params)
    mutable = dataclasses.replace(p, params=offsets)  # a NumPy leaf
    kw = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=4, x0=3.0, trials=8,
              key=jax.random.key(2), mode="gather")
    before = fa.simulate(mutable, **kw).x_final
    offsets += 1.0
    after = fa.simulate(mutable, **kw).x_final
    want = fa.simulate(dataclasses.replace(p, params=jnp.asarray(offsets)), **kw).x_final
    np.testing.assert_array_equal(after, want)
    assert not np.array_equal(after, before)


def test_cast_floating_keeps_arrays_of_the_dtype_and_casts_the_others():
    strong = jnp.ones(3, jnp.float64)
    weak = jnp.asarray(1.0)  # weakly typed float64
    tree = cast_floating((strong, weak, np.ones(2), jnp.ones(2, jnp.float32), 4), jnp.float64)
    assert tree[0] is strong
    assert not tree[1].weak_type and tree[1].dtype == jnp.float64
    assert isinstance(tree[2], jax.Array) and tree[2].dtype == jnp.float64
    assert tree[3].dtype == jnp.float64 and tree[4] == 4
