"""Loaders of federated data from files: LEAF JSON, svmlight, tables; each on small files the
test writes, with the bad files' one-line errors naming the file."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import fedjax_abc as fa

D = fa.data


def _leaf_doc(users, rng):
    data = {}
    for u, m in users.items():
        data[u] = {"x": rng.normal(size=(m, 2, 3)).tolist(), "y": rng.integers(3, 8, m).tolist()}
    return {"users": list(users), "num_samples": list(users.values()), "user_data": data}


def _write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def test_load_leaf_one_client_per_user_across_files_with_a_test_split(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "train"
    folder.mkdir()
    a = _leaf_doc({"u1": 4, "u2": 2}, rng)
    b = _leaf_doc({"u3": 3}, rng)
    _write(folder / "part0.json", a)
    _write(folder / "part1.json", b)
    test = _write(tmp_path / "test.json", _leaf_doc({"u1": 2, "u3": 1}, rng))
    data = D.load_leaf(folder, test_path=test)
    assert data.num_clients == 3 and [len(y) for y in data.labels] == [4, 2, 3]
    np.testing.assert_array_equal(data.features[2], np.asarray(b["user_data"]["u3"]["x"]).reshape(3, 6))
    values = np.unique(np.concatenate([a["user_data"][u]["y"] for u in ("u1", "u2")]
                                      + [b["user_data"]["u3"]["y"]]
                                      + [json.loads(test.read_text())["user_data"][u]["y"]
                                         for u in ("u1", "u3")]))
    assert data.num_classes == values.size
    for y, u in zip(data.labels, [a["user_data"]["u1"], a["user_data"]["u2"], b["user_data"]["u3"]]):
        np.testing.assert_array_equal(values[y], u["y"])  # the map to 0..K-1 keeps the order
    assert data.test_features.shape == (3, 6) and len(data.test_labels) == 3
    p = fa.problems.softmax_regression(data.features, data.labels, num_classes=data.num_classes)
    assert p.num_clients == 3


@pytest.mark.parametrize("change, words", [
    (lambda d: d.pop("user_data"), "missing key 'user_data'"),
    (lambda d: d["user_data"]["u1"]["x"].__setitem__(0, [[1.0]]), "ragged or not numeric"),
    (lambda d: d["user_data"]["u1"].__setitem__("y", [0.5] * 4), "labels must be integers"),
    (lambda d: d["num_samples"].__setitem__(0, 7), "num_samples says 7"),
    (lambda d: d["user_data"]["u1"].__setitem__("y", [1, 2]), "one row of features per label"),
])
def test_bad_leaf_files_get_one_line_errors_naming_the_file(tmp_path, change, words):
    doc = _leaf_doc({"u1": 4, "u2": 2}, np.random.default_rng(1))
    change(doc)
    path = _write(tmp_path / "bad.json", doc)
    with pytest.raises(ValueError, match=words) as e:
        D.load_leaf(path)
    assert "\n" not in str(e.value) and "bad.json" in str(e.value)


def test_load_svmlight_reads_every_row_and_splits_them(tmp_path):
    rng = np.random.default_rng(2)
    X = np.round(rng.normal(size=(60, 5)), 3) * (rng.random((60, 5)) < 0.6)
    y = rng.choice([-1, 1], 60)
    path = tmp_path / "data.svm"
    with open(path, "w") as fh:
        for row, label in zip(X, y):
            items = " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row) if v != 0)
            fh.write(f"{label:+d} {items}\n")
    data = D.load_svmlight(path, jax.random.key(0), num_clients=4, test_fraction=0.25,
                           num_features=5)
    assert data.num_classes == 2 and len(data.test_labels) == 15
    rows = np.concatenate(data.features + [data.test_features])
    labels = np.concatenate(data.labels + [data.test_labels])
    # every row once, its label -1 -> 0, +1 -> 1
    key = lambda a: [tuple(r) for r in a]
    assert sorted(zip(key(rows), labels.tolist())) == sorted(zip(key(X), ((y + 1) // 2).tolist()))
    skewed = D.load_svmlight(path, jax.random.key(0), num_clients=4, alpha=0.5,
                             test_fraction=0.25, num_features=5)  # 45 rows: 4 x 11
    assert [len(a) for a in skewed.labels] == [11] * 4
    assert set(key(np.concatenate(skewed.features))) <= set(key(X))
    (tmp_path / "bad.svm").write_text("+1 1:0.5\nnot a row\n")
    with pytest.raises(ValueError, match="bad.svm") as e:
        D.load_svmlight(tmp_path / "bad.svm", jax.random.key(0), 2)
    assert "\n" not in str(e.value)
    (tmp_path / "reg.svm").write_text("0.5 1:1\n1.5 1:2\n")
    with pytest.raises(ValueError, match="labels must be integers"):
        D.load_svmlight(tmp_path / "reg.svm", jax.random.key(0), 2)


def test_load_table_natural_partition_from_csv_and_npz(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(3)
    ids = rng.choice(["dev7", "dev2", "dev9"], 40)
    frame = pd.DataFrame({"device": ids, "a": rng.normal(size=40), "b": rng.normal(size=40),
                          "label": rng.integers(0, 3, 40)})
    frame.to_csv(tmp_path / "t.csv", index=False)
    data = D.load_table(tmp_path / "t.csv", client="device", label="label")
    for j, dev in enumerate(["dev2", "dev7", "dev9"]):
        rows = frame[frame.device == dev]
        np.testing.assert_allclose(data.features[j], rows[["a", "b"]].to_numpy())
        np.testing.assert_array_equal(data.labels[j], rows.label.to_numpy())
    np.savez(tmp_path / "t.npz", device=ids, x=frame[["a", "b"]].to_numpy(),
             label=frame.label.to_numpy())
    npz = D.load_table(tmp_path / "t.npz", client="device", label="label",
                       test_path=tmp_path / "t.npz")
    for u, v in zip(npz.features, data.features):
        np.testing.assert_array_equal(u, v)
    assert npz.test_features.shape == (40, 2)
    for kwargs, words in [(dict(client="user", label="label"), "no client column 'user'"),
                          (dict(client="device", label="a"), "labels must be integers"),
                          (dict(client="device", label="label", features=["c"]),
                           "no feature column 'c'")]:
        with pytest.raises(ValueError, match=words) as e:
            D.load_table(tmp_path / "t.csv", **kwargs)
        assert "t.csv" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="does not exist"):
        D.load_table(tmp_path / "none.csv", client="device", label="label")


def test_parquet_tables_read_or_say_what_they_need(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"c": [0, 0, 1], "x": [1.0, 2.0, 3.0], "y": [0, 1, 1]})
    path = tmp_path / "t.parquet"
    try:
        frame.to_parquet(path)
    except ImportError:
        path.write_bytes(b"PAR1")
        with pytest.raises(ValueError, match="needs pyarrow") as e:
            D.load_table(path, client="c", label="y")
        assert "\n" not in str(e.value)
        return
    assert [len(y) for y in D.load_table(path, client="c", label="y").labels] == [2, 1]


def test_shipped_sets_standardised_split_and_every_row_once():
    from sklearn.datasets import load_breast_cancer, load_wine

    for loader, raw, n in [(D.load_breast_cancer, load_breast_cancer(), 6),
                           (D.load_wine, load_wine(), 4)]:
        data = loader(jax.random.key(0), num_clients=n, alpha=None)
        train = np.concatenate(data.features)
        assert np.allclose(train.mean(0), 0, atol=1e-12) and np.allclose(train.std(0), 1)
        assert train.shape[0] + len(data.test_labels) == raw.target.size
        counts = np.bincount(np.concatenate(data.labels + [data.test_labels]))
        np.testing.assert_array_equal(counts, np.bincount(raw.target))
        test_share = np.bincount(data.test_labels) / np.bincount(raw.target)
        assert np.allclose(test_share, 0.2, atol=0.02)  # stratified
        skewed = loader(jax.random.key(0), num_clients=n)  # Dirichlet(0.5): equal sizes
        assert len({len(y) for y in skewed.labels}) == 1
        assert np.array_equal(skewed.test_features, data.test_features)


def test_a_binary_leaf_file_is_named_in_one_line(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(bytes(range(256)))
    with pytest.raises(ValueError, match=r"binary\.json: not a readable JSON file "
                                         r"\(UnicodeDecodeError") as e:
        D.load_leaf(str(path))
    assert "\n" not in str(e.value)


def test_split_parts_are_disjoint_and_cover_every_row():
    X, y = np.arange(10.0).reshape(5, 2), np.array([0, 1, 0, 1, 0])
    with pytest.raises(ValueError, match=r"row 1 is in parts\[0\] and parts\[1\]: the parts must "
                                         r"be disjoint"):
        D.split(X, y, [np.array([0, 1]), np.array([1, 2, 3, 4])])
    with pytest.raises(ValueError, match=r"row 0 is in parts\[0\] twice"):
        D.split(X, y, [np.array([0, 0, 1]), np.array([2, 3, 4])])
    with pytest.raises(ValueError, match=r"1 of the 5 rows are in no part \(the first: row 4\)"):
        D.split(X, y, [np.array([0, 1]), np.array([2, 3])])
    feats, labs = D.split(X, y, [np.array([0, 1]), np.array([2, 3])], partial=True)
    np.testing.assert_array_equal(feats[1], X[2:4])
    feats, labs = D.split(X, y, [np.array([4, 0]), np.array([1, 2, 3])])
    np.testing.assert_array_equal(labs[0], [0, 0])


def test_empty_and_header_only_files_say_they_have_no_rows(tmp_path):
    empty = tmp_path / "empty.svm"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty\.svm: no rows \(an empty svmlight file\)"):
        D.load_svmlight(str(empty), jax.random.key(0), 2)
    header = tmp_path / "header.csv"
    header.write_text("client,label,f1\n")
    with pytest.raises(ValueError, match=r"header\.csv: no rows \(columns client, label, f1 and "
                                         r"nothing under them\)"):
        D.load_table(str(header), client="client", label="label")
