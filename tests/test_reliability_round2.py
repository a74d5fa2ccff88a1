"""Nothing silently wrong, round two: inputs that used to give wrong numbers or fail late.

Each test is a bad input and the one-line error (or the correct result) it must give: a
damaged or unknown result file, another grid's parts, an unwritable checkpoint, a changed
component class, a problem or oracle of the wrong shapes, a component drawing from NumPy's
global generator, labels outside [0, K) or not dense, a metric named like a result field,
a prime number of rounds in the reproduction, a sweep too large for the memory.
"""

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import fedjax_abc as fa

KW = dict(local_steps=2, rounds=8, trials=3, key=jax.random.key(0), record_every=4)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)


@pytest.fixture(scope="module")
def result(problem):
    return fa.simulate(problem, num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0, **KW)


# ------------------------------------------------------------------ result files (item 5)


def _rewrite(path, **attrs):
    """The file at ``path`` rewritten with some attributes changed (None deletes one)."""
    with xr.open_dataset(path, engine="scipy", mask_and_scale=False, decode_times=False) as ds:
        ds = ds.load()
    for name, value in attrs.items():
        if value is None:
            ds.attrs.pop(name, None)
        else:
            ds.attrs[name] = value
    os.remove(path)
    ds.to_netcdf(path, engine="scipy", format="NETCDF3_64BIT")


def test_damaged_data_bytes_are_refused(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    raw = bytearray(open(path, "rb").read())
    gap = np.asarray(result.gap, ">f8").tobytes()
    at = raw.find(gap[:24])
    assert at > 0
    raw[at + 9] ^= 0x10  # one bit of gap[0, 1]
    open(path, "wb").write(bytes(raw))
    with pytest.raises(ValueError, match=r"r\.nc is damaged: its data do not match the checksum"):
        fa.load(path)


def test_damaged_attributes_are_refused(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    config = dict(result.config, stepsize="0.5")
    import json
    _rewrite(path, config=json.dumps(config))
    with pytest.raises(ValueError, match="is damaged"):
        fa.load(path)


def test_unknown_format_is_refused(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    _rewrite(path, format=3)
    with pytest.raises(ValueError, match=r"has result format 3; this fedjax_abc reads formats 1, 2"):
        fa.load(path)
    _rewrite(path, format=None)
    with pytest.raises(ValueError, match=r"has result format None"):
        fa.load(path)


def test_format_1_files_without_checksum_still_load(result, tmp_path):
    path = str(result.save(tmp_path / "r.nc"))
    _rewrite(path, format=1, checksum=None)
    assert fa.load(path).equals(result)
    # a format-2 file must carry its checksum
    _rewrite(path, format=2)
    with pytest.raises(ValueError, match="is damaged"):
        fa.load(path)


def test_checksummed_files_round_trip(problem, result, tmp_path):
    assert fa.load(result.save(tmp_path / "r.nc")).equals(result)
    sw = fa.sweep(problem, grid={"stepsize": [0.05, 0.1]}, num_sampled=2,
                  x0=problem.x_star + 2.0, **KW)
    assert fa.load(sw.save(tmp_path / "s.nc")).equals(sw)


# ------------------------------------------------------------------- grid parts (item 2)

GRID = ('name = "g"\nseed = 0\ntrials = 3\nrounds = 8\nrecord_every = 4\nlocal_steps = 2\n'
        'x0_offset = 2.0\n[problem]\nname = "huber_offsets"\nn = 6\nd_max = 10.0\nseed = 0\n'
        '[grid]\nnum_sampled = [2, 3]\nstepsize = [{}, 0.02]\n')


def test_grid_refuses_parts_of_another_grid(tmp_path, capsys):
    from fedjax_abc import cli

    a, b, out = tmp_path / "a.toml", tmp_path / "b.toml", tmp_path / "out"
    a.write_text(GRID.format("0.01"))
    b.write_text(GRID.format("0.04"))
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 0
    first = fa.load(out / "result.nc")
    # grid b in a's folder, a's record of its settings gone: a's parts are not b's
    os.remove(out / "grid.json")
    capsys.readouterr()
    assert cli.main(["run", str(b), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "0.nc was not written by this grid" in err and err.count("\n") == 1
    # grid a again: its own parts are resumed, the same numbers
    os.remove(out / "grid.json")
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 0
    assert "2 parts, 2 resumed" in capsys.readouterr().out
    assert fa.load(out / "result.nc").equals(first)
    # a part without a fingerprint (an earlier version's) is not taken on trust either
    part = fa.load(out / "parts" / "1.nc")
    part.save(out / "parts" / "1.nc")
    assert cli.main(["run", str(a), "--out", str(out), "--quiet"]) == 1
    assert "1.nc was not written by this grid" in capsys.readouterr().err


# ------------------------------------------------------------------- checkpoints (item 3)

ORACLE = '''
import jax
import fedjax_abc as fa


class ScaledNoise(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + {} * z
'''


def _module(path, name, text):
    import importlib.util

    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(problem, oracle, path, **kw):
    return fa.simulate(problem, num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0,
                       oracle=oracle, checkpoint=path, **dict(KW, **kw))


def test_unwritable_checkpoint_is_refused_before_the_run(problem, tmp_path):
    (tmp_path / "file").write_text("")
    calls = []
    with pytest.raises(OSError, match=r"checkpoint \(.*file/c\.npz\) cannot be written"):
        fa.simulate(problem, num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0,
                    checkpoint=tmp_path / "file" / "c.npz",
                    progress=lambda *a: calls.append(a), **KW)
    assert calls == []  # refused before the first round
    # a folder that does not exist yet is made
    res = fa.simulate(problem, num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0,
                      checkpoint=tmp_path / "new" / "c.npz", **KW)
    assert os.path.exists(tmp_path / "new" / "c.npz") and res.trials == 3
    assert [n for n in os.listdir(tmp_path / "new")] == ["c.npz"]  # the probe is removed


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_checkpoint_folder_is_refused(problem, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(OSError, match="cannot be written"):
            _run(problem, None, folder / "c.npz")
    finally:
        folder.chmod(0o700)


def test_checkpoint_refuses_a_changed_component_class(problem, tmp_path):
    source, path = tmp_path / "user_oracles.py", tmp_path / "c.npz"
    old = _module(source, "user_oracles", ORACLE.format("0.1")).ScaledNoise()
    first = _run(problem, old, path)
    # the same code: the complete checkpoint is the result
    same = _module(source, "user_oracles", ORACLE.format("0.1")).ScaledNoise()
    assert _run(problem, same, path).equals(first)
    new = _module(source, "user_oracles", ORACLE.format("0.2")).ScaledNoise()
    with pytest.raises(ValueError, match=r"another run: code of user_oracles\.ScaledNoise differ"):
        _run(problem, new, path)
    assert not _run(problem, new, tmp_path / "d.npz").equals(first)  # it does change the numbers


def test_checkpoint_refuses_a_changed_class_without_source(problem, tmp_path):
    def make(scale):
        namespace = {"__name__": "session"}
        exec(ORACLE.format(scale), namespace)  # no file: the methods' bytecode is compared
        return namespace["ScaledNoise"]()

    path = tmp_path / "c.npz"
    first = _run(problem, make("0.1"), path)
    assert _run(problem, make("0.1"), path).equals(first)
    with pytest.raises(ValueError, match=r"code of session\.ScaledNoise differ"):
        _run(problem, make("0.2"), path)


# ------------------------------------------------------------- problems and components (item 4)


class CommonNoise(fa.AbstractOracle):
    """Noise of shape (Q,) where (Q, d) is asked for: one draw for every coordinate."""

    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape[:1], dtype)

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class NumpyNoise(fa.AbstractOracle):
    def noise(self, key, shape, dtype):
        return jnp.asarray(np.random.normal(size=shape), dtype)  # once, at trace time

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


class NumpyChoice(fa.AbstractSampler):
    def num_slots(self, n):
        return 2

    def __call__(self, key, n):
        idx = np.random.choice(n, 2, replace=False)  # once, at trace time
        return jnp.asarray(idx, jnp.int32), jnp.full((2,), n / 2)


class LocalGenerator(fa.AbstractSampler):
    def num_slots(self, n):
        return 2

    def __call__(self, key, n):
        rng = np.random.default_rng()  # made and drawn from once, at trace time
        return jnp.asarray(rng.choice(n, 2, replace=False), jnp.int32), jnp.full((2,), n / 2)


class HeldGenerator(fa.AbstractOracle):
    rng: np.random.Generator = eqx.field(static=True)

    def noise(self, key, shape, dtype):
        return jnp.asarray(self.rng.normal(size=shape), dtype)  # once, at trace time

    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + z


def _simulate(problem, **kw):
    args = dict(num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0, **KW)
    args.update(kw)
    if "sampler" in kw:
        del args["num_sampled"]
    return fa.simulate(problem, **args)


def test_local_minima_of_the_wrong_length_are_refused(problem):
    import dataclasses

    # refused when the Problem is made (the run's check is the same)
    with pytest.raises(ValueError, match=r"local_minima must have shape \(n=6,\) .*got \(5,\)"):
        _simulate(dataclasses.replace(problem, local_minima=problem.local_minima[:-1]))
    with pytest.raises(ValueError, match=r"local_minima must have shape \(n=6,\)"):
        _simulate(dataclasses.replace(problem, local_minima=jnp.zeros(7)))
    ragged = dataclasses.replace(problem, params=(problem.params, jnp.zeros(4)))
    with pytest.raises(ValueError, match=r"params leaves have leading axes \[4, 6\]"):
        _simulate(ragged)


def test_noise_that_broadcasts_to_the_model_is_refused():
    quad = fa.problems.quadratics(jax.random.key(0), n=4, d=3)
    with pytest.raises(ValueError, match=r"CommonNoise: a step's noise has shape \(\), which "
                                         r"broadcasts to the model's shape \(3,\)"):
        _simulate(quad, oracle=CommonNoise())
    # the exact oracle's step noise is a scalar it never reads; d = 1 has nothing to broadcast
    assert _simulate(quad, oracle=fa.ExactOracle()).trials == 3
    one = fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)
    assert one.dim == 1 and _simulate(one, oracle=CommonNoise()).trials == 3


def test_numpy_global_draws_at_trace_time_are_refused(problem):
    with pytest.raises(ValueError, match=r"NumpyNoise.noise_from_words draws from NumPy's or "
                                         r"Python's global random generator"):
        _simulate(problem, oracle=NumpyNoise())
    with pytest.raises(ValueError, match=r"NumpyChoice.from_words draws from NumPy's"):
        _simulate(problem, sampler=NumpyChoice())


def test_numpy_generators_at_trace_time_are_refused(problem):
    with pytest.raises(ValueError, match=r"LocalGenerator.from_words makes a NumPy or Python "
                                         r"random generator \(np.random.default_rng, ...\) when "
                                         r"traced: the draw is made once"):
        _simulate(problem, sampler=LocalGenerator())
    with pytest.raises(ValueError, match=r"HeldGenerator.rng is a NumPy or Python random "
                                         r"generator: drawn from when traced"):
        _simulate(problem, oracle=HeldGenerator(np.random.default_rng(0)))
    # the names are put back: NumPy's generators work as before outside the check
    assert np.random.default_rng(0).integers(10) == np.random.default_rng(0).integers(10)


# ------------------------------------------------------------------------ labels (item 6)

X = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.0], [1.5]])]
Y = [np.array([0, 1]), np.array([1, 1, 0])]


@pytest.fixture(scope="module")
def logistic():
    return fa.problems.logistic_regression(X, Y, l2=0.1)


@pytest.mark.parametrize("labels, match", [
    ([0, 2], r"test label 2 outside \[0, K=2\)"),
    ([-1, 1], r"test label -1 outside \[0, K=2\)"),
    ([0.5, 1.0], "labels must be integers"),
])
def test_test_labels_outside_the_classes_are_refused(logistic, labels, match):
    Xt = np.array([[0.0], [3.0]])
    with pytest.raises(ValueError, match=match):
        fa.problems.evaluate(logistic, logistic.x_star, Xt, np.array(labels))
    with pytest.raises(ValueError, match=match):
        fa.problems.held_out_metrics(logistic, Xt, np.array(labels))
    # labels in range: the accuracy of the model's predictions
    ev = fa.problems.evaluate(logistic, logistic.x_star, Xt, np.array([0, 1]))
    assert float(ev.accuracy) == 1.0 and np.isfinite(ev.loss)


def test_sparse_labels_are_refused_with_how_to_remap():
    sparse = [np.array([0, 1000]), np.array([1000, 1000, 0])]
    with pytest.raises(ValueError, match=r"labels take 2 values in 0\.\.1000, which makes K=1001 "
                                         r"classes: remap them to 0\.\.1 \(e\.g\. numpy\.unique"):
        fa.problems.softmax_regression(X, sparse, l2=0.1)
    with pytest.raises(ValueError, match=r"K=1001 classes: remap them"):
        fa.problems.mlp(jax.random.key(0), X, sparse, width=4)
    # remapped as the message says: the problem of the dense labels
    _, dense = np.unique(np.concatenate(sparse), return_inverse=True)
    p = fa.problems.softmax_regression(X, [dense[:2], dense[2:]], l2=0.1)
    assert p.loss.model.num_classes == 2
    # K given: classes absent from the training data are the user's choice
    three = fa.problems.softmax_regression(X, Y, l2=0.1, num_classes=3)
    assert three.loss.model.num_classes == 3


# ------------------------------------------------------------------ metric names (item 7)


@pytest.mark.parametrize("name", ["diverged", "gap", "grad_norm_sq", "x", "trial", "round"])
def test_metric_named_like_a_result_field_is_refused(problem, name):
    with pytest.raises(ValueError, match=rf"metric name '{name}' is taken; not one of gap, "
                                         r"grad_norm_sq, x, x_final, diverged_at, diverged"):
        _simulate(problem, metrics={name: jnp.sum})


@pytest.mark.parametrize("name, axis", [("stepsize", "stepsize"),
                                        ("algorithm_mu", "algorithm.mu")])
def test_metric_named_like_a_sweep_axis_is_refused(problem, name, axis):
    with pytest.raises(ValueError, match=rf"metric name '{name}' is taken by a grid axis of the "
                                         rf"sweep; not one of .*, {axis}"):
        fa.sweep(problem, grid={axis: [0.05, 0.1] if axis == "stepsize" else [0.0, 0.1]},
                 metrics={name: jnp.sum}, num_sampled=2, x0=problem.x_star + 2.0,
                 **({"stepsize": 0.05, "algorithm": fa.algorithms.FedProx(0.0)}
                    if axis != "stepsize" else {}), **KW)


def test_sweep_with_a_free_metric_name_saves(problem, tmp_path):
    sw = fa.sweep(problem, grid={"stepsize": [0.05, 0.1]}, metrics={"total": jnp.sum},
                  num_sampled=2, x0=problem.x_star + 2.0, **KW)
    assert list(sw.to_dataframe().columns) == ["stepsize", "trial", "round", "gap",
                                               "grad_norm_sq", "total", "diverged"]
    assert fa.load(sw.save(tmp_path / "s.nc")).equals(sw)
