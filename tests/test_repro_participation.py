"""The participation showcase: its one-round probe measures Lemma 3's sampling error."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import cli
from fedjax_abc.repro import offsets as offs
from fedjax_abc.repro import participation


@pytest.fixture(scope="module")
def huber():
    p = fa.problems.huber_offsets(offsets=offs.paper_offsets(20.0, 40))
    return p, np.asarray(p.x_star) + 10.0


@pytest.mark.parametrize("name", ["uniform", "importance", "poisson", "cyclic", "markov"])
def test_the_probe_measures_the_predicted_sampling_error(huber, name):
    p, x0 = huber
    s = participation.samplers(participation.local_gradients(p, x0), 4)[name]
    out = participation.probe(p, s, x0, 1e-3, 4000, jax.random.key(5))
    assert abs(out["z"]) < 4, out


def test_the_probe_tells_a_wrong_prediction_apart(huber):
    """Negative control: the uniform sampler's measurement against the prediction for
    sampling with replacement (Lemma 3's I_S / S against 1 / S, S = 20 of 40: half) is
    rejected."""
    p, x0 = huber
    grads = participation.local_gradients(p, x0)
    out = participation.probe(p, fa.UniformWithoutReplacement(20), x0, 1e-3, 4000,
                              jax.random.key(5))
    right = fa.theory.sampling_error(fa.UniformWithoutReplacement(20), grads).mse
    wrong = fa.theory.sampling_error(fa.WithReplacement(20), grads).mse
    assert abs(out["measured"] - right) / out["stderr"] < 4
    assert abs(out["measured"] - wrong) / out["stderr"] > 4


@pytest.mark.slow  # end to end, about a minute
def test_compare_participation_quick_writes_its_files(tmp_path, capsys):
    out = tmp_path / "res"
    assert cli.main(["compare", "--participation", "--quick", "--quiet", "--out",
                     str(out)]) == 0
    assert sorted(os.listdir(out)) == ["participation.csv", "participation.json",
                                       "participation.png"]
    doc = json.loads((out / "participation.json").read_text())
    assert set(doc["problems"]) == {"huber", "synthetic"}
    for p in doc["problems"].values():
        assert [row["sampler"] for row in p["table"]] == list(participation.ORDER)
    text = capsys.readouterr().out
    assert text.count(": agrees") == 10, text
