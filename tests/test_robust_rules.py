"""The robust rules, pre-aggregators and attacks on arrays: against the NumPy reference
(``reference_robust.py``, written from ByzFL's definitions) always, and against ByzFL itself
where it is installed (``byzfl_peer.load_byzfl``; skipped with the reason otherwise).

Inputs: random rows, rows with ties (duplicated rows, equal coordinates), m = 2f + 3, and
absent slots (weight 0) anywhere. Identities: f = 0 or identical rows give the mean (for the
rules that promise it), permutations of the present rows change nothing (deterministic
rules), and a rule vmapped over any number of trials gives every trial the same bits.
Negative controls: a variant that differs from the definition (Krum with the original
paper's k - f - 2 neighbours, a trimmed mean that trims one row too few) fails the
comparison.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_abc import robust as rb
import reference_robust as ref
from byzfl_peer import load_byzfl

F = 2


def _cases():
    rng = np.random.default_rng(7)
    out = []
    for m in (7, 2 * F + 3, 10):
        out.append(("random", rng.normal(size=(m, 5)), np.ones(m)))
    x = rng.normal(size=(8, 4))
    x[3] = x[1]  # a duplicated row
    x[:, 2] = np.round(x[:, 2])  # ties in a coordinate
    out.append(("ties", x, np.ones(8)))
    w = np.ones(11)
    w[[0, 4, 9]] = 0.0  # absent slots, first and in the middle
    out.append(("absent", rng.normal(size=(11, 3)) * 3, w))
    return out


CASES = _cases()
IDS = [c[0] + str(c[1].shape[0]) for c in CASES]

# (JAX rule, reference function of (x, w))
RULES = {
    "mean": (rb.WeightedMean(), ref.average),
    "median": (rb.Median(), ref.coordinate_median),
    "trimmed": (rb.TrimmedMean(F), lambda x, w: ref.trimmed_mean(x, w, f=F)),
    "krum": (rb.Krum(F), lambda x, w: ref.krum(x, w, f=F)),
    "multikrum": (rb.MultiKrum(F), lambda x, w: ref.multi_krum(x, w, f=F)),
    "gm": (rb.GeometricMedian(0.1, 3), lambda x, w: ref.geometric_median(x, w, 0.1, 3)),
    "gm_long": (rb.GeometricMedian(1e-3, 40), lambda x, w: ref.geometric_median(x, w, 1e-3, 40)),
    "cc": (rb.CenteredClipping(1.0, 3), lambda x, w: ref.centered_clipping(x, w, 1.0, 3)),
    "mda": (rb.MDA(F), lambda x, w: ref.mda(x, w, f=F)),
    "nnm_krum": (rb.compose(rb.NNM(F), rb.Krum(F)),
                 ref.compose(lambda v: ref.krum(v, f=F), [lambda v: ref.nnm(v, f=F)])),
    "clip_median": (rb.compose(rb.Clipping(1.5), rb.Median()),
                    ref.compose(ref.coordinate_median, [lambda v: ref.clipping(v, c=1.5)])),
    "nnm_clip_trimmed": (
        rb.compose(rb.NNM(F), rb.Clipping(2.0), rb.TrimmedMean(F)),
        ref.compose(lambda v: ref.trimmed_mean(v, f=F),
                    [lambda v: ref.nnm(v, f=F), lambda v: ref.clipping(v, c=2.0)])),
}


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("name", list(RULES))
def test_every_rule_equals_the_numpy_reference(name, case):
    rule, reference = RULES[name]
    _, x, w = case
    got = np.asarray(rule(jnp.asarray(x), jnp.asarray(w)))
    np.testing.assert_allclose(got, reference(x, w), rtol=1e-12, atol=1e-12)


def test_bucketing_equals_the_reference_in_the_drawn_order():
    _, x, w = CASES[-1]  # absent slots
    words = jnp.asarray(np.random.default_rng(1).integers(0, 2 ** 32, 11, dtype=np.uint32))
    rule = rb.compose(rb.Bucketing(2), rb.Median())
    got = np.asarray(rule(jnp.asarray(x), jnp.asarray(w), words))
    # the order the words give: present slots by their word's upper 31 bits
    present = np.flatnonzero(w > 0)
    perm = np.argsort(np.asarray(words)[present] >> 1, kind="stable")
    expected = ref.coordinate_median(ref.bucketing(x, w, s=2, perm=perm))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


ATTACKS = {
    "signflip": (rb.SignFlip(), ref.sign_flip),
    "ipm": (rb.InnerProductManipulation(1.7), lambda h, w: ref.ipm(h, w, tau=1.7)),
    "alie": (rb.ALittleIsEnough(1.2), lambda h, w: ref.alie(h, w, tau=1.2)),
    "mimic": (rb.Mimic(2), lambda h, w: ref.mimic(h, w, epsilon=2)),
    "inf": (rb.Inf(), ref.inf_attack),
}


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_attack_equals_the_numpy_reference(name, case):
    attack, reference = ATTACKS[name]
    _, x, w = case
    np.testing.assert_allclose(np.asarray(attack(jnp.asarray(x), jnp.asarray(w))),
                               reference(x, w), rtol=1e-12, atol=1e-12)


def test_the_gaussian_attack_draws_its_normals_from_the_words():
    from fedjax_abc._problems._oracles import normals_from_words
    words = jnp.arange(4, dtype=jnp.uint32) * 1_000_003
    honest = jnp.zeros((5, 4))
    z = np.asarray(normals_from_words(words, 4, jnp.float64))
    np.testing.assert_allclose(np.asarray(rb.Gaussian(0.5, 2.0)(honest, None, words)),
                               ref.gaussian(np.zeros((5, 4)), mu=0.5, sigma=2.0, z=z))


@pytest.mark.parametrize("rule_name", ["mean", "median", "krum", "clip_median"])
@pytest.mark.parametrize("optimal, reference", [
    (rb.OptimalInnerProductManipulation(),
     lambda h, f, aggregator: ref.optimal_ipm(h, f=f, aggregator=aggregator,
                                              pre_aggregators=[])),
    (rb.OptimalALittleIsEnough(evals=12, delta=3.0, ratio=0.7),
     lambda h, f, aggregator: ref.optimal_alie(h, f=f, aggregator=aggregator,
                                               pre_aggregators=[], evals=12, delta=3.0,
                                               ratio=0.7)),
])
def test_the_optimised_attacks_search_as_the_reference(rule_name, optimal, reference):
    rule, ref_rule = RULES[rule_name]
    honest = np.random.default_rng(3).normal(size=(6, 4)) + 1.0
    info = rb.standalone_info(jnp.asarray(honest), F, rule)
    got = np.asarray(optimal(jnp.asarray(honest), None, None, info))
    expected = reference(honest, f=F, aggregator=lambda v: ref_rule(v, None))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_wrong_variants_fail_the_comparison():
    # Krum with k - f - 2 neighbours (Blanchard et al.'s count, not ByzFL's) and a trimmed
    # mean trimming f - 1: each differs from the reference on some of the cases
    class KrumOriginal(rb.Krum):
        def __call__(self, vectors, weights=None, words=None):
            return rb.Krum(self.f + 1)(vectors, weights)

    krum_bad = [np.allclose(KrumOriginal(F)(jnp.asarray(x), jnp.asarray(w)),
                            ref.krum(x, w, f=F)) for _, x, w in CASES]
    trim_bad = [np.allclose(rb.TrimmedMean(F - 1)(jnp.asarray(x), jnp.asarray(w)),
                            ref.trimmed_mean(x, w, f=F)) for _, x, w in CASES]
    assert not all(krum_bad) and not any(trim_bad)


@pytest.mark.parametrize("name", [n for n in RULES if "cc" not in n and "clip" not in n])
def test_identical_rows_give_the_row(name):
    rule, _ = RULES[name]
    if name.startswith("gm"):
        return  # the smoothed Weiszfeld iteration reaches the row only in the limit
    row = jnp.asarray([1.5, -2.0, 0.25])
    x = jnp.broadcast_to(row, (7, 3))
    np.testing.assert_allclose(np.asarray(rule(x)), np.asarray(row), rtol=1e-15)


@pytest.mark.parametrize("rule", [rb.Median(), rb.TrimmedMean(0), rb.MultiKrum(0), rb.MDA(0),
                                  rb.CenteredClipping(1e6, 1)])
def test_f_zero_gives_the_mean(rule):
    x = jnp.asarray(np.random.default_rng(2).normal(size=(5, 3)))
    if isinstance(rule, rb.Median):  # f plays no part: the median of 2 rows is their mean
        x = x[:2]
    np.testing.assert_allclose(np.asarray(rule(x)), np.asarray(x.mean(axis=0)), rtol=1e-13,
                               atol=1e-15)


@pytest.mark.parametrize("name", [n for n in RULES if n not in ("nnm_krum",)])
def test_a_permutation_of_the_present_rows_changes_nothing(name):
    rule, _ = RULES[name]
    _, x, w = CASES[0]
    perm = np.random.default_rng(5).permutation(len(x))
    a = np.asarray(rule(jnp.asarray(x), jnp.asarray(w)))
    b = np.asarray(rule(jnp.asarray(x[perm]), jnp.asarray(w[perm])))
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["median", "krum", "mda", "nnm_krum", "gm"])
def test_the_same_bits_whatever_the_number_of_trials(name):
    rule, _ = RULES[name]
    x = jnp.asarray(np.random.default_rng(9).normal(size=(13, 7, 4)))  # 13 trials
    w = jnp.asarray(np.random.default_rng(9).integers(0, 2, size=(13, 7)).astype(float) + 1e-3)
    run = jax.jit(jax.vmap(rule))
    many = np.asarray(run(x, w))
    for r in (1, 5):
        assert np.array_equal(np.asarray(run(x[:r], w[:r])), many[:r])


def test_alie_z_max_is_baruchs():
    # n = 50, f = 10: s = 26 - 10 = 16, z = Phi^{-1}(34/50)
    assert rb.alie_z_max(50, 10) == pytest.approx(ref.alie_z_max(50, 10), rel=1e-12)
    assert rb.alie_z_max(50, 10) == pytest.approx(0.467698799, rel=1e-8)


# ------------------------------------------------------------------- ByzFL, where installed


@pytest.fixture(scope="module")
def byzfl():
    modules, reason = load_byzfl()
    if modules is None:
        pytest.skip(reason)
    return modules


def _byzfl_rules(b):
    A, P = b.aggregators, b.preaggregators
    return {
        "mean": A.Average(), "median": A.Median(), "trimmed": A.TrMean(F), "krum": A.Krum(F),
        "multikrum": A.MultiKrum(F), "gm": A.GeometricMedian(0.1, 3),
        "gm_long": A.GeometricMedian(1e-3, 40), "mda": A.MDA(F),
        "nnm_krum": lambda v: A.Krum(F)(P.NNM(F)(v)),
        "clip_median": lambda v: A.Median()(P.Clipping(1.5)(v)),
        "nnm_clip_trimmed": lambda v: A.TrMean(F)(P.Clipping(2.0)(P.NNM(F)(v))),
    }


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_rule_equals_byzfl(byzfl, case):
    _, x, w = case
    present = x[w > 0]
    for name, theirs in _byzfl_rules(byzfl).items():
        ours = np.asarray(RULES[name][0](jnp.asarray(x), jnp.asarray(w)))
        np.testing.assert_allclose(ours, theirs(present.copy()), rtol=1e-12, atol=1e-12,
                                   err_msg=name)
    cc = byzfl.aggregators.CenteredClipping(L=3, tau=1.0)  # a fresh one: it keeps a centre
    np.testing.assert_allclose(np.asarray(RULES["cc"][0](jnp.asarray(x), jnp.asarray(w))),
                               cc(present.copy()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_attack_equals_byzfl(byzfl, case):
    T = byzfl.attacks
    _, x, w = case
    present = x[w > 0]
    theirs = {"signflip": T.SignFlipping(), "ipm": T.InnerProductManipulation(1.7),
              "alie": T.ALittleIsEnough(1.2), "mimic": T.Mimic(2), "inf": T.Inf()}
    for name, attack in theirs.items():
        ours = np.asarray(ATTACKS[name][0](jnp.asarray(x), jnp.asarray(w)))
        np.testing.assert_allclose(ours, attack(present.copy()), rtol=1e-12, atol=1e-12,
                                   err_msg=name)


def test_the_optimised_attacks_equal_byzfl(byzfl):
    A, P, T = byzfl.aggregators, byzfl.preaggregators, byzfl.attacks
    honest = np.random.default_rng(4).normal(size=(6, 4)) + 1.0
    pairs = [(rb.OptimalInnerProductManipulation(), rb.Median(),
              T.Optimal_InnerProductManipulation(agg=A.Median(), pre_agg_list=[], f=F)),
             (rb.OptimalALittleIsEnough(), rb.compose(rb.Clipping(), rb.Krum(F)),
              T.Optimal_ALittleIsEnough(agg=A.Krum(F), pre_agg_list=[P.Clipping()], f=F))]
    for ours, rule, theirs in pairs:
        info = rb.standalone_info(jnp.asarray(honest), F, rule)
        np.testing.assert_allclose(np.asarray(ours(jnp.asarray(honest), None, None, info)),
                                   theirs(honest.copy()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [5, 40])  # by comparisons, and by a sort beyond COMPARISON_ROWS
def test_ranks_are_the_stable_sorts_inverse_permutation(m):
    from fedjax_abc._robust._aggregators import COMPARISON_ROWS, ranks
    assert (m > COMPARISON_ROWS) == (m == 40)
    x = np.round(np.random.default_rng(m).normal(size=(m, 3)), 1)  # with ties
    x[1] = x[0]
    x[2, 0] = np.inf
    expected = np.argsort(np.argsort(x, axis=0, kind="stable"), axis=0, kind="stable")
    np.testing.assert_array_equal(np.asarray(ranks(jnp.asarray(x))), expected)


def test_rules_over_many_slots_equal_the_reference():
    x = np.random.default_rng(11).normal(size=(40, 3))
    w = np.ones(40)
    w[[3, 17]] = 0.0
    for name in ("median", "trimmed", "krum", "multikrum", "nnm_krum"):
        rule, reference = RULES[name]
        np.testing.assert_allclose(np.asarray(rule(jnp.asarray(x), jnp.asarray(w))),
                                   reference(x, w), rtol=1e-12, atol=1e-12, err_msg=name)


def test_a_rule_must_say_whether_it_streams():
    """``streaming`` is an abstract class variable: a rule that leaves it out is refused
    when it is made, and one that declares it is built."""
    class Forgetful(rb.AbstractAggregator):
        def __call__(self, messages, weights, key=None):
            return messages[0]

    with pytest.raises(TypeError, match="streaming"):
        Forgetful()

    class Declared(Forgetful):
        streaming = False

    Declared()
