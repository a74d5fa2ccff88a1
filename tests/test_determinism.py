"""Reproducibility contracts of simulate.

- the same key gives the same numbers, bit for bit;
- trial r's result does not depend on how many trials run beside it, nor on trial_chunk, nor
  on progress reporting (which splits the rounds into segments);
- ``mode="mask"`` (all n virtual trajectories) and ``mode="gather"`` (only the sampled
  clients) make the same draws for the same key, for every sampler: bit for bit on the
  paper's problems, to rounding where XLA orders operations differently (d = 3 quadratics);
- a new key, stepsize, x0 or problem data of the same shapes compiles nothing.
"""

from typing import ClassVar

import equinox as eqx
import jax
import numpy as np
import pytest

import fedjax_abc as fa
from conftest import count_compilations


def offsets_problem(n=8, seed=0):
    return fa.problems.huber_offsets(jax.random.key(seed), n=n, d_max=10.0)


def run(p, **kw):
    base = dict(local_steps=3, stepsize=0.05, rounds=12, x0=p.x_star + 3.0, trials=6,
                key=jax.random.key(0), record_every=4)
    base.update(kw)
    return fa.simulate(p, **base)


def assert_same(a, b):
    for name in ("x_final", "gap", "grad_norm_sq", "x"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_same_key_same_numbers():
    p = offsets_problem()
    a = run(p, num_sampled=3)
    b = run(p, num_sampled=3)
    assert_same(a, b)
    assert np.unique(a.x_final).size == a.trials  # the trials are not copies of each other


def test_different_key_different_numbers():
    p = offsets_problem()
    a = run(p, num_sampled=3, key=jax.random.key(0))
    b = run(p, num_sampled=3, key=jax.random.key(1))
    assert np.all(a.x_final != b.x_final)


def test_raw_key_data_is_the_same_key():
    """A legacy uint32[2] key (jax.random.PRNGKey) means the same as the typed key."""
    p = offsets_problem()
    a = run(p, num_sampled=3, key=jax.random.key(4))
    b = run(p, num_sampled=3, key=jax.random.PRNGKey(4))
    assert_same(a, b)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_trial_does_not_depend_on_its_neighbours(mode, dtype):
    """Bit for bit, also where rounding is fragile (Gaussian noise, sums over d = 5); 3 and
    37 trials make batches of different sizes on one or two devices in every mode and dtype."""
    for p, S in ((offsets_problem(), 3), (fa.problems.quadratics(jax.random.key(1), n=6, d=5), 2)):
        a = run(p, num_sampled=S, trials=3, mode=mode, dtype=dtype, x0=p.x_star + 1.0)
        b = run(p, num_sampled=S, trials=37, mode=mode, dtype=dtype, x0=p.x_star + 1.0)
        for name in ("x_final", "gap", "grad_norm_sq", "x"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name)[:3], err_msg=name)


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_records_of_a_model_with_several_entries_do_not_depend_on_the_neighbours():
    """f(x) sums over d inside a client's loss: vmapped over all the trials, XLA vectorises
    that sum by their number, and the gap of the same x_t differed in its last bits (d = 10,
    n = 20; 3 trials against 21). Records of models with d > 1 go 8 trials at a time."""
    p = fa.problems.quadratics(jax.random.key(1), n=20, d=10)
    a = run(p, num_sampled=4, trials=3, mode="gather", x0=p.x_star + 1.0)
    b = run(p, num_sampled=4, trials=21, mode="gather", x0=p.x_star + 1.0)
    for name in ("x", "gap", "grad_norm_sq", "x_final"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name)[:3], err_msg=name)


def test_unpadded_trials_run_only_themselves_with_the_same_numbers_to_rounding():
    """pad_trials=False: a call computes only its own trials (each new number of trials is a
    program of its own shape, where padded calls of 1 to 8 trials share one), a multiple of
    8 trials is the padded program itself (the same bits), and fewer trials the same numbers
    to rounding."""
    p = fa.problems.quadratics(jax.random.key(1), n=6, d=5)
    kw = dict(num_sampled=2, x0=p.x_star + 1.0, mode="gather")
    padded = run(p, trials=8, **kw)
    assert_same(run(p, trials=8, pad_trials=False, **kw), padded)
    one = run(p, trials=1, pad_trials=False, **kw)
    assert one.x_final.shape == (1, 5)
    assert one.config["pad_trials"] is False and "pad_trials" not in padded.config
    sim = fa.Simulation(p, num_sampled=2, local_steps=3, rounds=12, record_every=4,
                        mode="gather", pad_trials=False)
    rebuilt = eqx.tree_at(lambda s: s.components.sampler, sim, fa.Bernoulli(0.5))
    res = rebuilt.run(key=jax.random.key(0), x0=p.x_star + 1.0, stepsize=0.05)
    assert res.config["pad_trials"] is False  # a component of another class: built again
    np.testing.assert_allclose(one.x_final, padded.x_final[:1], rtol=1e-12)
    np.testing.assert_allclose(one.gap, padded.gap[:1], rtol=1e-10)
    with count_compilations() as padded_events:
        run(p, trials=2, **kw)
    assert padded_events == []  # 2 trials padded to 8: the program of the 8 above
    with count_compilations() as events:
        run(p, trials=2, pad_trials=False, **kw)
    assert events  # a call of 2 trials: a program of its own
    with pytest.raises(ValueError, match="pad_trials must be True or False"):
        run(p, pad_trials="no")


@pytest.mark.slow  # 7-8 s: with the long checks, for the default run's 10 minutes
def test_learning_records_do_not_depend_on_the_devices():
    """A learning problem's records (passes over all its rows) of 3 trials on one device
    equal those of the same trials among 19 on two, bit for bit, also in float32, where a
    plain loop over the trials on one device rounded the loss otherwise (mask mode, 100
    clients)."""
    data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 100, num_features=10,
                                  num_classes=3, max_samples=120)
    p = fa.problems.softmax_regression(data.features, data.labels, l2=1e-3,
                                       oracle=fa.MinibatchOracle(8))
    kw = dict(num_sampled=4, local_steps=4, stepsize=0.05, rounds=20, record_every=10,
              x0=np.zeros(p.dim), key=jax.random.key(1), dtype="float32", mode="mask")
    a, b = fa.simulate(p, trials=3, **kw), fa.simulate(p, trials=19, **kw)
    np.testing.assert_array_equal(a.x_final, b.x_final[:3])
    np.testing.assert_array_equal(a.metrics["loss"], b.metrics["loss"][:3])


def test_trial_chunk_gives_the_same_numbers():
    p = offsets_problem()
    a = run(p, num_sampled=3, trials=10)
    b = run(p, num_sampled=3, trials=10, trial_chunk=4)
    assert_same(a, b)
    assert b.x_final.shape == (10, 1)


def test_progress_segments_give_the_same_numbers():
    """progress splits the rounds into several compiled segments; the numbers do not change."""
    p = offsets_problem()
    seen = []
    a = run(p, num_sampled=3, rounds=400, record_every=2)
    b = run(p, num_sampled=3, rounds=400, record_every=2,
            progress=lambda done, total, secs: seen.append((done, total)))
    assert_same(a, b)
    assert len(seen) > 1 and seen[-1] == (400, 400)
    assert all(d1 < d2 for (d1, _), (d2, _) in zip(seen, seen[1:]))


@pytest.mark.parametrize("problem, mode, dtype", [("table2", "gather", "float64"),
                                                   pytest.param("quadratics", "mask", "float32",
                                                                marks=pytest.mark.slow)])
def test_one_program_start_gives_the_same_numbers(problem, mode, dtype):
    """A chunk of one segment starts inside the segment's program (x_0 broadcast there, the
    ids made there); the records at t = 0 and after are those of the separate start, for a
    shared x0 and for the same x0 given per trial, over chunks and from a first_trial."""
    if problem == "table2":  # with the start's records reordered, t = 0's grad_norm_sq differs
        p, S, x0 = fa.problems.huber_offsets(jax.random.key(0), n=40, d_max=200.0), 4, 10.0
    else:
        p, S, x0 = fa.problems.quadratics(jax.random.key(1), n=6, d=5), 2, 1.0
    x0 = np.asarray(p.x_star) + x0
    kw = dict(num_sampled=S, trials=11, trial_chunk=8, first_trial=5, mode=mode, dtype=dtype,
              rounds=8, record_every=2, metrics={"sq": lambda x: (x * x).sum()})
    one = run(p, x0=x0, **kw)
    rows = run(p, x0=np.tile(x0, (11, 1)), **kw)
    segmented = run(p, x0=x0, progress=lambda *a: None, **kw)  # start, then 4 segments
    for other in (rows, segmented):
        assert_same(one, other)
        np.testing.assert_array_equal(one.metrics["sq"], other.metrics["sq"])


def test_x0_per_trial():
    """x0 of shape (trials, d): trial r starts from x0[r] (exact oracle, so x_T depends on x0 only)."""
    p = offsets_problem()
    starts = np.array([[-4.0], [1.0], [9.0]])
    kw = dict(num_sampled=8, trials=3, oracle=fa.ExactOracle())
    together = run(p, x0=starts, **kw)
    np.testing.assert_array_equal(together.x[:, 0], starts)
    assert np.unique(together.x_final).size == 3
    for r in range(3):
        alone = run(p, x0=starts[r], **kw)
        np.testing.assert_allclose(together.x_final[r], alone.x_final[0], rtol=1e-13, atol=1e-14)


def test_record_x_false_keeps_the_numbers():
    p = offsets_problem()
    a = run(p, num_sampled=3)
    b = run(p, num_sampled=3, record_x=False)
    assert b.x is None
    np.testing.assert_array_equal(a.x_final, b.x_final)
    np.testing.assert_array_equal(a.gap, b.gap)
    np.testing.assert_array_equal(a.grad_norm_sq, b.grad_norm_sq)


def test_float32_is_close_to_float64():
    p = offsets_problem()
    a = run(p, num_sampled=3)
    b = run(p, num_sampled=3, dtype="float32")
    np.testing.assert_allclose(b.x_final, a.x_final, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------ mask == gather


SAMPLERS = {
    "uniform_S_lt_n": lambda n: fa.UniformWithoutReplacement(3),
    "uniform_S_eq_n": lambda n: fa.UniformWithoutReplacement(n),
    "with_replacement": lambda n: fa.WithReplacement(4),
    "bernoulli": lambda n: fa.Bernoulli(0.3),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_mask_equals_gather(name):
    p = offsets_problem()
    sampler = SAMPLERS[name](p.num_clients)
    a = run(p, sampler=sampler, mode="mask")
    b = run(p, sampler=sampler, mode="gather")
    assert_same(a, b)
    assert np.unique(a.x_final).size > 1


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_mask_equals_gather_on_problem_25():
    """Problem (25)-(26) (softplus + Huber, its own oracle): bit for bit too."""
    p = fa.problems.softplus_huber()
    for S in (1, 4, p.num_clients):
        kw = dict(num_sampled=S, local_steps=5, stepsize=0.01, rounds=20, x0=np.ones(1) * 3.0,
                  trials=5, key=jax.random.key(7), record_every=5)
        assert_same(fa.simulate(p, mode="mask", **kw), fa.simulate(p, mode="gather", **kw))


@pytest.mark.parametrize("S", [1, 2, 6])
def test_mask_and_gather_agree_to_rounding_in_3d(S):
    """Same draws in d = 3 with Gaussian noise; XLA may order a few floating-point operations
    differently in the two programs (all n clients' data broadcast over the trials in mask
    mode, gathered per trial in gather mode), so the agreement is to rounding, not bit for bit."""
    p = fa.problems.quadratics(jax.random.key(1), n=6, d=3)
    kw = dict(num_sampled=S, local_steps=3, stepsize=0.1, rounds=10, x0=np.ones(3), trials=4,
              key=jax.random.key(2))
    a, b = fa.simulate(p, mode="mask", **kw), fa.simulate(p, mode="gather", **kw)
    for name in ("x_final", "gap", "grad_norm_sq", "x"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-13, atol=1e-15,
                                   err_msg=name)
    other = fa.simulate(p, mode="gather", **dict(kw, key=jax.random.key(3)))
    assert np.max(np.abs(other.x_final - a.x_final)) > 1e-3  # the tolerance can tell draws apart


# --------------------------------------------------------------------- no recompilation


def test_new_key_stepsize_x0_or_data_compiles_nothing():
    # a shape configuration no other test uses (n = 11, Q = 4, T = 15, 5 trials, k = 5)
    n, kw = 11, dict(num_sampled=4, local_steps=4, rounds=15, trials=5, record_every=5)
    p = offsets_problem(n=n)
    keys = [jax.random.key(s) for s in range(3)]
    x0 = np.asarray(p.x_star) + 2.0
    with count_compilations() as first:
        a = fa.simulate(p, stepsize=0.05, x0=x0, key=keys[0], **kw)
    assert first, "the listener saw no compilation of a fresh configuration"
    q = offsets_problem(n=n, seed=5)  # other offsets, same shapes
    with count_compilations() as later:
        b = fa.simulate(p, stepsize=0.05, x0=x0, key=keys[1], **kw)
        c = fa.simulate(p, stepsize=0.02, x0=x0 - 1.0, key=keys[2], **kw)
        d = fa.simulate(q, stepsize=np.linspace(0.05, 0.01, 15), x0=np.asarray(q.x_star) + 1.0,
                        key=keys[0], **kw)
    assert later == [], f"recompiled: {later}"
    assert np.all(a.x_final != b.x_final) and np.all(a.x_final != c.x_final)
    assert np.all(a.x_final != d.x_final)


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_fedavg_round_is_the_simulators_round(mode):
    """fa.fedavg_round (one trial, one round) gives trial r's x_1 of simulate (same keys)."""
    p = offsets_problem()
    key = jax.random.key(9)
    res = fa.simulate(p, num_sampled=3, local_steps=3, stepsize=0.05, rounds=1, x0=p.x_star + 3.0,
                      trials=5, key=key, mode=mode)
    for r in range(5):
        x1 = fa.fedavg_round(p, p.oracle, fa.UniformWithoutReplacement(3), p.x_star + 3.0, 0, 0.05,
                             jax.random.fold_in(key, r), local_steps=3, mode=mode)
        np.testing.assert_allclose(np.asarray(x1), res.x_final[r], rtol=1e-14, atol=0)
    assert np.unique(res.x_final).size == 5


@pytest.mark.parametrize("generator", ["threefry", "splitmix"])
@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_rounds_chained_one_by_one_are_the_simulators_trajectory(mode, generator):
    """simulate hashes each round's keys and sampler words one round ahead, in its loop
    state; fedavg_round hashes them in place. Chained over 8 rounds, recorded every 4 (the
    loop restarting at t = 4), both give every trial's x_8."""
    p = offsets_problem()
    key = jax.random.key(4)
    res = fa.simulate(p, num_sampled=3, local_steps=2, stepsize=0.05, rounds=8, record_every=4,
                      x0=p.x_star + 3.0, trials=4, key=key, mode=mode, generator=generator)
    sampler = fa.UniformWithoutReplacement(3)
    for r in range(4):
        x = p.x_star + 3.0
        for t in range(8):
            x = fa.fedavg_round(p, p.oracle, sampler, x, t, 0.05, jax.random.fold_in(key, r),
                                local_steps=2, mode=mode, generator=generator)
        np.testing.assert_allclose(np.asarray(x), res.x_final[r], rtol=1e-14, atol=0)
    assert np.unique(res.x_final).size == 4


def test_records_do_not_depend_on_the_number_of_trials_at_paper_size():
    """The recorded f(x) - f* sums the n = 40 clients in a fixed order: with the sum left to
    XLA, trial r's gap changed in the last bits between 100 trials and 50 (the iterates did
    not)."""
    from fedjax_abc.repro import offsets

    p = fa.problems.huber_offsets(offsets=offsets.paper_offsets(200.0, 40))
    kw = dict(num_sampled=4, local_steps=10, stepsize=1e-4, rounds=300, mode="gather",
              x0=np.asarray(p.x_star) + 10, key=jax.random.key(1), record_every=100)
    a = fa.simulate(p, trials=100, **kw)
    b = fa.simulate(p, trials=50, **kw)
    for name in ("x_final", "gap", "grad_norm_sq"):
        np.testing.assert_array_equal(getattr(a, name)[:50], getattr(b, name), err_msg=name)


# ---------------------------------------------- random-size participation: the capacity


class Capped(fa.AbstractStatelessSampler):
    """Another sampler with its capacity set by hand (overflow forced in most rounds)."""

    inner: fa.AbstractSampler
    cap: int = eqx.field(static=True)

    distinct_slots: ClassVar[bool] = True

    @property
    def num_sampled(self):
        return self.inner.num_sampled

    def num_slots(self, n):
        return self.inner.num_slots(n)

    def num_words(self, n):
        return self.inner.num_words(n)

    def normalised(self):
        return self.inner.normalised()

    def capacity(self, n):
        return self.cap

    def from_words(self, words, n):
        return self.inner.from_words(words, n)


CAPPED_RUNS = {  # algorithm, transform: client states, statistics, a query, a server state
    "fedavg_qsgd": (fa.algorithms.FedAvg(), fa.transforms.QSGD(4)),
    "scaffold_error_feedback": (fa.algorithms.Scaffold(),
                                fa.transforms.ErrorFeedback(fa.transforms.TopK(1))),
    "mime": (fa.algorithms.Mime(), None),
    "adaptive_clipping": (fa.algorithms.FedAvg(), fa.transforms.AdaptiveClipping(1.0)),
}


@pytest.mark.parametrize("name", [
    "fedavg_qsgd", "scaffold_error_feedback",
    pytest.param("mime", marks=pytest.mark.slow),  # 13-18 s each: with the long checks
    pytest.param("adaptive_clipping", marks=pytest.mark.slow)])
def test_participants_in_chunks_give_the_sums_of_all_slots(name):
    """Bernoulli(0.3) on n = 40 (about 12 participants) computed 5 at a time: several chunks
    every round, the last one overlapping the one before. Gather and mask give, bit for bit,
    the numbers of every slot summed at once (capacity None): none dropped or counted twice."""
    algorithm, transform = CAPPED_RUNS[name]
    p = fa.problems.huber_offsets(jax.random.key(0), n=40, d_max=10.0)
    kw = dict(algorithm=algorithm, transform=transform, local_steps=2, stepsize=0.05,
              rounds=6, x0=p.x_star + 3.0, trials=3, key=jax.random.key(1), record_every=3)
    plain = fa.simulate(p, sampler=fa.Bernoulli(0.3), mode="mask", **kw)
    for mode in ("mask", "gather"):
        assert_same(plain, fa.simulate(p, sampler=Capped(fa.Bernoulli(0.3), 5), mode=mode, **kw))
    assert np.unique(plain.x_final).size > 1


@pytest.mark.slow  # over 10 s: with the long checks
def test_bernoulli_gather_computes_its_capacity_and_equals_mask():
    """Bernoulli(0.02) on n = 300: gather runs 25 slots a round (not 300), with the numbers
    of mask bit for bit (pairwise sums beyond 64 slots, the same in both); an unbiased
    Poisson too (its weights scale the update), and a capacity overflowed every round."""
    p = fa.problems.huber_offsets(jax.random.key(1), n=300, d_max=10.0)
    assert fa.Bernoulli(0.02).capacity(300) == 25 and fa.Bernoulli(0.01).capacity(1000) == 32
    kw = dict(local_steps=2, stepsize=0.05, rounds=4, x0=p.x_star + 3.0, trials=4,
              key=jax.random.key(2), record_every=2)
    for sampler in (fa.Bernoulli(0.02), fa.Poisson(np.full(300, 0.02)),
                    Capped(fa.Bernoulli(0.05), 4)):
        a = fa.simulate(p, sampler=sampler, mode="mask", **kw)
        b = fa.simulate(p, sampler=sampler, mode="gather", **kw)
        assert_same(a, b)
        assert np.all(np.any(a.x != a.x[:, :1], axis=1))  # the rounds moved x


@pytest.mark.slow  # 18 s: with the long checks
def test_a_sweep_over_p_takes_the_largest_capacity():
    """A grid over Bernoulli's p is one program whose capacity is the largest point's; each
    point's numbers are its own simulate's."""
    p = fa.problems.huber_offsets(jax.random.key(1), n=400, d_max=10.0)
    sim = fa.Simulation(p, sampler=fa.Bernoulli(0.01), local_steps=2, rounds=6, mode="gather")
    kw = dict(stepsize=0.05, x0=p.x_star + 3.0, key=jax.random.key(3))
    res = fa.sweep(sim, grid={"sampler.p": [0.01, 0.05]}, trials=3, **kw)
    for j, q in enumerate((0.01, 0.05)):
        one = fa.simulate(p, sampler=fa.Bernoulli(q), local_steps=2, rounds=6, trials=3,
                          mode="mask", **kw)
        np.testing.assert_allclose(res.gap[j], one.gap, rtol=1e-12, atol=0)
