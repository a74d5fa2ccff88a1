"""Byzantine-robust aggregation: rules, pre-aggregators, attacks and Byzantine clients.

Every rule and attack is a value and a pure function of one round, usable on an array::

    import jax.numpy as jnp, fedjax_abc as fa
    fa.robust.Median()(jnp.array([[0.0], [1.0], [100.0]]))       # Array([1.], ...)

and in a run: ``fa.simulate(..., aggregator=fa.robust.Krum(2),
byzantine=fa.robust.Byzantine(fa.robust.ALittleIsEnough(1.5), f=2))``. The definitions are
those of ByzFL (EPFL's reference library), on the present slots (weight > 0) in slot
order; ties, the even median and Krum's neighbour count as ByzFL sets them.

- rules (:class:`AbstractAggregator`): :class:`WeightedMean` (the default),
  :class:`Median`, :class:`TrimmedMean`, :class:`Krum`, :class:`MultiKrum`,
  :class:`GeometricMedian`, :class:`CenteredClipping`, :class:`MDA`;
- pre-aggregators (:class:`AbstractPreAggregator`): :class:`NNM`, :class:`Bucketing`,
  :class:`Clipping`, put before a rule with :func:`compose`;
- attacks (:class:`AbstractAttack`): :class:`SignFlip`,
  :class:`InnerProductManipulation`, :class:`ALittleIsEnough` (:func:`alie_z_max`),
  :class:`Gaussian`, :class:`Mimic`, :class:`Inf`, the optimised
  :class:`OptimalInnerProductManipulation`, :class:`OptimalALittleIsEnough`, and
  :class:`LabelFlip` (learning problems: the honest updates on flipped labels);
- :class:`Byzantine`: which clients lie (a set per trial, or the same set) and their attack.
"""

from fedjax_abc._robust._aggregators import (AbstractAggregator, CenteredClipping,
                                             GeometricMedian, Krum, MDA, Median, MultiKrum,
                                             TrimmedMean, WeightedMean)
from fedjax_abc._robust._attacks import (ALittleIsEnough, AbstractAttack, AttackInfo, Gaussian,
                                         Inf, InnerProductManipulation, LabelFlip, Mimic,
                                         OptimalALittleIsEnough,
                                         OptimalInnerProductManipulation, SignFlip, alie_z_max,
                                         standalone_info)
from fedjax_abc._robust._byzantine import Byzantine
from fedjax_abc._robust._preaggregators import (AbstractPreAggregator, Bucketing, Clipping,
                                                Composed, NNM, compose)

__all__ = [
    "ALittleIsEnough",
    "AbstractAggregator",
    "AbstractAttack",
    "AbstractPreAggregator",
    "AttackInfo",
    "Bucketing",
    "Byzantine",
    "CenteredClipping",
    "Clipping",
    "Composed",
    "GeometricMedian",
    "Gaussian",
    "Inf",
    "InnerProductManipulation",
    "Krum",
    "LabelFlip",
    "MDA",
    "Median",
    "Mimic",
    "MultiKrum",
    "NNM",
    "OptimalALittleIsEnough",
    "OptimalInnerProductManipulation",
    "SignFlip",
    "TrimmedMean",
    "WeightedMean",
    "alie_z_max",
    "compose",
    "standalone_info",
]
