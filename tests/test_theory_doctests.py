"""The docstring examples of fedjax_abc.theory run as written (slow: they compile simulations)."""

import doctest
import importlib

import pytest

MODULES = [
    "fedjax_abc.theory",
    "fedjax_abc._theory._abc",
    "fedjax_abc._theory._bounds",
    "fedjax_abc._theory._check",
    "fedjax_abc._theory._counterexample",
    "fedjax_abc._theory._grid",
    "fedjax_abc._theory._heterogeneity",
    "fedjax_abc._theory._theorem3",
    "fedjax_abc._theory._comparison",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert failures == 0
