"""The docstring examples of the engine, the algorithms and the paper's settings run as written."""

import doctest
import importlib

import pytest

MODULES = [
    "fedjax_abc.algorithms",
    "fedjax_abc._algorithms._fedavg",
    "fedjax_abc._algorithms._fedprox",
    "fedjax_abc._algorithms._scaffold",
    "fedjax_abc._algorithms._fedopt",
    "fedjax_abc._engine._simulate",
    "fedjax_abc._problems._problem",
    "fedjax_abc.repro.paper",
    "fedjax_abc.repro.checks",
    "fedjax_abc.repro.hypotheses",
    "fedjax_abc.repro.remark4",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert tried > 0 and failures == 0
