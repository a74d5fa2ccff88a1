"""What keeps a short run cheap, and that it changes no result.

- ``flat_jit`` (the simulator's programs): the numbers of ``eqx.filter_jit``, one trace per
  structure and static leaves, a new trace for a new static leaf, none for new array values;
- the component checks run once per structure, never skipped for one that failed or for
  a sampler with array leaves;
- f_i* that are all +0 become a compile-time 0 in the simulator's copy of a problem (with
  native loops), with the same numbers bit for bit as the f_i* read from the array.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._engine import _round
from fedjax_abc._engine._jit import flat_jit
from fedjax_abc._engine._run import checked
from fedjax_abc._engine._xla_loops import loop_flags
from fedjax_abc._problems import _checks
from fedjax_abc._problems._checks import check_components
from fedjax_abc._problems._problem import Problem, with_constant_zero_minima

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
