"""Summary prints its numbers as Python writes them, and ci95 is the interval's half width."""

import numpy as np

import fedjax_abc as fa


def test_summary_repr_plain_numbers():
    s = fa.summarize(np.array([1.0, 2.0, 3.0, 6.0]))  # mean 3, sd sqrt(14/3), se sqrt(14/3)/2
    text = repr(s)
    assert "np.float64" not in text and "array(" not in text
    assert text.startswith("Summary(mean=3.0, stderr=1.0801234497346")
    assert text.endswith("excluded=0)")
    np.testing.assert_allclose(s.ci95, 1.959963984540054 * np.sqrt(14 / 3) / 2)
    np.testing.assert_allclose([s.ci_low, s.ci_high], [3.0 - s.ci95, 3.0 + s.ci95])


def test_summary_repr_of_arrays():
    text = repr(fa.summarize(np.array([[1.0, 4.0], [3.0, 4.0]])))
    assert text.startswith("Summary(mean=[2., 4.], stderr=[1., 0.]")
