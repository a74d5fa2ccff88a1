"""mkdocs hooks: the notebooks and the command line as pages, and the files the guides link
to served beside them.

The guides link to ``notebooks/*.ipynb`` and ``examples/grids/*.toml``, which live at the
repository's root, outside ``docs/``; they are added to the site as they are. Each notebook
is also rendered as a page, ``notebooks/NN_name.md`` (its cells and the outputs it was stored
with, the plots as image files beside it). With the environment variable
``FEDJAX_ABC_EXECUTE_NOTEBOOKS=1`` every notebook is first run top to bottom in a fresh
kernel (nothing stored is trusted) and the page shows that run's outputs; a cell that fails
fails the build. The command line's reference (``api/cli.md``) is its own ``--help``.
"""

from __future__ import annotations

import os
import pathlib

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVED = ["notebooks/*.ipynb", "notebooks/*.py", "examples/grids/*.toml", "examples/*.py"]
EXECUTE = "FEDJAX_ABC_EXECUTE_NOTEBOOKS"
CELL_TIMEOUT = 900


def _executed(nb, path: pathlib.Path):
    """The notebook run top to bottom in a fresh kernel, from the notebooks' folder."""
    import nbclient

    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    return client.execute()


def notebook_page(path: pathlib.Path, execute: bool = False) -> tuple[str, dict]:
    """(Markdown of the notebook's cells and outputs, {image file name: bytes})."""
    import nbconvert
    import nbformat

    nb = nbformat.read(path, as_version=4)
    if execute:
        nb = _executed(nb, path)
    body, resources = nbconvert.MarkdownExporter().from_notebook_node(
        nb, resources={"output_files_dir": f"{path.stem}_files"})
    source = (f"[Download the notebook]({path.name}) ([.py]({path.stem}.py)); "
              + ("run top to bottom for this build." if execute else
                 "the outputs it was stored with (`notebooks/README.md` says how to rerun it)."))
    return f"{source}\n\n{body}", resources.get("outputs", {})


def cli_page() -> str:
    """The command line's reference: ``fedjax-abc --help`` and each command's help."""
    import argparse

    from fedjax_abc.cli import build_parser

    os.environ.setdefault("COLUMNS", "92")
    parser = build_parser()
    parts = ["# Command line: fedjax-abc\n",
             "Generated at build from the command's own help (`fedjax-abc COMMAND --help`).\n",
             f"```text\n{parser.format_help()}```\n"]
    for action in parser._actions:  # the subcommands, in the order they were added
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts.append(f"## fedjax-abc {name}\n\n```text\n{sub.format_help()}```\n")
    return "\n".join(parts)


def on_files(files, config):
    for pattern in SERVED:
        for path in sorted(ROOT.glob(pattern)):
            uri = path.relative_to(ROOT).as_posix()
            files.append(File(uri, src_dir=str(ROOT), dest_dir=config["site_dir"],
                              use_directory_urls=False))
    files.append(File.generated(config, "api/cli.md", content=cli_page()))
    execute = os.environ.get(EXECUTE, "") not in ("", "0")
    for path in sorted(ROOT.glob("notebooks/*.ipynb")):
        text, images = notebook_page(path, execute)
        files.append(File.generated(config, f"notebooks/{path.stem}.md", content=text))
        for name, data in images.items():
            files.append(File.generated(config, f"notebooks/{name}", content=data))
    return files
