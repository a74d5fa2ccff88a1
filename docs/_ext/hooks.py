"""mkdocs hooks: the notebooks and the example grid files served beside the pages.

The guides link to ``notebooks/*.ipynb`` and ``examples/grids/*.toml``, which live at the
repository's root, outside ``docs/``. They are added to the site as they are (the
notebooks with the outputs they were executed with; nothing is run at build time).
"""

from __future__ import annotations

import pathlib

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVED = ["notebooks/*.ipynb", "notebooks/*.py", "examples/grids/*.toml", "examples/*.py"]


def on_files(files, config):
    for pattern in SERVED:
        for path in sorted(ROOT.glob(pattern)):
            uri = path.relative_to(ROOT).as_posix()
            files.append(File(uri, src_dir=str(ROOT), dest_dir=config["site_dir"],
                              use_directory_urls=False))
    return files
