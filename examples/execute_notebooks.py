"""Runs notebooks top to bottom and stores them without timestamps.

    python examples/execute_notebooks.py notebooks/01_quickstart.py [more .py or .ipynb ...]

Each notebook's cells are taken from its py:percent file (jupytext), run in a fresh
``python3`` kernel from the notebooks folder, and written to its paired ``.ipynb`` with the
outputs but without the per-cell execution timestamps that nbclient records by default
(``record_timing=False``), so that rerunning an unchanged notebook leaves no diff but its
outputs. Needs ``pip install -e ".[dev]"``.
"""

import pathlib
import sys


def execute(path) -> pathlib.Path:
    import jupytext
    from nbclient import NotebookClient

    py = pathlib.Path(path).with_suffix(".py")
    ipynb = py.with_suffix(".ipynb")
    nb = jupytext.read(py)
    if ipynb.exists():  # keep the stored notebook's metadata (kernelspec, jupytext formats)
        stored = jupytext.read(ipynb)
        nb.metadata = stored.metadata
        if len(stored.cells) == len(nb.cells):  # and its cell ids, which jupytext draws anew
            for cell, old in zip(nb.cells, stored.cells):
                if "id" in old:
                    cell.id = old.id
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(py.parent.resolve())}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    jupytext.write(nb, ipynb, fmt="ipynb")
    return ipynb


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        print("wrote", execute(arg))
