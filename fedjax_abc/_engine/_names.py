"""Names of things: one-line descriptions of components and the labels of grid coordinates.

A leaf of the engine (it imports no other engine module): results, the driver, the sweep,
the asynchronous sweep and the grid runner all name components and grid points the same
way through it.

- :func:`describe`: a component from its own fields, e.g. ``FedProx(mu=0.1)`` or
  ``Chain(transforms=[Clip(norm=0.5), GaussianNoise(stddev=0.55, shared=True)])``;
  :func:`describe_sampler` every field of a sampler, numbers in full;
- :func:`coordinate_labels`: the coordinate labels of a sweep's axis (numbers, or short
  strings, unique); :func:`dim_name`: a netCDF-safe dimension name of an axis.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Optional

import equinox as eqx
import jax
import numpy as np

from fedjax_abc._algorithms._base import AbstractAlgorithm
from fedjax_abc._algorithms._buffered import AbstractAsyncRule
from fedjax_abc._algorithms._transforms import AbstractTransform
from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem
from fedjax_abc._problems._samplers import AbstractSampler
from fedjax_abc._problems._time import Clock
from fedjax_abc._robust._aggregators import AbstractAggregator
from fedjax_abc._robust._byzantine import Byzantine

__all__ = ["coordinate_label", "coordinate_labels", "describe", "describe_sampler", "dim_name"]


def dim_name(axis: str) -> str:
    """A netCDF-safe dimension name for a grid axis ('algorithm.mu' -> 'algorithm_mu')."""
    return axis.replace(".", "_").replace(" ", "_")


def describe(component) -> str:
    """A one-line description of a component from its own fields: the class and every
    setting, e.g. ``Chain(transforms=[Clip(norm=0.5), GaussianNoise(stddev=0.55,
    shared=True)])``: scalars as numbers (6 digits), ints and flags as they are, arrays in
    full up to 8 entries (else their shape and mean), components inside it described the
    same way; functions are left out."""
    fields = []
    for f in dataclasses.fields(component):
        text = _described(object.__getattribute__(component, f.name))
        if text is not None:
            fields.append(f"{f.name}={text}")
    return f"{type(component).__name__}({', '.join(fields)})"


def _described(value) -> Optional[str]:
    """One field's value as :func:`describe` writes it (None: left out)."""
    if isinstance(value, eqx.Module):
        return describe(value)
    if isinstance(value, (jax.Array, np.ndarray)):
        if np.ndim(value) == 0:
            return f"{float(value):g}"
        a = np.asarray(value)
        return f"{a.tolist()}" if a.size <= 8 else \
            f"array{list(a.shape)} mean {float(np.mean(a)):.4g}"
    if isinstance(value, (bool, int, str)):
        return repr(value) if isinstance(value, str) else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)) and value and all(
            isinstance(v, eqx.Module) for v in value):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    return None


def describe_sampler(sampler) -> str:
    """A sampler's class and every field: numbers, flags, arrays (in full up to 8 entries,
    else their shape and mean) and wrapped samplers, e.g. ``Poisson(probs=[0.2, 0.5],
    unbiased=True)``."""
    fields = []
    for f in dataclasses.fields(sampler):
        value = getattr(sampler, f.name)
        if isinstance(value, AbstractSampler):
            text = describe_sampler(value)
        elif isinstance(value, eqx.Module):  # a sampler's own parts (a clock, its laws)
            text = describe(value)
        elif isinstance(value, (jax.Array, np.ndarray)):
            a = np.asarray(value)
            text = (f"{a.tolist()}" if a.size <= 8 else
                    f"array{list(a.shape)} mean {float(np.mean(a)):.4g}")
        else:
            text = repr(value)
        fields.append(f"{f.name}={text}")
    return f"{type(sampler).__name__}({', '.join(fields)})"


def coordinate_label(value, name: str, i: int):
    """A coordinate label of one grid value: a number or a short string.

    Numbers and strings label themselves (a flag as ``"True"``), a problem by its name, a
    component by :func:`describe` (an asynchronous rule and a clock too), a component given
    as the table of its name and arguments (a grid file's ``{name = "FedProx", mu = 0.1}``)
    as ``"FedProx(mu=0.1)"``; anything else is ``"<name>[<i>]"``."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (jax.Array, np.ndarray)) and np.size(value) == 1:
        return float(np.asarray(value).reshape(()))
    if isinstance(value, Problem):
        return value.name
    if isinstance(value, (AbstractAlgorithm, AbstractOracle, AbstractSampler, AbstractTransform,
                          AbstractAggregator, Byzantine, AbstractAsyncRule, Clock)):
        return describe(value)
    if isinstance(value, dict):  # a component's table: its class's name and its arguments
        args = ", ".join(f"{k}={v}" for k, v in value.items() if k != "name")
        return f"{value.get('name', name)}({args})" if args else str(value.get("name", name))
    return f"{name}[{i}]"


def coordinate_labels(name: str, values: list) -> tuple:
    """Coordinate labels of an axis: numbers if every value is one, else strings; unique."""
    labels = [coordinate_label(v, name, i) for i, v in enumerate(values)]
    if len({type(x) for x in labels}) > 1:
        labels = [x if isinstance(x, str) else repr(x) for x in labels]
    if len(set(labels)) < len(labels):
        labels = [f"{name}[{i}]" for i in range(len(values))]
    return tuple(labels)
