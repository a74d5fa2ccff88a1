"""Theorem 2's bound and Theorem 3's decay against fa.simulate (small, fixed seeds); the
checks' default records and their one-line errors."""

import json

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import theory as th

THEOREM2_KEYS = {
    "check", "problem", "n", "num_sampled", "local_steps", "rounds", "trials", "record_every",
    "x0", "L", "C", "D", "sigma_f_star", "delta_f", "sampling_factor", "stepsize",
    "stepsize_limit", "bound", "bound_terms", "leading_terms", "observed", "observed_stderr",
    "observed_ci95", "argmin_round", "holds", "holds_upper95", "ratio", "final_grad_norm_sq",
    "diverged_trials", "diverged_from_round", "seconds", "late_mean", "late_stderr", "late_slope",
    "late_slope_stderr",
}
THEOREM3_KEYS = {
    "check", "problem", "n", "num_sampled", "local_steps", "rounds", "trials", "record_every",
    "x0", "L", "C", "alpha0", "p", "stepsize_limit", "schedule_holds", "recorded_rounds",
    "max_grad_norm", "mean_grad_norm", "mean_grad_norm_stderr", "initial_max_grad_norm",
    "final_max_grad_norm", "final_mean_grad_norm", "final_mean_grad_norm_stderr",
    "decay_slope_mean", "decay_slope_max", "diverged_trials", "diverged_from_round", "seconds",
}


@pytest.fixture(scope="module")
def huber():
    return fa.problems.huber_offsets(jax.random.key(0), 10, 20.0)


def test_theorem2_bound_holds_small(huber):
    cfg = dict(num_sampled=2, local_steps=5, rounds=100, trials=32, key=jax.random.key(1))
    r = th.theorem2_check(huber, L=1.0, C=1.0, D=0.0, **cfg)
    assert set(r) == THEOREM2_KEYS
    assert set(r["bound_terms"]) == {"initial_gap", "noise", "sampling", "drift"}
    assert set(r["leading_terms"]) == set(th.Theorem2LeadingTerms._fields)
    json.dumps(r, allow_nan=False)  # plain JSON
    # the stepsize is (22) for this problem, start and horizon, and satisfies (20)
    alpha = th.theorem2_stepsize(1.0, 1.0, 0.0, th.sigma_f_star(huber), r["delta_f"], 10, 2, 5, 100)
    assert r["stepsize"] == alpha <= r["stepsize_limit"]
    assert r["delta_f"] == pytest.approx(float(huber.gap(huber.x_star + 10.0)), rel=1e-14)
    assert r["bound"] == pytest.approx(th.theorem2_bound(alpha, 1.0, 1.0, 0.0, r["sigma_f_star"],
                                                         r["delta_f"], 10, 2, 5, 100), rel=1e-14)
    # the observed minimum is that of an independent simulate run with the same key
    res = fa.simulate(huber, num_sampled=2, local_steps=5, stepsize=alpha, rounds=100,
                      x0=huber.x_star + 10.0, trials=32, key=jax.random.key(1), record_every=1,
                      record_x=False)
    means = res.grad_norm_sq[:, :-1].mean(axis=0)
    assert r["observed"] == pytest.approx(means.min(), rel=1e-12)
    assert r["argmin_round"] == int(np.argmin(means))
    lo, hi = r["observed_ci95"]
    assert lo <= r["observed"] <= hi
    assert r["holds"] and r["holds_upper95"] and r["ratio"] > 1.0


def test_theorem2_bound_holds_oracle26():
    p = fa.problems.softplus_huber()
    r = th.theorem2_check(p, L=1.0, C=1.0, D=0.5, num_sampled=4, local_steps=2, rounds=50,
                          trials=16, key=jax.random.key(2))
    assert r["holds"] and r["ratio"] > 1.0
    assert r["sampling_factor"] == pytest.approx(12 / 15)


def test_theorem3_gradient_decays():
    p = fa.problems.huber_offsets(offsets=[0.0, 0.0, 0.3, 0.5, 0.9])
    r = th.theorem3_check(p, L=1.0, C=1.0, num_sampled=2, local_steps=5, rounds=1000, trials=16,
                          key=jax.random.key(3), alpha0=None, p=0.6, x0=p.x_star + 1.0,
                          record_every=10)
    assert set(r) == THEOREM3_KEYS
    json.dumps(r, allow_nan=False)
    assert r["alpha0"] == r["stepsize_limit"] == 1 / 80 and r["schedule_holds"]
    assert len(r["max_grad_norm"]) == len(r["recorded_rounds"]) == 101
    assert r["final_max_grad_norm"] < 0.2 * r["initial_max_grad_norm"]
    assert r["decay_slope_mean"] < 0 and r["decay_slope_max"] < 0
    assert r["final_mean_grad_norm"] <= r["final_max_grad_norm"]


def test_theorem3_rejects_large_alpha0(huber):
    with pytest.raises(ValueError, match="exceeds"):
        th.theorem3_check(huber, L=1.0, C=1.0, num_sampled=2, local_steps=5, rounds=10,
                          trials=2, key=jax.random.key(0), alpha0=1.0, p=1.0)


@pytest.mark.slow
@pytest.mark.parametrize("d_max, S", [(20.0, 4), (200.0, 4), (200.0, 40)])
def test_theorem2_bound_holds_paper_scale(d_max, S):
    # Section IV-B's problem (27) at n = 40, Q = 10, with T = 2000 rounds and 200 trials
    p = fa.problems.huber_offsets(jax.random.key(0), 40, d_max)
    r = th.theorem2_check(p, L=1.0, C=1.0, D=0.0, num_sampled=S, local_steps=10, rounds=2000,
                          trials=200, key=jax.random.key(4))
    assert r["holds_upper95"] and r["ratio"] > 1.0


@pytest.mark.slow
def test_theorem3_paper_problem_decays():
    p = fa.problems.softplus_huber()
    r = th.theorem3_check(p, L=1.0, C=1.0, num_sampled=4, local_steps=5, rounds=20_000,
                          trials=100, key=jax.random.key(5), alpha0=None, p=0.6,
                          record_every=100, x0=p.x_star + 1.0)
    # measured: 0.088 -> 0.044, log-log slope about -0.2 (the softplus tails are flat)
    assert r["final_max_grad_norm"] < 0.75 * r["initial_max_grad_norm"]
    assert r["decay_slope_mean"] < -0.1 and r["decay_slope_max"] < -0.1


# ------------------------------------------- the checks' default records and their errors


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)


def test_theorem2_check_takes_the_default_records():
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)
    r = fa.theory.theorem2_check(p, L=1.0, C=1.0, D=0.0, num_sampled=2, local_steps=2,
                                 rounds=1009, trials=2, key=jax.random.key(1),
                                 record_every=None, mode="gather")
    assert r["record_every"] == 2 and r["argmin_round"] % 2 == 0


def test_theory_checks_refuse_a_string_for_a_number(problem):
    with pytest.raises(ValueError, match=r"p must be a number, got '0\.6'"):
        fa.theory.theorem3_check(problem, L=1.0, C=1.0, num_sampled=2, local_steps=2, rounds=8,
                                 trials=2, key=jax.random.key(0), alpha0=None, p="0.6")
