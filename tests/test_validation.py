"""Every bad input raises ValueError naming the parameter, before anything is compiled.

"Before anything is compiled" is checked twice: JAX reports no tracing-for-jit and no backend
compilation while the call runs, and the run's progress callback (which hears of every segment
the simulator runs, compiled before or not) is never called. A schedule is a user function
that has to be evaluated to be checked, so for bad schedules only the second check applies.
"""

import contextlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fedjax_abc as fa

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
