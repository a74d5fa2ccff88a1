"""The docstring examples of fedjax_abc.theory run as written (slow: they compile simulations)."""

import doctest
import importlib

import pytest

MODULES = [
    "fedjax_abc.theory",
    "fedjax_abc._theory_abc",
    "fedjax_abc._theory_bounds",
    "fedjax_abc._theory_check",
    "fedjax_abc._theory_counterexample",
    "fedjax_abc._theory_grid",
    "fedjax_abc._theory_heterogeneity",
    "fedjax_abc._theory_theorem3",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert failures == 0
