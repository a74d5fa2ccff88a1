"""The docstring examples run as written.

The engine's, the algorithms' and the paper settings' run in the default test run; the
theory's and the learning modules' (they compile simulations or build problems) with the
long checks (pytest -m slow).
"""

import doctest
import importlib

import pytest

DEFAULT = [
    "fedjax_abc.algorithms",
    "fedjax_abc._algorithms._fedavg",
    "fedjax_abc._algorithms._fedprox",
    "fedjax_abc._algorithms._scaffold",
    "fedjax_abc._algorithms._fedopt",
    "fedjax_abc._algorithms._transforms",
    "fedjax_abc._algorithms._compress",
    "fedjax_abc._algorithms._privacy",
    "fedjax_abc._theory._compression",
    "fedjax_abc._theory._privacy",
    "fedjax_abc._engine._simulate",
    "fedjax_abc._engine._sweep",
    "fedjax_abc._engine._result",
    "fedjax_abc._problems._problem",
    "fedjax_abc._problems._checks",
    "fedjax_abc._problems._paper",
    "fedjax_abc._problems._files",
    "fedjax_abc._problems._partitions",
    "fedjax_abc._theory._comparison",
    "fedjax_abc.repro.paper",
    "fedjax_abc._problems._time",
    "fedjax_abc._problems._timed",
    "fedjax_abc._algorithms._buffered",
    "fedjax_abc._theory._time",
    "fedjax_abc.repro.faulty",
    "fedjax_abc._theory._gossip",
    "fedjax_abc._decentral._mixing",
    "fedjax_abc._decentral._topology",
    "fedjax_abc._decentral._weights",
    "fedjax_abc._engine._gossip",
    "fedjax_abc._engine._hierarchical",
    "fedjax_abc._algorithms._ditto",
    "fedjax_abc._algorithms._pfedme",
    "fedjax_abc._algorithms._perfedavg",
    "fedjax_abc._algorithms._apfl",
    "fedjax_abc._algorithms._finetune",
    "fedjax_abc._theory._personal",
    "fedjax_abc._algorithms._qffl",
    "fedjax_abc._algorithms._afl",
    "fedjax_abc._algorithms._ifca",
    "fedjax_abc._algorithms._body_head",
    "fedjax_abc._algorithms._fedper",
    "fedjax_abc._algorithms._fedrep",
    "fedjax_abc._theory._fairness",
]
SLOW = [
    "fedjax_abc._engine._async",
    "fedjax_abc._engine._async_sweep",
    "fedjax_abc._theory._participation",
    "fedjax_abc.theory",
    "fedjax_abc._theory._abc",
    "fedjax_abc._theory._bounds",
    "fedjax_abc._theory._check",
    "fedjax_abc._theory._counterexample",
    "fedjax_abc._theory._heterogeneity",
    "fedjax_abc._theory._theorem3",
    "fedjax_abc._theory._lemmas",
    "fedjax_abc.repro.lemmas",
    "fedjax_abc._problems._data",
    "fedjax_abc._problems._learning",
    "fedjax_abc._problems._client_metrics",
    "fedjax_abc._problems._minibatch",
    "fedjax_abc._theory._learning",
    "fedjax_abc._stats._fairness",
]


@pytest.mark.parametrize("name", DEFAULT + [pytest.param(m, marks=pytest.mark.slow) for m in SLOW])
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert tried > 0 and failures == 0
