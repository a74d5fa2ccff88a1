"""make_problem never returns a wrong f*: it raises a one-line ValueError instead.

- a numerical minimiser on the edge of ``search_box`` (unbounded below, or the minimum
  outside the box);
- given f_i*, f*, x* that contradict the loss (f(x*) != f*, or a point with f below a given
  f* or f_i below a given f_i*), not finite, or of the wrong shape;
- a loss that does not trace to a floating scalar.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa

ORACLE = fa.ExactOracle()
TWO = jnp.array([[0.0], [2.0]])  # f_i = (x - c_i)^2 / 2, c = 0, 2: f_i* = 0, x* = 1, f* = 1/2


def half_square(c, x):
    return 0.5 * jnp.sum((x - c) ** 2)


def _rejects(match, **kw):
    args = dict(loss=half_square, params=TWO, oracle=ORACLE)
    args.update(kw)
    with pytest.raises(ValueError, match=match) as info:
        fa.make_problem(args.pop("loss"), args.pop("params"), args.pop("oracle"), **args)
    assert "\n" not in str(info.value)
    return str(info.value)


# ----------------------------------------------------------------- the search box's edge


def test_unbounded_below_is_an_edge_error():
    msg = _rejects(r"edge of search_box \(-100.0, 100.0\)", loss=lambda c, x: -jnp.sum(x))
    assert "larger search_box" in msg and "local_minima" in msg


@pytest.mark.parametrize("dim", [1, 2])
def test_minimum_outside_the_box_is_an_edge_error(dim):
    centre = jnp.full((1, dim), 500.0)
    _rejects(r"f_0 found numerically is at the edge of search_box", params=centre, dim=dim)


def test_global_minimum_outside_the_box_names_f_star_and_x_star():
    msg = _rejects(r"minimiser of f found numerically is at the edge",
                   params=jnp.array([[500.0]]), local_minima=[0.0])
    assert "f_star and x_star" in msg


def test_a_larger_box_fixes_it():
    p = fa.make_problem(half_square, jnp.array([[500.0]]), ORACLE, search_box=(0.0, 1000.0))
    assert abs(float(p.x_star[0]) - 500.0) < 1e-6 and abs(float(p.f_star)) < 1e-12


# ------------------------------------------------------- given values against the loss


def test_x_star_and_f_star_disagree():
    _rejects(r"f\(x_star\) = 0.625 \(x_star given\) differs from f_star = 0.5",
             local_minima=[0, 0], f_star=0.5, x_star=[1.5])


def test_consistent_pair_that_is_not_a_minimum():
    """f(1.5) = 0.625 = the given f*, but a descent from x* finds f = 0.5 < f*."""
    _rejects(r"f_star = 0.625 \(given\) is above f\(x\) = 0.5", local_minima=[0, 0],
             f_star=0.625, x_star=[1.5])


def test_f_star_above_what_the_search_finds():
    _rejects(r"f_star = 0.7\d* \(given\) is above f\(x\) = 0.5", local_minima=[0, 0], f_star=0.7)


def test_f_star_below_what_the_search_finds():
    _rejects(r"f\(x_star\) = 0.5 \(x_star found numerically\) differs from f_star = 0.3",
             local_minima=[0, 0], f_star=0.3)


def test_x_star_given_is_not_a_minimiser():
    _rejects(r"f\(x_star\) = 0.625 \(x_star given\) differs from f_star = 0.5\d* \(found",
             local_minima=[0, 0], x_star=[1.5])


@pytest.mark.parametrize("extra", [{}, {"f_star": 0.5, "x_star": [1.0]}])
def test_local_minimum_above_the_attained_value(extra):
    _rejects(r"local_minima\[1\] = 0.1\d* \(given\) is above f_1\(x\) = 0",
             local_minima=[0.0, 0.1], **extra)


@pytest.mark.parametrize("kw, match", [
    (dict(f_star=np.nan), r"f_star must be finite"),
    (dict(f_star=np.inf, x_star=[1.0]), r"f_star must be finite"),
    (dict(local_minima=[0.0, np.inf]), r"local_minima must be finite"),
    (dict(x_star=[np.nan]), r"x_star must be finite"),
    (dict(local_minima=[0.0, 0.0, 0.0]), r"local_minima must have shape \(2,\), got \(3,\)"),
    (dict(x_star=[1.0, 1.0]), r"x_star must have shape \(1,\), got \(2,\)"),
    (dict(f_star=[0.5, 0.5]), r"f_star must have shape \(\), got \(2,\)"),
    (dict(f_star="half"), r"f_star must be a number"),
])
def test_bad_given_values(kw, match):
    _rejects(match, **kw)


# ---------------------------------------------------------------------------- the loss


def vector_loss(c, x):
    return (x - c) ** 2  # forgot the sum


def python_float_loss(c, x):
    return (float(x[0]) - c[0]) ** 2


def integer_loss(c, x):
    return jnp.sum(x > c)


def raising_loss(c, x):
    raise RuntimeError("no data for this client")


@pytest.mark.parametrize("loss, match", [
    (vector_loss, r"loss vector_loss must return a floating scalar .* returned shape \(1,\)"),
    (python_float_loss, r"loss python_float_loss raised ConcretizationTypeError"),
    (integer_loss, r"loss integer_loss must return a floating scalar .* dtype int"),
    (raising_loss, r"loss raising_loss raised RuntimeError: no data for this client"),
])
def test_bad_loss(loss, match):
    _rejects(match, loss=loss)


# ---------------------------------------------------------------------- valid input kept


def test_valid_values_are_kept_exactly():
    p = fa.make_problem(half_square, TWO, ORACLE, local_minima=[0.0, 0.0], f_star=0.5,
                        x_star=1.0)
    assert float(p.f_star) == 0.5 and p.x_star.tolist() == [1.0]
    assert p.local_minima.tolist() == [0.0, 0.0]


def test_found_values_unchanged():
    p = fa.make_problem(half_square, TWO, ORACLE)
    assert abs(float(p.f_star) - 0.5) < 1e-12 and abs(float(p.x_star[0]) - 1.0) < 1e-7
