"""The documentation site: every public name in the API reference with a docstring, the
guides' code runs as written, and ``mkdocs build --strict`` passes.

The API reference (docs/api/*.md) is mkdocstrings entries, ``::: fedjax_abc.Name``; a
module's entry renders its members unless its options say ``members: false`` or list
them. A public name is one in the ``__all__`` of a public module.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys
import time
import types
from typing import NamedTuple

import nbformat
import pytest

from markdown_blocks import python_blocks, run_blocks

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PUBLIC = ["fedjax_abc", "fedjax_abc.algorithms", "fedjax_abc.transforms", "fedjax_abc.problems",
          "fedjax_abc.data", "fedjax_abc.theory", "fedjax_abc.timing", "fedjax_abc.stats",
          "fedjax_abc.robust", "fedjax_abc.decentral"]

# ------------------------------------------------------------------ the API reference

ENTRY = re.compile(r"^::: *([\w.]+)[ \t]*\n((?:[ \t]+.*\n?)*)", flags=re.M)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One ``::: path`` entry of a page: the object it names and the members it renders
    (None: every public member of a module)."""

    path: str
    members: tuple | None


def entries(text: str) -> list:
    """The mkdocstrings entries of a Markdown page, with the members their options list."""
    out = []
    for path, options in ENTRY.findall(text):
        members = None
        if re.search(r"^\s+members:\s*(false|\[\])\s*$", options, flags=re.M):
            members = ()
        else:
            listed = re.search(r"^(\s+)members:\s*\n((?:\1\s+- .*\n?)+)", options, flags=re.M)
            if listed:
                members = tuple(re.findall(r"- *(\S+)", listed.group(2)))
        out.append(Entry(path, members))
    return out


def api_entries() -> list:
    return [e for page in sorted((DOCS / "api").glob("*.md")) for e in entries(page.read_text())]


def _resolve(path: str):
    """The object an entry names (a module, or an attribute of one), or None."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
        return obj
    return None


def rendered(all_entries: list) -> list:
    """Every object the entries render: each entry's own, and a module entry's members (all
    of its ``__all__`` unless its options say otherwise)."""
    objects = []
    for entry in all_entries:
        obj = _resolve(entry.path)
        if obj is None:
            continue
        objects.append(obj)
        if isinstance(obj, types.ModuleType):
            names = getattr(obj, "__all__", []) if entry.members is None else entry.members
            objects.extend(getattr(obj, n) for n in names if hasattr(obj, n))
    return objects


def not_in_reference(module: types.ModuleType, all_entries: list) -> list:
    """The public names of ``module`` that no entry renders (as itself or as the same object
    under another public path, e.g. ``fa.local_run`` as ``fa.algorithms.local_run``)."""
    objects = rendered(all_entries)
    return [n for n in module.__all__
            if not any(o is getattr(module, n) for o in objects)]


def summary(obj, name: str) -> str:
    """The first line of the object's own docstring; '' where it has none. A class's
    inherited docstring does not count, nor the signature that dataclasses and NamedTuples
    write in place of a missing one (``Name(a, b)``)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    lines = (doc or "").strip().splitlines()
    first = lines[0].strip() if lines else ""
    return "" if re.match(rf"{re.escape(name)}\(", first) else first


def without_docstring(module: types.ModuleType) -> list:
    return [n for n in module.__all__ if not summary(getattr(module, n), n)]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_is_in_the_api_reference(name):
    module = importlib.import_module(name)
    assert not_in_reference(module, api_entries()) == []


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_has_a_docstring(name):
    assert without_docstring(importlib.import_module(name)) == []


def test_every_api_entry_names_an_object():
    for entry in api_entries():
        assert _resolve(entry.path) is not None, entry.path


def test_the_reference_covers_what_it_claims():
    """The numbers the report gives: names per public module, and all of them rendered."""
    counts = {name: len(importlib.import_module(name).__all__) for name in PUBLIC}
    assert all(c > 0 for c in counts.values()) and sum(counts.values()) >= 200


def test_the_docs_checks_can_fail():
    """Negative control: a module with an undocumented function, a NamedTuple and a
    dataclass without docstrings, and a page that leaves one name out, is reported."""

    def documented():
        """Does something."""

    def undocumented():
        pass

    class Pair(NamedTuple):
        a: int
        b: int

    @dataclasses.dataclass
    class Point:
        x: float

    class Base:
        """A documented base."""

    class Child(Base):  # inherits its docstring: not its own
        pass

    fake = types.ModuleType("fake_public")
    for obj in (documented, undocumented, Pair, Point, Child):
        setattr(fake, obj.__name__, obj)
    fake.__all__ = ["documented", "undocumented", "Pair", "Point", "Child"]
    assert without_docstring(fake) == ["undocumented", "Pair", "Point", "Child"]

    sys.modules["fake_public"] = fake
    try:
        page = ("# Fake\n\n::: fake_public.documented\n\n---\n\n::: fake_public.Pair\n"
                "    options:\n        show_root_heading: true\n\n"
                "::: fake_public\n    options:\n        members:\n            - Point\n")
        assert not_in_reference(fake, entries(page)) == ["undocumented", "Child"]
        # a module entry without options renders them all; members: false renders none
        assert not_in_reference(fake, entries("::: fake_public\n")) == []
        assert len(not_in_reference(
            fake, entries("::: fake_public\n    options:\n        members: false\n"))) == 5
    finally:
        del sys.modules["fake_public"]


def test_version_is_the_package_metadata():
    import fedjax_abc as fa

    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, flags=re.M).group(1) == fa.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {fa.__version__}" in changelog


# ------------------------------------------------------------------ the guides' code

def _pages():
    pages = [DOCS / "index.md", DOCS / "getting-started.md"] + sorted((DOCS / "guides").glob("*.md"))
    return [p for p in pages if python_blocks(p)]


# pages whose blocks run in a few seconds on 2 cores run by default; the others (each over
# about 10 s: several compilations, or the first simulation's 5000 rounds) with the long checks
FAST = {"index.md", "theory.md", "long-runs.md"}


def _page_param(path):
    marks = () if path.name in FAST else (pytest.mark.slow,)
    return pytest.param(path, marks=marks, id=str(path.relative_to(DOCS)))


@pytest.mark.parametrize("page", [_page_param(p) for p in _pages()])
def test_guide_python_blocks_run(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them there
    assert run_blocks(page) >= 1
    out = capsys.readouterr().out
    if page.name == "getting-started.md":  # the first simulation, as in the README
        assert "(100, 51)" in out and re.search(r"^0\.0$", out, flags=re.M)
        assert re.search(r"^True$", out, flags=re.M)  # the file round trip


def test_every_guide_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in [DOCS / "index.md", DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md")),
                 *sorted((DOCS / "api").glob("*.md")), DOCS / "performance.md",
                 DOCS / "comparisons.md", DOCS / "reproduction.md", DOCS / "changelog.md"]:
        assert page.relative_to(DOCS).as_posix() in nav, page


# ------------------------------------------------------------------ the site builds

_MKDOCS = all(importlib.util.find_spec(m) for m in ("mkdocs", "material", "mkdocstrings_handlers"))


@pytest.mark.skipif(not _MKDOCS, reason="mkdocs, mkdocs-material and mkdocstrings are the "
                    "docs extra (pip install -e \".[docs]\"), not installed here")
def test_mkdocs_build_strict(tmp_path):
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "algorithms" / "index.html").exists()
    cli = (tmp_path / "site" / "api" / "cli" / "index.html").read_text()
    for command in ("reproduce", "report", "compare", "run", "merge"):
        assert f"fedjax-abc {command}" in cli
    typeset = re.search(r'processHtmlClass: "([^"]*)"', (DOCS / "_static" / "mathjax.js")
                        .read_text()).group(1).split("|")
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):  # every notebook a page
        page = (tmp_path / "site" / "notebooks" / nb.stem / "index.html").read_text()
        images = re.findall(r'src="\.\./([^"]+\.png)"', page)
        assert images, f"{nb.name}'s page shows no plot"
        assert all((tmp_path / "site" / "notebooks" / img).exists() for img in images)
        # its math marked for MathJax, which the page loads; a heading's math in the table
        # of contents is plain text in the theme's md-ellipsis spans, which MathJax typesets
        markdown = "".join(c.source for c in nbformat.read(nb, as_version=4).cells
                           if c.cell_type == "markdown")
        if "$" in markdown:
            assert 'class="arithmatex"' in page and "tex-mml-chtml.js" in page, nb.name
        if re.search(r'<span class="md-ellipsis">[^<]*\\\(', page):
            assert "md-ellipsis" in typeset, f"{nb.name}: math in the table of contents"
    assert time.perf_counter() - start < 120


def _docs_module(name: str):
    """A module of ``docs/_ext`` (the site's hooks and docstring extension), loaded by path."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not _MKDOCS, reason="the docs extra is not installed here")
def test_a_notebook_page_shows_its_cells_and_plots():
    text, images = _docs_module("hooks").notebook_page(ROOT / "notebooks" / "08_time.ipynb")
    assert "simulate_async" in text and "```python" in text
    assert images and all(name.endswith(".png") for name in images)
    assert all(f"]({name})" in text for name in images)


@pytest.mark.slow
@pytest.mark.skipif(not _MKDOCS, reason="the docs extra is not installed here")
def test_a_notebook_page_can_be_executed_at_build(tmp_path):
    """With FEDJAX_ABC_EXECUTE_NOTEBOOKS=1 the page shows a fresh run's outputs."""
    text, images = _docs_module("hooks").notebook_page(ROOT / "notebooks" / "03_theory_explorer.ipynb",
                                          execute=True)
    assert images and "run top to bottom for this build" in text



@pytest.mark.skipif(not _MKDOCS, reason="the docs extra is not installed here")
def test_roles_link_to_the_reference_where_it_has_a_section():
    roles = _docs_module("rst_roles")
    text = roles.markdown("Uses :class:`~fedjax_abc.algorithms.FedAvg` and "
                          ":func:`~fedjax_abc._engine._random.client_words`::")
    assert text == ("Uses [`FedAvg`][fedjax_abc.algorithms.FedAvg] and `client_words`:")
    assert "fedjax_abc.timing.FedBuff" in roles.documented()
