"""What keeps a short run cheap, and that it changes no result.

- ``flat_jit`` (the simulator's programs): the numbers of ``eqx.filter_jit``, one trace per
  structure and static leaves, a new trace for a new static leaf, none for new array values;
- the component checks run at every run (nothing is remembered between runs: no
  module-level cache in the package);
- f_i* that are all +0 become a compile-time 0 in the simulator's copy of a problem (with
  native loops), with the same numbers bit for bit as the f_i* read from the array;
- a call reads the components' methods on the host without equinox's ``BoundMethod``
  wrapper (a module built at every read);
"""

import ast
import dataclasses
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._engine import _round
from fedjax_abc._engine._jit import flat_jit
from fedjax_abc._engine._run import check_call
from fedjax_abc._engine._xla_loops import loop_flags
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


def test_the_checks_run_at_every_run_a_pass_is_not_remembered():
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    for _ in range(2):
        with pytest.raises(ValueError, match="OutOfRange.from_words returned client index"):
            check_components(p, p.oracle, OutOfRange(3), 4, "float64")
    check_components(p, p.oracle, Weighted(3), 4, "float64")
    with pytest.raises(ValueError, match=r"Weighted.from_words returned weight -1.0"):
        check_components(p, p.oracle, Weighted(3, jnp.array([1.0, -1.0, 1.0])), 4, "float64")


# ------------------------------------------------------------------ f_i* all zero


def _round_of(problem, mode):
    """One round of 16 trials from x = 3 (problem (27)'s oracle reads f_i - f_i*)."""
    key_data = jax.random.key_data(jax.random.split(jax.random.key(5), 16)).T
    state = _round.init_state(fa.algorithms.FedAvg(), jnp.full((16, problem.dim), 3.0), N)
    step = jax.jit(lambda p, s, k: _round.batched_round(
        _round.Parts(p, p.oracle, fa.UniformWithoutReplacement(4), fa.algorithms.FedAvg(), None,
                     6), _round.Program(mode), s, k, 0.1))
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


def test_zero_minima_take_other_field_changes_in_both_branches():
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    constant = with_constant_zero_minima(p, name="renamed")
    assert type(constant) is not Problem and constant.name == "renamed"
    other = dataclasses.replace(p, local_minima=jnp.asarray(np.eye(N)[3]))
    kept = with_constant_zero_minima(other, name="renamed")
    assert type(kept) is Problem and kept.name == "renamed" and p.name != "renamed"
    np.testing.assert_array_equal(kept.local_minima, other.local_minima)



@pytest.mark.parametrize("flags", [
    "",
    "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=1024",
    loop_flags(""),  # what use_cpu_cores(native_loops=True) sets
])
def test_the_simulator_takes_the_constant_from_the_devices_not_the_flags(monkeypatch, flags):
    # XLA reads its flags when the backend starts: a change after that tells nothing, and
    # the choice follows the CPU devices (several: native loops by default) whatever they say
    monkeypatch.setenv("XLA_FLAGS", flags)
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    sim = fa.Simulation(p, num_sampled=3, local_steps=2, rounds=4, record_every=2, mode="gather")
    run = check_call(sim.components, sim.spec, stepsize=0.1, x0=p.x_star, key=jax.random.key(0),
                     trials=8)
    assert (type(run.components.problem) is not Problem) == (len(jax.devices("cpu")) > 1)
    assert isinstance(run.components.problem, Problem)


# ------------------------------------------------------------ no hidden caches


def _module_level_caches(path):
    """Module-level names bound to an empty dict, list or set, and functions cached by
    functools: the shapes a process-wide cache takes."""
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            v = node.value
            empty = (isinstance(v, ast.Dict) and not v.keys) or (
                isinstance(v, (ast.List, ast.Set)) and not v.elts) or (
                isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                and v.func.id in ("dict", "list", "set", "OrderedDict", "WeakValueDictionary",
                                  "WeakKeyDictionary") and not v.args and not v.keywords)
            if empty:
                found.append(f"{path.name}:{node.lineno}")
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            for dec in node.decorator_list:
                text = ast.unparse(dec)
                if "lru_cache" in text or text in ("functools.cache", "cache"):
                    found.append(f"{path.name}:{dec.lineno} {text}")
    return found


def test_no_module_level_cache_in_the_package():
    root = pathlib.Path(fa.__file__).parent
    found = [hit for path in sorted(root.rglob("*.py")) for hit in _module_level_caches(path)]
    assert found == []


def test_the_cache_check_finds_a_cache(tmp_path):  # negative control
    path = tmp_path / "m.py"
    path.write_text("import functools\n_SEEN = {}\n@functools.lru_cache(maxsize=None)\n"
                    "def f(x):\n    return x\nKEEP = {'a': 1}\n")
    assert _module_level_caches(path) == ["m.py:2", "m.py:3 functools.lru_cache(maxsize=None)"]


@pytest.mark.parametrize("mode", ["gather", "mask"])
def test_a_call_builds_no_bound_method_module(monkeypatch, mode):
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    kw = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=4, x0=1.0, trials=3,
              key=jax.random.key(1), mode=mode, progress=lambda *args: None)
    fa.simulate(p, **kw)  # compiled here: tracing reads methods as it likes
    bound = type(fa.UniformWithoutReplacement(2).num_slots)
    built = []
    post_init = bound.__post_init__
    monkeypatch.setattr(bound, "__post_init__",
                        lambda self: built.append(self.__func__.__name__) or post_init(self))
    fa.simulate(p, **kw)
    assert built == []
    fa.UniformWithoutReplacement(2).num_slots  # the control: a plain read builds one
    assert built == ["num_slots"]


class _Kinds(eqx.Module):
    a: int = 2

    def plain(self, x):
        return self.a * x

    @staticmethod
    def static(x):
        return x + 1

    @classmethod
    def klass(cls, x):
        return cls.__name__, x


def test_host_method_binds_like_python():
    from fedjax_abc._problems._host import method

    k = _Kinds()
    assert method(k, "plain")(3) == 6 and type(method(k, "plain")).__name__ == "method"
    assert method(k, "static")(3) == 4
    assert method(k, "klass")(3) == ("_Kinds", 3)


def test_zero_minima_decide_on_changed_minima():
    p = fa.problems.huber_offsets(jax.random.key(0), n=N)
    from fedjax_abc._problems._minima import Minima

    changed = with_constant_zero_minima(p, minima=Minima(jnp.asarray(np.eye(N)[3]), p.f_star,
                                                         p.x_star))
    assert type(changed) is Problem and float(changed.local_minima[3]) == 1.0


# ------------------------------------------------------------ a short call's devices


def test_a_call_goes_to_a_second_device_only_with_work_for_it():
    from fedjax_abc._engine._plan import make_plan

    devices = jax.devices()[:2]
    if len(devices) < 2:
        pytest.skip("needs two devices")

    def groups(chunk, work):
        return make_plan(10, 10, chunk, np.dtype("float64"), devices, False,
                         work=work).groups

    assert groups(17, None) == 2  # trials fill both: work not counted
    assert groups(17, 1) == 1  # a sliver of work stays on one device
    assert groups(17, 10 ** 6) == 2
    assert groups(8, 10 ** 9) == 1  # 8 trials fill one device's lanes, whatever the work
    assert make_plan(10, 10, 17, np.dtype("float64"), devices, False, work=1,
                     every_device=True).groups == 2  # a sweep's grid takes every device


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_a_trials_work_counts_its_client_steps(mode):
    p = fa.problems.quadratics(jax.random.key(1), n=6, d=5)
    kw = dict(num_sampled=2, local_steps=3, rounds=7, record_every=7, mode=mode)
    call = dict(stepsize=0.1, x0=p.x_star, key=jax.random.key(0), trials=8)
    sim = fa.Simulation(p, **kw)
    run = check_call(sim.components, sim.spec, **call)
    participants = 6 if mode == "mask" else 2  # n virtual clients, or the S sampled
    assert run.trial_work == 7 * participants * 3 * 5
    assert not run.fill_devices
    sim = fa.Simulation(p, **kw, devices=jax.devices())
    listed = check_call(sim.components, sim.spec, **call)
    assert listed.fill_devices  # the user's devices are filled as the trials allow


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_a_short_call_has_the_same_bits_on_one_device_or_both(mode):
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=3, local_steps=4, stepsize=1e-2, rounds=30, x0=5.0, trials=17,
              key=jax.random.key(5), mode=mode, record_every=10)
    default = fa.simulate(p, **kw)
    for devices in (jax.devices(), jax.devices()[:1]):
        other = fa.simulate(p, devices=devices, **kw)
        assert np.array_equal(default.gap, other.gap)
        assert np.array_equal(default.x_final, other.x_final)


def test_scalar_hyperparameters_are_host_leaves_cast_on_the_host():
    prox = fa.algorithms.FedProx(mu=0.5)
    assert type(prox.mu) is np.ndarray and prox.mu.dtype == np.float64
    cast = cast_floating(prox, jnp.float32)
    assert type(cast.mu) is np.ndarray and cast.mu.dtype == np.float32
    big = cast_floating({"w": np.ones(3)}, jnp.float32)["w"]  # an array: on the device
    assert isinstance(big, jax.Array) and big.dtype == jnp.float32


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_host_hyperparameter_gives_a_device_ones_bits(dtype):
    p = fa.problems.quadratics(jax.random.key(1), n=6, d=5)
    kw = dict(num_sampled=2, local_steps=3, stepsize=5e-2, rounds=20, x0=np.ones(5), trials=9,
              key=jax.random.key(2), dtype=dtype)
    host = fa.simulate(p, algorithm=fa.algorithms.FedProx(mu=0.3), **kw)
    prox = eqx.tree_at(lambda a: a.mu, fa.algorithms.FedProx(mu=0.3), jnp.asarray(0.3))
    assert isinstance(prox.mu, jax.Array)
    device = fa.simulate(p, algorithm=prox, **kw)
    assert np.array_equal(host.x_final, device.x_final)
    assert not np.array_equal(host.x_final, fa.simulate(p, **kw).x_final)  # mu is read
