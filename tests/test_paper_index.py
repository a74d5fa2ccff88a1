"""The index of the paper's numbered objects (fedjax_abc.repro.index) against the package.

Every implementation resolves by import and is public, every test names a function of a
file in tests/, the numbering is complete (equations 1-49 without gap or duplicate, and so
on), statuses agree with the fields, sections are headings of docs/reproduction.md, and
index_lines() gives one table row per object with counts that match. Negative controls: a
wrong path, a missing test, a gap in the numbering and a wrong status are caught. No
simulation runs.
"""

import collections
import doctest
import pathlib
import re

import pytest

from fedjax_abc.repro import index

TESTS = pathlib.Path(__file__).resolve().parent
REPORT = TESTS.parent / "docs" / "reproduction.md"

EXPECTED = {
    "equation": [str(i) for i in range(1, 50)],
    "definition": ["1"],
    "assumption": ["1", "2", "3"],
    "lemma": [str(i) for i in range(1, 11)],
    "remark": ["1", "2", "3", "4"],
    "theorem": ["1", "2", "3"],
    "algorithm": ["1"],
    "figure": ["1", "2", "3"],
    "table": ["I", "II"],
}
ROMAN = {"I": 1, "II": 2}


def _resolution_error(obj):
    """None if obj.implementation is None or a public path that imports, else why not."""
    path = obj.implementation
    if path is None:
        return None
    if not path.startswith("fedjax_abc.") or any(p.startswith("_") for p in path.split(".")):
        return f"{obj.label}: {path} is not a public fedjax_abc path"
    try:
        index.resolve(path)
    except (ImportError, AttributeError) as err:
        return f"{obj.label}: {path} does not resolve ({err})"
    return None


def _missing_test(ref):
    """None if ref is None or 'tests/<file>.py::<name>' with a 'def <name>(' there, else why not."""
    if ref is None:
        return None
    m = re.fullmatch(r"tests/(test_\w+\.py)::(test_\w+)", ref)
    if not m:
        return f"{ref}: not of the form tests/test_x.py::test_name"
    path = TESTS / m.group(1)
    if not path.is_file():
        return f"{ref}: no file {path.name} in tests/"
    if f"def {m.group(2)}(" not in path.read_text():
        return f"{ref}: {path.name} has no def {m.group(2)}("
    return None


def _numbering_errors(objects):
    """Gaps, duplicates and unknown kinds against EXPECTED."""
    by_kind = collections.defaultdict(list)
    for o in objects:
        by_kind[o.kind].append(o.number)
    errors = [f"unknown kind {k}" for k in by_kind if k not in EXPECTED]
    for kind, numbers in EXPECTED.items():
        got = by_kind.get(kind, [])
        if sorted(got, key=_key) != numbers:
            errors.append(f"{kind}: {sorted(got, key=_key)} != {numbers}")
        if got != sorted(got, key=_key):
            errors.append(f"{kind}: not in paper order: {got}")
    return errors


def _key(number):
    return ROMAN.get(number) or int(number)


def _status_error(obj):
    """None if the status is a known word consistent with the three fields, else why not."""
    if obj.status not in index.STATUSES:
        return f"{obj.label}: unknown status {obj.status!r}"
    fields = (obj.implementation, obj.test, obj.section)
    if obj.status in (index.DEFINITION, index.EXTERNAL, index.PROOF_STEP, index.NOT_CHECKED):
        if any(fields):
            return f"{obj.label}: {obj.status!r} with fields {fields}"
        return None
    try:
        expected = index.status_of(*fields)
    except ValueError as err:
        return f"{obj.label}: {err}"
    return None if expected == obj.status else f"{obj.label}: {obj.status!r}, fields give {expected!r}"


def test_implementations_resolve():
    errors = [e for o in index.OBJECTS if (e := _resolution_error(o))]
    assert not errors, errors
    assert callable(index.resolve("fedjax_abc.theory.sigma_f_star"))
    assert index.resolve("fedjax_abc.Problem.value") is index.resolve("fedjax_abc.Problem").value


def test_tests_exist():
    errors = [e for o in index.OBJECTS if (e := _missing_test(o.test))]
    assert not errors, errors


def test_numbering_is_complete_and_in_paper_order():
    assert _numbering_errors(index.OBJECTS) == []
    assert len(index.OBJECTS) == sum(map(len, EXPECTED.values())) == 76
    assert len({(o.kind, o.number) for o in index.OBJECTS}) == len(index.OBJECTS)


def test_statuses_agree_with_the_fields():
    errors = [e for o in index.OBJECTS if (e := _status_error(o))]
    assert not errors, errors
    assert all(o.status == index.PROOF_STEP for o in index.OBJECTS
               if o.kind == "equation" and int(o.number) >= 29 and o.test is None)


def test_sections_are_headings_of_the_report():
    used = {o.section for o in index.OBJECTS} - {None}
    assert used <= set(index.SECTIONS), used - set(index.SECTIONS)
    headings = [line[3:] for line in REPORT.read_text().splitlines() if line.startswith("## ")]
    for name, start in index.SECTIONS.items():
        assert any(h.startswith(start) for h in headings), (name, start)


def test_index_lines():
    lines = index.index_lines()
    assert lines[0] == "## Index of the paper's numbered objects"
    rows = [line for line in lines if line.startswith("| ")]
    assert rows[0] == "| object | what | implementation | test | report section | status |"
    rows = rows[1:]
    assert len(rows) == len(index.OBJECTS)
    for row, obj in zip(rows, index.OBJECTS):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 6, row
        assert cells[0] == obj.label and cells[5] == obj.status
        assert cells[2] == (f"`{obj.implementation}`" if obj.implementation else "-")
    for word in index.STATUSES:
        assert f"*{word}*" in lines[2]
    # the count line: the numbers, in the order of STATUSES, are those of OBJECTS
    counts = collections.Counter(o.status for o in index.OBJECTS)
    line = next(x for x in lines if "numbered objects are" in x)
    numbers = [int(v) for v in re.findall(r"\d+", line)]
    assert numbers == [counts[index.CHECKED], len(index.OBJECTS)] + [counts[s] for s in index.STATUSES[1:]]
    assert sum(numbers) - len(index.OBJECTS) == len(index.OBJECTS)


def test_docstring_example():
    failures, tried = doctest.testmod(index, optionflags=doctest.ELLIPSIS, verbose=False)
    assert tried > 0 and failures == 0


def test_find():
    assert index.find("table", "II").label == "Table II"
    assert index.find("lemma", 3).implementation == "fedjax_abc.theory.sampling_error"
    with pytest.raises(KeyError, match="lemma 11"):
        index.find("lemma", 11)


# ------------------------------------------------------------------------ negative controls


def test_the_checks_can_fail():
    good = index.find("equation", 11)
    assert _resolution_error(good) is None
    wrong = good._replace(implementation="fedjax_abc.theory.sigma_f_starr")
    assert "does not resolve" in _resolution_error(wrong)
    with pytest.raises(AttributeError):
        index.resolve(wrong.implementation)
    with pytest.raises(ModuleNotFoundError):
        index.resolve("no_such_package.f")
    assert "does not resolve" in _resolution_error(good._replace(implementation="fedjax_abc.nope.f"))
    assert "not a public" in _resolution_error(
        good._replace(implementation="fedjax_abc._theory._bounds.explicit_rate"))

    assert _missing_test(good.test) is None
    assert "has no def" in _missing_test("tests/test_theory_bounds.py::test_no_such_test")
    assert "no file" in _missing_test("tests/test_no_such_file.py::test_x")
    assert "not of the form" in _missing_test("test_theory_bounds.py::test_x")

    gap = tuple(o for o in index.OBJECTS if o.label != "eq. (7)")
    assert any("equation" in e for e in _numbering_errors(gap))
    swapped = list(index.OBJECTS)
    i, j = swapped.index(index.find("lemma", 1)), swapped.index(index.find("lemma", 2))
    swapped[i], swapped[j] = swapped[j], swapped[i]
    assert any("paper order" in e for e in _numbering_errors(swapped))
    assert _numbering_errors(index.OBJECTS + (good,))  # a duplicate

    assert "fields give" in _status_error(good._replace(status=index.IMPLEMENTED))
    assert "unknown status" in _status_error(good._replace(status="fine"))
    assert "with fields" in _status_error(good._replace(status=index.PROOF_STEP))
