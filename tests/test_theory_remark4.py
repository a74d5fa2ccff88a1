"""Remark 4 / Table I: [10]'s sampling term and the two rates, against hand-computed values."""

import math

import pytest

import fedjax_abc.theory as th


def test_yang2021_sampling_term_by_hand():
    # I_S = (41 - 5) / 40 = 0.9; sqrt(Q / (S T)) = sqrt(4 / 25) = 0.4.
    assert th.yang2021_sampling_term(2.0, n=41, S=5, Q=4, T=5) == pytest.approx(0.72, rel=1e-14)
    assert th.yang2021_sampling_term(2.0, n=41, S=41, Q=4, T=5) == 0.0  # full participation
    # grows as sqrt(Q): 4 times the local steps, twice the term
    assert th.yang2021_sampling_term(1.0, 40, 4, 40, 100) == pytest.approx(
        2 * th.yang2021_sampling_term(1.0, 40, 4, 10, 100), rel=1e-14)


def test_table1_rates_by_hand():
    assert th.table1_rate_bgd(3.0, 2.0, n=41, S=5, Q=4, T=5) == pytest.approx(0.4 + 0.72, rel=1e-14)
    assert th.table1_rate_bgd(3.0, 2.0, n=41, S=41, Q=4, T=5) == pytest.approx(4 / math.sqrt(41 * 20))
    # sqrt(3 / 100) + sqrt(2.5 * 0.9 / 25)
    assert th.table1_rate_abc(1.0, 0.5, 1.5, n=41, S=5, Q=4, T=5) == pytest.approx(
        math.sqrt(0.03) + 0.3, rel=1e-14)
    # this work's sampling part carries no Q
    a = th.table1_rate_abc(0.0, 0.0, 1.5, n=41, S=5, Q=4, T=5)
    assert th.table1_rate_abc(0.0, 0.0, 1.5, n=41, S=5, Q=400, T=5) == pytest.approx(a, rel=1e-14)


def test_errors():
    with pytest.raises(ValueError, match="zeta_sq"):
        th.yang2021_sampling_term(-1.0, 40, 4, 10, 100)
    with pytest.raises(ValueError, match="num_sampled|S"):
        th.yang2021_sampling_term(1.0, 40, 41, 10, 100)
