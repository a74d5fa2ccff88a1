"""Negative controls (fedjax_abc.repro.controls): the theory checks can fail.

For each of Lemmas 4-8 the true constants hold, nearly tight, and each wrong input fails by
many standard errors; Theorem 2's bound (21) holds with the true constants and fails with
D = 0, a 50x too small L, sigma_f* = 0 or C = 0; Theorem 3's schedule check accepts
alpha_0 (t0/(t + t0))^0.6 and rejects a constant, t^-0.4, t^-1.5 and a too-large alpha_0.
All of it is computed once (one key) and shared by the tests.
"""

import doctest
import json

import jax
import numpy as np
import pytest

from fedjax_abc.repro import controls


@pytest.fixture(scope="module")
def doc():
    return controls.run(jax.random.key(0))


def rows_of(doc, lemma):
    return [r for r in doc["lemmas"] if r["lemma"] == lemma]


@pytest.mark.parametrize("lemma", [4, 5, 6, 7, 8])
def test_lemma_correct_holds_and_wrong_fails(doc, lemma):
    rows = rows_of(doc, lemma)
    correct = [r for r in rows if r["input"] == "correct"]
    wrong = [r for r in rows if r["input"] != "correct"]
    assert correct and wrong
    for r in correct:
        assert r["holds"] and r["stepsize_ok"] and r["ratio"] >= 1, r
    for r in wrong:
        assert not r["holds"] and r["z"] is not None and r["z"] > 10, r
    assert all(r["as_expected"] for r in rows)
    assert all(r["equation"] == controls.EQUATION[lemma] for r in rows)


def test_lemma_slack_is_small_where_the_bound_allows(doc):
    """The slack left is the proofs' own factors: 2 in (15), (16), (18), (19) (from
    |a + b|^2 <= 2|a|^2 + 2|b|^2 and f_i(y) - f_i* <= 2(f_i(x) - f_i*) + L|y - x|^2), and
    4Q/(Q - 1) in (17) on pure noise."""
    noise, mult, weak = (c["case"] for c in controls._lemma_cases()[:3])
    slack = {(r["lemma"], r["case"]): r["ratio"] for r in doc["lemmas"] if r["input"] == "correct"}
    assert slack[(5, noise)] == pytest.approx(2.0, rel=1e-9)  # lhs = rhs / 2 in every replicate
    assert 1.9 < slack[(4, noise)] < 2.2 and 1.9 < slack[(4, mult)] < 2.1
    assert 2.0 < slack[(7, weak)] < 2.1 and 2.0 < slack[(8, noise)] < 2.4
    assert 5.0 < slack[(6, noise)] < 5.6  # 4Q/(Q - 1) = 5.33 at Q = 4


def test_wrong_inputs_cover_L_C_D_and_stepsize(doc):
    kinds = {r["input"].split(" =")[0] for r in doc["lemmas"] if not r["expected"]}
    assert kinds == {"L", "C", "D", "alpha"}
    big = [r for r in doc["lemmas"] if r["input"].startswith("alpha")]
    assert big and all(not r["stepsize_ok"] and not r["holds"] for r in big)


def test_theorem2_correct_holds_and_wrong_fails(doc):
    rows = doc["theorem2"]
    assert [r["input"] for r in rows] == ["correct", "D = 0", "L = 0.02",
                                         "correct", "sigma_f_star = 0", "C = 0"]
    for r in rows:
        assert r["stepsize_ok"], r  # every claim's own limit (20) allows the stepsize
        if r["input"] == "correct":
            assert r["holds"] and r["ratio"] > 1
        else:
            assert not r["holds"] and r["z"] > 5 and r["ratio"] < 1, r
    assert all(r["as_expected"] for r in rows)


def test_theorem3_schedules(doc):
    got = {r["case"]: r["holds"] for r in doc["theorem3"]}
    assert got == {"alpha_0 (t0/(t + t0))^0.6, t0 = 100": True, "constant alpha_0": False,
                   "alpha_0/(t + 1)^0.4": False, "alpha_0/(t + 1)^1.5": False,
                   "2 alpha_0/(t + 1)^0.6": False}
    by = {r["case"]: r for r in doc["theorem3"]}
    assert not by["constant alpha_0"]["sum_sq_converges"]
    assert not by["alpha_0/(t + 1)^0.4"]["sum_sq_converges"]
    assert not by["alpha_0/(t + 1)^1.5"]["sum_diverges"]
    assert not by["2 alpha_0/(t + 1)^0.6"]["stepsize_ok"]


def test_run_is_strict_json_and_all_as_expected(doc):
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text)["all_as_expected"] is True
    assert doc["cannot_fail"] == list(controls.CANNOT_FAIL)


def test_control_lines_render_a_row_per_control(doc):
    lines = controls.control_lines(doc)
    assert lines[0].startswith("**Negative controls.**")
    table = [line for line in lines if line.startswith("| ") and not line.startswith(("| check", "| ---"))]
    n = len(doc["lemmas"]) + len(doc["theorem2"]) + len(doc["theorem3"])
    assert len(table) == n
    assert all(line.count("|") == 7 for line in table)
    assert sum("| fails |" in line or "| rejected |" in line for line in table) == \
        sum(not r["expected"] for k in ("lemmas", "theorem2", "theorem3") for r in doc[k])
    assert lines[-1].startswith("Every control behaves as it should")
    assert "(unexpected)" not in "\n".join(lines)


def test_control_lines_report_a_surprise(doc):
    bad = {**doc, "lemmas": [dict(doc["lemmas"][0], holds=False, as_expected=False)]}
    lines = controls.control_lines(bad)
    assert "(unexpected)" in lines[4] and lines[-1].startswith("Not every control")


def test_quadratic_closed_forms():
    c = np.array([[0.0, 1.0], [2.0, -1.0], [4.0, 0.0]])
    p = controls.quadratic(c, C=1.0, D=0.5)
    np.testing.assert_allclose(np.asarray(p.x_star), [2.0, 0.0])
    assert float(p.f_star) == pytest.approx(np.mean(0.5 * np.sum((c - [2.0, 0.0]) ** 2, 1)))
    assert float(p.gap(p.x_star)) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("call,match", [
    (lambda: controls.run("key"), r"key must be a JAX PRNG key"),
    (lambda: controls.control_lines({"lemmas": []}), r"doc needs 'lemmas', 'theorem2', 'theorem3'"),
    (lambda: controls.quadratic(np.zeros(3), 0.0, 1.0), r"centres must have shape \(n >= 2, d\)"),
    (lambda: controls.theorem2_comparison(jax.random.key(0), controls.quadratic(np.zeros((2, 1)), 0, 1),
                                          [1.0], stepsize=0.1, num_sampled=2, local_steps=1, rounds=5,
                                          trials=1, claims={"c": {}}), r"trials \(1\) must be"),
    (lambda: controls.theorem2_comparison(jax.random.key(0), controls.quadratic(np.zeros((2, 1)), 0, 1),
                                          [1.0], stepsize=0.1, num_sampled=2, local_steps=1, rounds=5,
                                          trials=8, claims={}), r"claims must name"),
])
def test_errors_are_one_line(call, match):
    with pytest.raises(ValueError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_docstring_examples():
    failures, tried = doctest.testmod(controls, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_controls_do_not_depend_on_the_key(seed):
    doc = controls.run(jax.random.key(seed))
    assert doc["all_as_expected"], [r for k in ("lemmas", "theorem2") for r in doc[k]
                                    if not r["as_expected"]]


def test_a_factor_two_error_is_what_the_lemma_checks_cannot_see():
    """CANNOT_FAIL's last entry: with L, C or D halved every lemma check still holds on
    every case (the slacks are about 2), while rhs/lhs drops to about 1 where the halved
    constant carries the bound; the wrong rows of the controls are 5x or more off."""
    rows = controls.factor2_errors(jax.random.key(0))
    assert {r["input"].split(" =")[0] for r in rows} == set(controls.HALVED)
    assert all(r["holds"] for r in rows), [r for r in rows if not r["holds"]]
    assert min(r["ratio"] for r in rows) > 0.95
    tight = [r for r in rows if r["lemma"] == 4 and r["ratio"] < 1.1]
    assert tight  # (15) is then nearly tight: a factor 2 is at the edge, not past it
    assert any("factor-2" in c for c in controls.CANNOT_FAIL)
