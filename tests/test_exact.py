"""Noise-free runs against hand computations and closed forms; S = n is full participation.

With ``oracle=fa.ExactOracle()`` Algorithm 1 is deterministic under full participation, so one
round can be written out by hand. Huber clients in the quadratic zone contract towards their
offset by the factor (1 - alpha) per step; in the linear zone they move by alpha per step.
"""

import math

import jax
import numpy as np
import optax
import pytest

import fedjax_abc as fa
import reference_numpy as ref

# Three Huber clients f_i(x) = Huber(x - d_i), d = (0, 3, -0.3); x0 = 0.5, alpha = 1/2, Q = 2.
#   client 1: z = 0.5  -> 0.25 -> 0.125 (quadratic zone, z halves): x^2 = 1/8
#   client 2: z = -2.5 -> -2   -> -1.5  (linear zone, x grows by 1/2 per step): x^2 = 3/2
#   client 3: z = 0.8  -> 0.4  -> 0.2   : x^2 = -0.3 + 0.2 = -1/10
#   x_1 = (1/8 + 3/2 - 1/10) / 3 = 61/120.
# Second round from 61/120: client 1 -> 61/480; client 2 -> 61/120 + 1 = 181/120;
#   client 3: z = 97/120 -> 97/480, x = -144/480 + 97/480 = -47/480;
#   x_2 = (61 + 724 - 47) / 480 / 3 = 246/480 = 0.5125.
OFFSETS = [0.0, 3.0, -0.3]
LOCAL_MODELS_ROUND1 = {0: 1 / 8, 1: 3 / 2, 2: -1 / 10}


def three_hubers():
    return fa.problems.huber_offsets(offsets=OFFSETS)


def test_one_round_by_hand():
    p = three_hubers()
    res = fa.simulate(p, local_steps=2, stepsize=0.5, rounds=2, x0=0.5, trials=2,
                      key=jax.random.key(0), record_every=1, oracle=fa.ExactOracle())
    np.testing.assert_allclose(res.x[:, :, 0], [[0.5, 61 / 120, 0.5125]] * 2, rtol=1e-15, atol=1e-16)
    f_hand = lambda x: (0.5 * x**2 + (abs(x - 3) - 0.5) + 0.5 * (x + 0.3) ** 2) / 3  # noqa: E731
    np.testing.assert_allclose(res.gap[0], [f_hand(x) - float(p.f_star) for x in (0.5, 61 / 120, 0.5125)],
                               rtol=1e-13)


def test_local_run_by_hand():
    """fa.local_run of each client (eq. 5) with the exact oracle gives the hand-computed x^Q."""
    p = three_hubers()
    oracle = fa.ExactOracle()
    noise = oracle.noise(jax.random.key(3), (2, 1), jax.numpy.float64)  # Q = 2 steps, d = 1
    for i, expected in LOCAL_MODELS_ROUND1.items():
        xq = fa.local_run(p, oracle, i, jax.numpy.asarray([0.5]), 0.5, noise)
        np.testing.assert_allclose(np.asarray(xq), [expected], rtol=1e-15, atol=1e-16)


def test_partial_participation_one_round_is_a_subset_average():
    """S = 2 of 3, exact oracle: x_1 is the average of one of the 3 pairs, each w.p. 1/3."""
    p = three_hubers()
    trials = 600
    res = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.5, rounds=1, x0=0.5,
                      trials=trials, key=jax.random.key(1), oracle=fa.ExactOracle())
    m = LOCAL_MODELS_ROUND1
    pairs = np.array([(m[0] + m[1]) / 2, (m[0] + m[2]) / 2, (m[1] + m[2]) / 2])
    x1 = res.x_final[:, 0]
    which = np.argmin(np.abs(x1[:, None] - pairs[None, :]), axis=1)
    np.testing.assert_allclose(x1, pairs[which], rtol=1e-14, atol=1e-15)
    freq = np.bincount(which, minlength=3) / trials
    se = math.sqrt((1 / 3) * (2 / 3) / trials)
    assert np.all(np.abs(freq - 1 / 3) <= 5 * se), freq


def test_quadratic_round_closed_form():
    """d = 3 quadratics, exact oracle: x_i^Q = c_i + (1 - alpha a_i)^Q (x_t - c_i) per coordinate."""
    p = fa.problems.quadratics(jax.random.key(4), n=5, d=3)
    a, c = (np.asarray(v) for v in p.params)
    x0 = np.array([1.0, -2.0, 0.5])
    alpha, Q = 0.3, 4
    res = fa.simulate(p, local_steps=Q, stepsize=alpha, rounds=1, x0=x0, trials=1,
                      key=jax.random.key(0), oracle=fa.ExactOracle())
    expected = np.mean(c + (1 - alpha * a) ** Q * (x0 - c), axis=0)
    np.testing.assert_allclose(res.x_final[0], expected, rtol=1e-13, atol=1e-15)


def test_many_rounds_match_numpy_exact_gradients():
    """Full participation, exact oracle, varying stepsizes: the reference's path to ~1e-12."""
    p = fa.problems.softplus_huber()
    T, Q = 30, 3
    alphas = 0.2 / np.sqrt(1.0 + np.arange(T))
    x0 = 4.0
    res = fa.simulate(p, local_steps=Q, stepsize=alphas, rounds=T, x0=x0, trials=1,
                      key=jax.random.key(0), oracle=fa.ExactOracle())
    x_ref = ref.fedavg(ref.ExactGradients(ref.SoftplusHuber(16)), x0, S=16, Q=Q, stepsizes=alphas,
                       trials=1, rng=np.random.default_rng(0))
    np.testing.assert_allclose(res.x_final, x_ref, rtol=1e-12)
    assert abs(res.x_final[0, 0] - x0) > 1.0  # it moved


def test_q1_full_participation_is_gradient_descent():
    """Q = 1, S = n, exact oracle: x_{t+1} = x_t - alpha f'(x_t) (f of eq. 27)."""
    p = three_hubers()
    alpha, T = 0.7, 12
    res = fa.simulate(p, local_steps=1, stepsize=alpha, rounds=T, x0=5.0, trials=1,
                      key=jax.random.key(0), record_every=1, oracle=fa.ExactOracle())
    prob = ref.HuberOffsets(OFFSETS)
    x = 5.0
    path = [x]
    for _ in range(T):
        x = x - alpha * prob.fprime(x)
        path.append(x)
    np.testing.assert_allclose(res.x[0, :, 0], path, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_all_sampled_equals_full_participation(mode):
    """num_sampled = n and sampler = FullParticipation() give the same numbers (stochastic oracle)."""
    p = fa.problems.huber_offsets(jax.random.key(2), n=6, d_max=10.0)
    kw = dict(local_steps=3, stepsize=0.05, rounds=20, x0=float(p.x_star[0]) + 4, trials=5,
              key=jax.random.key(9), mode=mode)
    a = fa.simulate(p, num_sampled=6, **kw)
    b = fa.simulate(p, sampler=fa.FullParticipation(), **kw)
    c = fa.simulate(p, **kw)  # no sampler, no num_sampled: full participation
    np.testing.assert_array_equal(a.x_final, b.x_final)
    np.testing.assert_array_equal(a.gap, b.gap)
    np.testing.assert_array_equal(c.x_final, b.x_final)
    assert np.unique(a.x_final).size == 5  # trials differ: the noise is really there


# ------------------------------------------------------------------------- schedules


SCHEDULE_T = 24


def _run_with(stepsize):
    p = three_hubers()
    return fa.simulate(p, num_sampled=2, local_steps=2, stepsize=stepsize, rounds=SCHEDULE_T,
                       x0=4.0, trials=4, key=jax.random.key(12), record_every=SCHEDULE_T)


@pytest.mark.parametrize("name", ["optax_polynomial", "optax_exponential", "jax_lambda", "python_math"])
def test_schedule_equals_explicit_array(name):
    """A schedule t -> alpha_t gives the result of the array (alpha_0, ..., alpha_{T-1})."""
    t = np.arange(SCHEDULE_T, dtype=np.float64)
    if name == "optax_polynomial":
        schedule = optax.polynomial_schedule(init_value=0.3, end_value=0.01, power=2, transition_steps=16)
        values = (0.3 - 0.01) * (1 - np.minimum(t, 16) / 16) ** 2 + 0.01
    elif name == "optax_exponential":
        schedule = optax.exponential_decay(init_value=0.3, transition_steps=5, decay_rate=0.5)
        values = 0.3 * 0.5 ** (t / 5)
    elif name == "jax_lambda":
        schedule = lambda s: 0.3 / (1.0 + s)  # noqa: E731
        values = 0.3 / (1.0 + t)
    else:
        schedule = lambda s: 0.3 / math.sqrt(1.0 + s)  # noqa: E731  (Python floats only)
        values = 0.3 / np.sqrt(1.0 + t)
    np.testing.assert_allclose(fa.stepsize_array(schedule, SCHEDULE_T), values, rtol=1e-14)
    a = _run_with(schedule)
    b = _run_with(values)
    np.testing.assert_allclose(a.x_final, b.x_final, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.gap, b.gap, rtol=1e-12, atol=1e-14)


def test_schedule_matters():
    """Different stepsizes give different results (the schedule comparison is not vacuous)."""
    a = _run_with(0.3)
    b = _run_with(0.1)
    assert np.all(np.abs(a.x_final - b.x_final) > 1e-6)
