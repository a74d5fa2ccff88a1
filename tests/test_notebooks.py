"""The example notebooks in notebooks/: each is a jupytext py:percent file paired with its
executed .ipynb; the two hold the same cells, the .ipynb its outputs, under 2 MB, and the
notebook runs top to bottom (with -m slow).

Each run uses a fresh ``python3`` kernel on a copy of the notebook in a temporary folder (so
nothing in notebooks/ or left by an earlier run can help it), with its stored outputs
cleared first.
"""

import pathlib
import shutil

import jupytext
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NAMES = ["01_quickstart.ipynb", "02_reproduce_paper.ipynb", "03_theory_explorer.ipynb",
         "04_algorithms.ipynb", "05_learning.ipynb", "06_participation.ipynb",
         "07_compression_privacy.ipynb", "08_time.ipynb", "09_robust.ipynb",
         "10_personalised.ipynb", "11_decentralised.ipynb"]
MAX_BYTES = 2 * 1024 * 1024
CELL_TIMEOUT = 600


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _outputs(nb):
    return [o for c in _code_cells(nb) for o in c.get("outputs", [])]


def _images(nb):
    return [o for o in _outputs(nb) if "image/png" in o.get("data", {})]


def test_every_notebook_is_a_python_file_paired_with_its_ipynb():
    assert sorted(p.name for p in NB_DIR.glob("*.ipynb")) == NAMES
    assert sorted(p.name for p in NB_DIR.glob("*.py")) == [n[:-6] + ".py" for n in NAMES]


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebook_is_small_and_executed(name):
    path = NB_DIR / name
    assert path.stat().st_size < MAX_BYTES, f"{name} is {path.stat().st_size} bytes"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = _code_cells(nb)
    assert code, f"{name} has no code cells"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        f"{name} was not stored from one top-to-bottom run")
    errors = [o for o in _outputs(nb) if o.output_type == "error"]
    assert not errors, f"{name} stores an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    assert _images(nb), f"{name} stores no plot"
    silent = [j for j, c in enumerate(code) if ("print(" in c.source or "plt.show()" in c.source)
              and not c.outputs]
    assert not silent, f"{name}: code cells {silent} print or plot but store no output"
    text = "".join(o.get("text", "") for o in _outputs(nb) if o.output_type == "stream")
    assert str(ROOT) not in text, f"{name} stores an absolute path of this checkout"


@pytest.mark.parametrize("name", NAMES)
def test_ipynb_and_py_hold_the_same_cells(name):
    stored = nbformat.read(NB_DIR / name, as_version=4)
    source = jupytext.read(NB_DIR / (name[:-6] + ".py"))
    assert [(c.cell_type, c.source) for c in stored.cells] == [
        (c.cell_type, c.source) for c in source.cells
    ], (f"{name} differs from {name[:-6]}.py; rerun it: python examples/execute_notebooks.py "
        f"notebooks/{name[:-6]}.py")
    assert stored.metadata["kernelspec"]["name"] == "python3"
    assert stored.metadata["jupytext"]["formats"] == "ipynb,py:percent"


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebook_has_no_timestamps(name):
    """A rerun of an unchanged notebook must leave no diff but its outputs."""
    stored = nbformat.read(NB_DIR / name, as_version=4)
    stamped = [c.get("id") for c in stored.cells if "execution" in c.get("metadata", {})]
    assert not stamped, f"{name}: cells {stamped} hold execution timestamps; store it with " \
                        "python examples/execute_notebooks.py"


# Executing a notebook starts a kernel that imports JAX and compiles its runs (30 s to a
# minute each on 2 cores): they all run with the long checks (pytest -m slow), to keep the
# default run under 10 minutes. Every stored notebook's cells, outputs and size are checked
# in the default run above.
RUN_BY_DEFAULT = ()  # every notebook runs with the long checks (pytest -m slow)


@pytest.mark.parametrize("name", [n if n in RUN_BY_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in NAMES])
def test_notebook_runs_top_to_bottom(name, tmp_path):
    from nbclient import NotebookClient  # .[dev] only: the light .[test] install lacks it

    copy = tmp_path / name
    shutil.copyfile(NB_DIR / name, copy)
    nb = nbformat.read(copy, as_version=4)
    for cell in _code_cells(nb):
        cell.outputs = []
        cell.execution_count = None
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError at the first cell that fails
    errors = [o for o in _outputs(nb) if o.output_type == "error"]
    assert not errors
    assert _images(nb), f"{name} drew no plot"
    assert all(c.execution_count is not None for c in _code_cells(nb))
