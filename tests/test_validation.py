"""Every bad input raises ValueError naming the parameter, before anything is compiled.

"Before anything is compiled" is checked twice: JAX reports no tracing-for-jit and no backend
compilation while the call runs, and the run's progress callback (which hears of every segment
the simulator runs, compiled before or not) is never called. A schedule is a user function
that has to be evaluated to be checked, so for bad schedules only the second check applies.

Custom samplers and oracles are checked before a run compiles (``check_components``): shapes
and dtypes by abstract evaluation, a sampler's values on a few dozen word sets; every error
names the class, and the built-in samplers and oracles pass. Problems and components of the
wrong shapes, components drawing from NumPy's or Python's random generators, and bad
arguments of ``simulate`` and of the components are refused in one line.
"""

import contextlib
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fedjax_abc as fa
from fedjax_abc._problems._checks import check_components
from small_run import SETTINGS as KW, small_problem, small_run, small_run_args

N = 13  # a client count no other test file uses: nothing of this shape is compiled anywhere
KEY = jax.random.key(0)  # made here, outside the blocks that must not compile
BATCH_OF_KEYS = jax.random.split(KEY, 3)
RAN = []  # the segments the simulator ran, as its progress callback heard of them


def heard(done, total, secs):
    RAN.append(done)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(KEY, n=N, d_max=10.0)


def good(p, **changes):
    kw = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=6, x0=p.x_star + 1.0, trials=2,
              key=KEY, record_every=3, progress=heard)
    kw.update(changes)
    return kw


@contextlib.contextmanager
def nothing_compiled(monkeypatch, allow_eager_ops=False):
    """Fails if JAX traces or compiles anything, or if the simulator runs a segment."""
    events = []
    RAN.clear()

    def listener(name, *args, **kwargs):
        if name in ("/jax/core/compile/backend_compile_duration", "/jax/core/compile/jaxpr_trace_duration"):
            events.append(name)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert RAN == [], f"the simulator ran before rejecting the input: {RAN}"
    if not allow_eager_ops:
        assert events == [], f"JAX compiled before rejecting the input: {events}"


def rejects(monkeypatch, match, fn, allow_eager_ops=False):
    with nothing_compiled(monkeypatch, allow_eager_ops):
        with pytest.raises(ValueError, match=match):
            fn()


def test_the_good_call_works(problem):
    RAN.clear()
    res = fa.simulate(problem, **good(problem))
    assert res.gap.shape == (2, 3)
    assert RAN, "the progress callback did not hear of the run: the check above sees nothing"


@pytest.mark.parametrize("S", [0, -1, N + 1, 100])
def test_num_sampled_out_of_range(problem, monkeypatch, S):
    rejects(monkeypatch, r"num_sampled", lambda: fa.simulate(problem, **good(problem, num_sampled=S)))


@pytest.mark.parametrize("S", [2.5, "3", True])
def test_num_sampled_not_an_integer(problem, monkeypatch, S):
    rejects(monkeypatch, r"num_sampled", lambda: fa.simulate(problem, **good(problem, num_sampled=S)))


@pytest.mark.parametrize("make", [lambda: fa.UniformWithoutReplacement(0),
                                  lambda: fa.UniformWithoutReplacement(N + 1),
                                  lambda: fa.WithReplacement(0)])
def test_sampler_size_out_of_range(problem, monkeypatch, make):
    rejects(monkeypatch, r"num_sampled",
            lambda: fa.simulate(problem, **good(problem, num_sampled=None, sampler=make())))


@pytest.mark.parametrize("make", [lambda: fa.UniformWithoutReplacement(2.5),
                                  lambda: fa.WithReplacement(1.5)])
def test_sampler_size_not_an_integer(problem, monkeypatch, make):
    rejects(monkeypatch, r"num_sampled",
            lambda: fa.simulate(problem, **good(problem, num_sampled=None, sampler=make())))


def test_num_sampled_and_sampler_together(problem, monkeypatch):
    rejects(monkeypatch, r"num_sampled",
            lambda: fa.simulate(problem, **good(problem, sampler=fa.UniformWithoutReplacement(3))))


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, float("nan")])
def test_bernoulli_probability(p):
    with pytest.raises(ValueError, match=r"p="):
        fa.Bernoulli(p)


@pytest.mark.parametrize("name,value,match", [
    ("local_steps", 0, r"local_steps"),
    ("local_steps", -3, r"local_steps"),
    ("local_steps", 2.5, r"local_steps"),
    ("rounds", 0, r"rounds"),
    ("rounds", -1, r"rounds"),
    ("rounds", 6.5, r"rounds"),
    ("trials", 0, r"trials"),
    ("trials", -2, r"trials"),
    ("trials", 1.5, r"trials"),
    ("record_every", 0, r"record_every"),
    ("record_every", -3, r"record_every"),
    ("record_every", 4, r"record_every"),  # does not divide T = 6
    ("record_every", 12, r"record_every"),
    ("record_every", 1.5, r"record_every"),
    ("trial_chunk", 0, r"trial_chunk"),
    ("mode", "scatter", r"mode"),
    ("mode", None, r"mode"),
    ("dtype", "float16", r"dtype"),
    ("dtype", "bfloat16", r"dtype"),
    ("dtype", "int32", r"dtype"),
])
def test_bad_integer_or_choice(problem, monkeypatch, name, value, match):
    rejects(monkeypatch, match, lambda: fa.simulate(problem, **good(problem, **{name: value})))


@pytest.mark.parametrize("stepsize", [0.0, -0.1, float("nan"), float("inf"), -float("inf")])
def test_bad_stepsize_number(problem, monkeypatch, stepsize):
    rejects(monkeypatch, r"stepsize", lambda: fa.simulate(problem, **good(problem, stepsize=stepsize)))


@pytest.mark.parametrize("stepsize", [
    np.array([0.1, 0.1, 0.0, 0.1, 0.1, 0.1]),
    np.array([0.1, 0.1, 0.1, 0.1, 0.1, -1e-9]),
    np.array([0.1, np.nan, 0.1, 0.1, 0.1, 0.1]),
    np.array([0.1, 0.1, 0.1, np.inf, 0.1, 0.1]),
    np.full(5, 0.1),  # one value short of T = 6
    np.full(7, 0.1),
    np.full((6, 1), 0.1),
])
def test_bad_stepsize_array(problem, monkeypatch, stepsize):
    rejects(monkeypatch, r"stepsize", lambda: fa.simulate(problem, **good(problem, stepsize=stepsize)))


@pytest.mark.parametrize("schedule", [
    lambda t: 0.1 - 0.02 * t,  # alpha_5 = 0 then negative
    lambda t: 0.1 / (t - 2.0) ** 2,  # alpha_2 = inf
    lambda t: -0.1,
    optax.linear_schedule(init_value=0.1, end_value=0.0, transition_steps=5),  # alpha_5 = 0
    lambda t: 0.1 if t < 3 else math.nan,  # Python-only schedule
])
def test_bad_stepsize_schedule(problem, monkeypatch, schedule):
    rejects(monkeypatch, r"stepsize", lambda: fa.simulate(problem, **good(problem, stepsize=schedule)),
            allow_eager_ops=True)


@pytest.mark.parametrize("x0", [
    np.zeros(2),
    np.zeros((3, 1)),  # trials = 2
    np.zeros((2, 2)),
    np.zeros((2, 1, 1)),
    [],
])
def test_x0_wrong_shape(problem, monkeypatch, x0):
    rejects(monkeypatch, r"x0", lambda: fa.simulate(problem, **good(problem, x0=x0)))


@pytest.mark.parametrize("x0", [np.nan, np.inf, -np.inf, np.array([[0.0], [np.nan]])])
def test_x0_not_finite(problem, monkeypatch, x0):
    rejects(monkeypatch, r"x0", lambda: fa.simulate(problem, **good(problem, x0=x0)))


@pytest.mark.parametrize("key", [
    0,
    None,
    jnp.zeros((2,), jnp.int32),
    jnp.zeros((3, 2), jnp.uint32),
    BATCH_OF_KEYS,  # a batch of keys, not one key
])
def test_bad_key(problem, monkeypatch, key):
    rejects(monkeypatch, r"key", lambda: fa.simulate(problem, **good(problem, key=key)))


def test_bad_problem_sampler_oracle(problem, monkeypatch):
    rejects(monkeypatch, r"problem", lambda: fa.simulate("huber", **good(problem)))
    rejects(monkeypatch, r"sampler",
            lambda: fa.simulate(problem, **good(problem, num_sampled=None, sampler="uniform")))
    rejects(monkeypatch, r"oracle", lambda: fa.simulate(problem, **good(problem, oracle="sign")))


# ------------------------------------------------------------------------------ problems


@pytest.mark.parametrize("d_max", [0.0, -5.0, float("nan"), float("inf")])
def test_huber_offsets_bad_dmax(monkeypatch, d_max):
    rejects(monkeypatch, r"d_max|Dmax", lambda: fa.problems.huber_offsets(KEY, n=5, d_max=d_max))


@pytest.mark.parametrize("n", [1, 0, -4, 2.5, True])
def test_huber_offsets_bad_n(monkeypatch, n):
    rejects(monkeypatch, r"\bn\b", lambda: fa.problems.huber_offsets(KEY, n=n, d_max=10.0))


def test_huber_offsets_bad_offsets():
    with pytest.raises(ValueError, match=r"offsets"):
        fa.problems.huber_offsets(offsets=[1.0])
    with pytest.raises(ValueError, match=r"offsets"):
        fa.problems.huber_offsets(offsets=[0.0, np.nan])


def test_huber_offsets_needs_a_key():
    with pytest.raises(ValueError, match=r"key"):
        fa.problems.huber_offsets(None, n=5, d_max=10.0)


@pytest.mark.parametrize("n", [1, 0, -2, 3.0, True])
def test_softplus_huber_bad_n(monkeypatch, n):
    rejects(monkeypatch, r"\bn\b", lambda: fa.problems.softplus_huber(n))


@pytest.mark.parametrize("kw,match", [
    (dict(n=0), r"\bn\b"),
    (dict(d=0), r"\bd\b"),
    (dict(curvature=(0.0, 1.0)), r"curvature"),
    (dict(curvature=(2.0, 1.0)), r"curvature"),
    (dict(spread=-1.0), r"spread"),
])
def test_quadratics_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        fa.problems.quadratics(KEY, **kw)


def test_gaussian_oracle_bad_constants():
    with pytest.raises(ValueError, match=r"C=-1"):
        fa.GaussianOracle(C=-1.0, D=0.0)
    with pytest.raises(ValueError, match=r"D=-0.5"):
        fa.GaussianOracle(C=1.0, D=-0.5)


def test_key_of_another_generator(problem, monkeypatch):
    """The simulator hashes with Threefry-2x32: a key of another generator is refused."""
    rbg = jax.random.key(0, impl="rbg")
    rejects(monkeypatch, r"threefry2x32", lambda: fa.simulate(problem, **good(problem, key=rbg)))


# --------------------------------------- custom components, checked before a run compiles


# check_components: shapes and dtypes by abstract evaluation; a sampler's values (indices in
# [0, n), finite weights >= 0) on a few dozen word sets. Every error names the class; the
# built-in samplers and oracles pass.
N_COMPONENTS = 11  # a client count of its own

PROBLEM = fa.problems.quadratics(jax.random.key(0), n=N_COMPONENTS, d=3)
PROBLEM_1D = fa.problems.huber_offsets(jax.random.key(0), n=N_COMPONENTS, d_max=10.0)


# ----------------------------------------------------------------------------- samplers


class ExtraSlot(fa.UniformWithoutReplacement):
    """Returns S + 1 indices for S slots."""

    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return jnp.concatenate([idx, idx[:1]]), w


class FloatIndices(fa.UniformWithoutReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx.astype(jnp.float32), w


class ShortWeights(fa.UniformWithoutReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx, w[:1]


class OffByOne(fa.WithReplacement):
    """floor(u (n + 1)): index n for the largest words."""

    def from_words(self, words, n):
        return (words // jnp.uint32(2 ** 32 // (n + 1))).astype(jnp.int32), jnp.ones(words.shape)


class NegativeIndex(fa.WithReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx - 1, w


class NegativeWeight(fa.WithReplacement):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx, jnp.where(words > 2 ** 31, -w, w)


class NanWeight(fa.Bernoulli):
    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx, w / (w - w)  # 0/0 and 1/0


BAD_SAMPLERS = [
    (ExtraSlot(3), r"ExtraSlot.from_words must return indices of shape \(num_slots=3,\)"),
    (FloatIndices(3), r"FloatIndices.from_words must return indices .* integer dtype, got float32"),
    (ShortWeights(3), r"ShortWeights.from_words must return real weights of shape \(num_slots=3,\)"),
    (OffByOne(3), rf"OffByOne.from_words returned client index 1[12] outside \[0, n={N_COMPONENTS}\)"),
    (NegativeIndex(3), rf"NegativeIndex.from_words returned client index -1 outside \[0, n={N_COMPONENTS}\)"),
    (NegativeWeight(3), r"NegativeWeight.from_words returned weight -1.0"),
    (NanWeight(0.5), r"NanWeight.from_words returned weight (nan|inf)"),
]


@pytest.mark.parametrize("sampler, match", BAD_SAMPLERS,
                         ids=[type(s).__name__ for s, _ in BAD_SAMPLERS])
def test_bad_sampler_is_named(sampler, match):
    with pytest.raises(ValueError, match=match) as info:
        check_components(PROBLEM, PROBLEM.oracle, sampler, 2, "float64")
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------ oracles


class NoStepAxis(fa.AbstractOracle):
    """Draws one (d,) vector for the whole round instead of (Q, d)."""

    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape[1:], dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class ScalarGradient(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, dtype)

    def gradient(self, problem, client, x, z):
        return jnp.sum(problem.local_grad(client, x) + z)


class RowGradient(fa.GaussianOracle):
    def gradient(self, problem, client, x, z):
        return super().gradient(problem, client, x, z)[None, :]


class Float64Gradient(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, jnp.float64)  # ignores the run's dtype

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class UntraceableNoise(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jnp.full(shape, float(jax.random.normal(key)), dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


BAD_ORACLES = [
    (NoStepAxis(), "float64", r"NoStepAxis.noise_from_words must return leaves with leading "
                              r"axis Q=2 .* got float64\[3\]"),
    (ScalarGradient(), "float64", r"ScalarGradient.gradient must return one step's gradient of "
                                  r"shape \(d=3,\), got float64\[\]"),
    (RowGradient(1.0, 0.0), "float32", r"RowGradient.gradient .* got float32\[1, 3\]"),
    (Float64Gradient(), "float32", r"Float64Gradient.gradient must keep the run's dtype float32"),
    (UntraceableNoise(), "float64", r"UntraceableNoise.noise_from_words raised "
                                    r"ConcretizationTypeError when traced"),
]


@pytest.mark.parametrize("oracle, dtype, match", BAD_ORACLES,
                         ids=[type(o).__name__ for o, _, _ in BAD_ORACLES])
def test_bad_oracle_is_named(oracle, dtype, match):
    with pytest.raises(ValueError, match=match) as info:
        check_components(PROBLEM, oracle, fa.UniformWithoutReplacement(3), 2, dtype)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------ built-ins pass


class PackedLaplace(fa.AbstractOracle):
    """A custom oracle keeping its round noise as words (leaves without the axis Q)."""

    def noise(self, key, shape, dtype):
        return jax.random.laplace(key, shape, dtype)

    def num_words(self, shape):
        return 2

    def noise_from_words(self, words, shape, dtype):
        return words

    def step_noise(self, noise, step, shape, dtype):
        key = jax.random.fold_in(jax.random.wrap_key_data(noise), step)
        return jax.random.laplace(key, shape[1:], dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


SAMPLERS = [fa.UniformWithoutReplacement(1), fa.UniformWithoutReplacement(4),
            fa.UniformWithoutReplacement(N_COMPONENTS), fa.WithReplacement(5), fa.Bernoulli(0.3),
            fa.FullParticipation()]
ORACLES = [fa.GaussianOracle(1.0, 0.5), fa.RademacherOracle(), fa.ExactOracle(), PackedLaplace()]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("Q", [1, 7, 40])
def test_builtins_pass(dtype, Q):
    for sampler in SAMPLERS:
        for oracle in ORACLES:
            check_components(PROBLEM, oracle, sampler, Q, dtype)
    check_components(PROBLEM_1D, PROBLEM_1D.oracle, fa.UniformWithoutReplacement(4), Q, dtype)


# ------------------------------------------------------------------- through simulate


def _kw(**changes):
    kw = dict(local_steps=2, stepsize=0.01, rounds=4, x0=np.asarray(PROBLEM.x_star) + 1.0,
              trials=2, key=jax.random.key(0), record_every=2)
    kw.update(changes)
    return kw


@pytest.mark.parametrize("changes, match", [
    (dict(sampler=OffByOne(3)), r"OffByOne.from_words returned client index"),
    (dict(sampler=ShortWeights(3)), r"ShortWeights.from_words must return real weights"),
    (dict(num_sampled=3, oracle=NoStepAxis()), r"NoStepAxis.noise_from_words"),
    (dict(num_sampled=3, oracle=Float64Gradient(), dtype="float32"), r"Float64Gradient"),
])
def test_simulate_rejects_before_the_run(changes, match):
    ran = []  # the progress callback hears of every segment run
    with pytest.raises(ValueError, match=match):
        fa.simulate(PROBLEM, **_kw(**changes), progress=lambda *a: ran.append(a))
    assert ran == []


def test_simulate_still_runs_custom_components():
    res = fa.simulate(PROBLEM, sampler=fa.WithReplacement(3), oracle=PackedLaplace(),
                      **_kw(dtype="float32"))
    assert res.gap.shape == (2, 3) and np.all(np.isfinite(res.gap))


# --------------------- problems and components of the wrong shapes, or drawing from NumPy


@pytest.fixture(scope="module")
def problem6():
    return small_problem()


class CommonNoise(fa.AbstractOracle):
    """Noise of shape (Q,) where (Q, d) is asked for: one draw for every coordinate."""

    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape[:1], dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class NumpyNoise(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jnp.asarray(np.random.normal(size=shape), dtype)  # once, at trace time

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class NumpyChoice(fa.AbstractStatelessSampler):
    distinct_slots = False
    num_sampled = 2

    def num_slots(self, n):
        return 2

    def from_words(self, words, n):
        idx = np.random.choice(n, 2, replace=False)  # once, at trace time
        return jnp.asarray(idx, jnp.int32), jnp.full((2,), n / 2)


class LocalGenerator(fa.AbstractStatelessSampler):
    distinct_slots = False
    num_sampled = 2

    def num_slots(self, n):
        return 2

    def from_words(self, words, n):
        rng = np.random.default_rng()  # made and drawn from once, at trace time
        return jnp.asarray(rng.choice(n, 2, replace=False), jnp.int32), jnp.full((2,), n / 2)


class HeldGenerator(fa.AbstractOracle):
    rng: np.random.Generator = eqx.field(static=True)

    def noise(self, key, shape, dtype):
        return jnp.asarray(self.rng.normal(size=shape), dtype)  # once, at trace time

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


def test_local_minima_of_the_wrong_length_are_refused(problem6):
    import dataclasses

    # refused when the Problem is made (the run's check is the same)
    with pytest.raises(ValueError, match=r"local_minima must have shape \(n=6,\) .*got \(5,\)"):
        small_run(dataclasses.replace(problem6, local_minima=problem6.local_minima[:-1]))
    with pytest.raises(ValueError, match=r"local_minima must have shape \(n=6,\)"):
        small_run(dataclasses.replace(problem6, local_minima=jnp.zeros(7)))
    ragged = dataclasses.replace(problem6, params=(problem6.params, jnp.zeros(4)))
    with pytest.raises(ValueError, match=r"params leaves have leading axes \[4, 6\]"):
        small_run(ragged)


def test_noise_that_broadcasts_to_the_model_is_refused():
    quad = fa.problems.quadratics(jax.random.key(0), n=4, d=3)
    with pytest.raises(ValueError, match=r"CommonNoise: a step's noise has shape \(\), which "
                                         r"broadcasts to the model's shape \(3,\)"):
        small_run(quad, oracle=CommonNoise())
    # the exact oracle's step noise is a scalar it never reads; d = 1 has nothing to broadcast
    assert small_run(quad, oracle=fa.ExactOracle()).trials == 3
    one = small_problem()
    assert one.dim == 1 and small_run(one, oracle=CommonNoise()).trials == 3


def test_numpy_global_draws_at_trace_time_are_refused(problem6):
    with pytest.raises(ValueError, match=r"NumpyNoise.noise_from_words draws from NumPy's or "
                                         r"Python's global random generator"):
        small_run(problem6, oracle=NumpyNoise())
    with pytest.raises(ValueError, match=r"NumpyChoice.from_words draws from NumPy's"):
        small_run(problem6, sampler=NumpyChoice())


def test_numpy_generators_at_trace_time_are_refused(problem6):
    with pytest.raises(ValueError, match=r"LocalGenerator.from_words makes a NumPy or Python "
                                         r"random generator \(np.random.default_rng, ...\) when "
                                         r"traced: the draw is made once"):
        small_run(problem6, sampler=LocalGenerator())
    with pytest.raises(ValueError, match=r"HeldGenerator.rng is a NumPy or Python random "
                                         r"generator: drawn from when traced"):
        small_run(problem6, oracle=HeldGenerator(np.random.default_rng(0)))
    # the names are put back: NumPy's generators work as before outside the check
    assert np.random.default_rng(0).integers(10) == np.random.default_rng(0).integers(10)


# --------------------------------------- bad arguments of the public surface, in one line


@pytest.mark.parametrize("kw, match", [
    (dict(stepsize="0.1"), r"stepsize must be a number, an array of T values or a schedule "
                           r"t -> alpha_t, got '0\.1'"),
    (dict(stepsize=0.05 + 1j), r"stepsize must be a number, .*got \(0\.05\+1j\)"),
    (dict(stepsize=lambda t: "a"), r"stepsize schedule t -> alpha_t cannot be evaluated on "
                                   r"t = 0, \.\.\., 7: ValueError: could not convert"),
    (dict(stepsize=lambda t, u: 0.1), r"cannot be evaluated on t = 0, \.\.\., 7: TypeError"),
    (dict(x0="zero"), r"x0 must be an array of real numbers, got 'zero'"),
    (dict(x0=[[1.0], [1.0, 2.0]]), r"x0 must be an array of real numbers"),
    (dict(x0=np.array([1 + 1j])), r"x0 must be an array of real numbers"),
    (dict(progress="yes"), r"progress must be True, False, a callback"),
    (dict(progress=1), r"progress must be True, False, a callback"),
    (dict(devices=["cpu"]), r"devices must be JAX devices \(e\.g\. jax\.devices\(\)\), got 'cpu'"),
    (dict(devices=jax.devices()[0]), r"devices must be a list of JAX devices"),
])
def test_simulate_refuses_bad_arguments_in_one_line(problem6, kw, match):
    with pytest.raises(ValueError, match=match) as err:
        fa.simulate(problem6, **small_run_args(problem6, **kw))
    assert "\n" not in str(err.value)
    # the sweep checks its points with the same function
    if "stepsize" in kw:
        with pytest.raises(ValueError, match=match):
            fa.sweep(problem6, grid={"stepsize": [kw["stepsize"]]},
                     **{k: v for k, v in small_run_args(problem6).items() if k != "stepsize"})


@pytest.mark.parametrize("fn, error, match", [
    (lambda: fa.stepsize_array(0.1, 0), ValueError, r"rounds \(T\) must be an integer >= 1, got 0"),
    (lambda: fa.stepsize_array(0.1, "3"), ValueError, r"rounds \(T\) must be an integer >= 1, got '3'"),
    (lambda: fa.summarize("abc"), ValueError, r"summarize needs an array of numbers"),
    (lambda: fa.summarize(np.zeros((3, 3)), axis=5), ValueError, r"axis \(5\) must be an axis "
                                                                 r"of the 2-D values"),
    (lambda: fa.GaussianOracle(C="1"), ValueError, r"GaussianOracle needs C >= 0 and D >= 0, "
                                                   r"got C='1'.*C must be a number"),
    (lambda: fa.GaussianOracle(C=[1.0, 2.0]), ValueError, r"C must be a number"),
    (lambda: fa.GaussianOracle(D=None), ValueError, r"D must be a number, got None"),
    (lambda: fa.RademacherOracle(magnitude=3), ValueError, r"magnitude must be a function"),
])
def test_components_refuse_bad_arguments(fn, error, match):
    with pytest.raises(error, match=match):
        fn()
