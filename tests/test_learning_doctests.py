"""The docstring examples of the learning modules run as written (slow: each builds problems)."""

import doctest
import importlib

import pytest

MODULES = [
    "fedjax_abc.data",
    "fedjax_abc._problems._data",
    "fedjax_abc._problems._learning",
    "fedjax_abc._problems._minibatch",
    "fedjax_abc._theory._learning",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert failures == 0
