"""fedjax-abc compare --tradeoffs: FedAvg and SCAFFOLD against bits and against epsilon."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from fedjax_abc import cli
from fedjax_abc.repro import tradeoffs


def _bits_per_message(name: str, d: int) -> int:
    """Each compressor's encoding written out: values in 32 bits, indices in ceil(log2 d),
    QSGD(4)'s norm and a signed level of ceil(log2 9) = 4 bits a coordinate, natural
    compression's sign and exponent in 9 bits, sign's bits and one scale."""
    k = round(0.1 * d)
    index = math.ceil(math.log2(d))
    return {"32-bit floats": 32 * d, "QSGD(4)": 32 + 4 * d, "natural": 9 * d,
            "RandK(d/10)": k * (32 + index), "EF TopK(d/10)": k * (32 + index),
            "EF sign": 32 + d}[name]


@pytest.mark.slow  # end to end at reduced scale, about 90 s
def test_compare_tradeoffs_quick_writes_bits_and_epsilon(tmp_path, capsys):
    import fedjax_abc as fa

    out = tmp_path / "res"
    assert cli.main(["compare", "--tradeoffs", "--quick", "--quiet", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["tradeoffs.csv", "tradeoffs.json", "tradeoffs.png"]
    doc = json.loads((out / "tradeoffs.json").read_text())
    s = doc["settings"]
    assert set(doc["bits"]) == set(doc["privacy"]) == {"FedAvg", "SCAFFOLD"}
    for alg, runs in doc["bits"].items():
        assert list(runs) == list(tradeoffs.COMPRESSORS)
        for name, c in runs.items():  # every participant's message, every round: exact
            assert c["bits"]["final"] == s["T"] * s["S"] * _bits_per_message(name, s["d"])
            assert c["bits"]["final_ci95"] == 0
    sampler = fa.UniformWithoutReplacement(s["S"])
    for alg, runs in doc["privacy"].items():
        assert "epsilon" not in runs["0"]  # clipping alone releases no privacy budget
        finals = []
        for key, c in runs.items():
            if c["kind"] == "clip only":
                continue
            eps = np.asarray(c["epsilon"]["mean"])
            assert eps[0] == 0 and np.all(np.diff(eps) > 0)  # epsilon(t) grows along the run
            expected = fa.theory.dp_epsilon(c["z"], sampler, s["T"], s["delta"],
                                            num_clients=s["n"], accountant="rdp")
            assert c["epsilon"]["final"] == pytest.approx(expected, rel=1e-12)
            if c["kind"] == "fixed clip":
                finals.append(c["epsilon"]["final"])
        assert np.all(np.diff(finals) < 0)  # more noise, less epsilon
    text = capsys.readouterr().out
    assert "Mbit" in text and "epsilon" in text


def test_compare_refuses_tradeoffs_with_another_mode(capsys):
    assert cli.main(["compare", "--tradeoffs", "--tuned"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not allowed with argument" in err


@pytest.mark.slow  # six runs of 300 rounds, about 12 s
def test_scaffold_with_compressed_updates_is_stable_only_for_omega_at_most_one():
    """SCAFFOLD's c_i^+ = c_i - c - C(Delta_i) / (Q alpha) is formed from the compressed
    update, so the compression error returns in the next round's correction: the loop's
    gain is omega. RandK with omega = d/k - 1 <= 1 converges as without compression;
    omega = 3 diverges while FedAvg, with the same compressor, does not."""
    import warnings

    import jax
    import jax.numpy as jnp

    import fedjax_abc as fa

    p = fa.problems.quadratics(jax.random.key(0), n=10, d=20, spread=1.0)
    kw = dict(num_sampled=5, oracle=fa.ExactOracle(), local_steps=5, stepsize=0.05, rounds=300,
              x0=jnp.full(20, 2.0), trials=4, key=jax.random.key(1), record_every=300,
              record_x=False)
    gaps = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.DivergenceWarning)
        for k in (20, 12, 5):
            for name, alg in (("FedAvg", fa.algorithms.FedAvg()),
                              ("SCAFFOLD", fa.algorithms.Scaffold())):
                r = fa.simulate(p, algorithm=alg, transform=fa.transforms.RandK(k), **kw)
                gaps[name, k] = np.median(r.gap[:, -1])
    assert gaps["SCAFFOLD", 12] < 2 * gaps["SCAFFOLD", 20] + 1e-6  # omega = 2/3: stable
    assert not gaps["SCAFFOLD", 5] < 1e3  # omega = 3: diverges (or overflows to inf/nan)
    assert gaps["FedAvg", 5] < 10 * gaps["FedAvg", 20] + 1e-3


def test_a_noise_floor_is_not_called_unstable_and_growth_is():
    t = np.arange(21.0)
    assert not tradeoffs._growing(1.2 * np.exp(-t / 5) + 0.1)  # converges
    assert not tradeoffs._growing(1.0 + 12 * (1 - np.exp(-t / 3)))  # rises to a noise floor
    assert tradeoffs._growing(1.2 * np.exp(t))  # grows without bound
    assert tradeoffs._growing(np.r_[1.2 * np.ones(20), np.inf])  # overflowed
    assert tradeoffs._growing(np.r_[1.2 * np.ones(20), np.nan])
