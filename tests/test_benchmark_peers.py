"""``benchmarks/peers.py``: the peers' workloads have the published shapes, and each runs."""

import os
import sys

import equinox as eqx
import jax
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import peers  # noqa: E402


def _parameters(model) -> int:
    arrays = eqx.filter(model, lambda a: isinstance(a, (jax.Array, jax.ShapeDtypeStruct)))
    return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(arrays))


def test_full_models_have_the_published_layer_sizes():
    """EMNIST: 3x3 convolutions 1->32->64 (26 and 24 pixels), 2x2 pooling to 12 x 12 x 64 =
    9216, dense 128, dense 62; CIFAR-10: 5x5 'same' convolutions 3->32->64 with pooling to
    8 x 8 x 64 = 4096, dense 512, dense 10; FedNova: an MLP 3072-256-10."""
    key = jax.random.key(0)
    emnist = (1 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (9216 * 128 + 128) + (128 * 62 + 62)
    cifar = (3 * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (4096 * 512 + 512) + (512 * 10 + 10)
    mlp = (3072 * 256 + 256) + (256 * 10 + 10)
    for case, count in (("emnist_cnn", emnist), ("cifar10_cnn", cifar), ("fednova", mlp)):
        shape = peers.SHAPES[case]["full"]
        model = eqx.filter_eval_shape(peers._model, case, shape, key)  # shapes, no arrays
        assert _parameters(model) == count, case
        row = jax.ShapeDtypeStruct((shape.side * shape.side * shape.channels,),
                                   jax.numpy.float64)
        assert eqx.filter_eval_shape(lambda m, r: m(r), model, row).shape == (shape.classes,)
    assert emnist == 1_206_590


@pytest.mark.slow
@pytest.mark.parametrize("case", tuple(peers.SHAPES))
def test_each_case_runs_reduced(case):
    out = peers.run_case(case, peers.SHAPES[case]["reduced"], [1, 8])
    assert [r["trials"] for r in out["rows"]] == [1, 8]
    assert all(np.isfinite(r["trajectory_rounds_per_s"]) and r["run_s"] > 0
               for r in out["rows"])
