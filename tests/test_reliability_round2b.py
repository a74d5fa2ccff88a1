"""Nothing silently wrong, round two (continued): a prime number of rounds in the
reproduction, a sweep too large for the memory, two runs on one checkpoint path, a full
disk, and bad arguments of the public surface, each refused in one line naming it.
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import common

KW = dict(local_steps=2, rounds=8, trials=3, key=jax.random.key(0), record_every=4)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)


# --------------------------------------------------------- prime rounds in reproduce (item 8)


@pytest.mark.parametrize("T, target, k", [
    (50000, 500, 100), (100000, 100, 1000), (10000, 500, 20),  # the paper's T: as before
    (100, 500, 1), (60, 100, 1),        # fewer rounds than records: every round
    (1009, 500, None), (1009, 100, None),  # prime: no divisor gives 20..500 records
    (2 * 5003, 500, None),              # 2p: 5003 records or 2
    (1000, 500, 2), (999, 100, 27),    # 999 = 27 * 37: 37 records >= 20
])
def test_reproduce_records_enough_points_for_any_rounds(T, target, k):
    assert common.record_every(T, target) == k


def test_reproduce_with_a_prime_number_of_rounds_draws_curves(tmp_path):
    out = tmp_path / "out"
    assert cli.main(["reproduce", "fig1", "--quick", "--trials", "2", "--rounds", "1009",
                     "--quiet", "--no-checkpoint", "--out", str(out)]) == 0
    doc = json.loads((out / "fig1.json").read_text())
    # simulate's default for T = 1009: every ceil(1009 / 1000) = 2 rounds, and T
    assert doc["rounds"] == list(range(0, 1009, 2)) + [1009]
    for S in ("1", "4", "8", "16"):
        assert len(doc["mean_gap"][S]) == 506


def test_theorem2_check_takes_the_default_records():
    p = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)
    r = fa.theory.theorem2_check(p, L=1.0, C=1.0, D=0.0, num_sampled=2, local_steps=2,
                                 rounds=1009, trials=2, key=jax.random.key(1),
                                 record_every=None, mode="gather")
    assert r["record_every"] == 2 and r["argmin_round"] % 2 == 0
