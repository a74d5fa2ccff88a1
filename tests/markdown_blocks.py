"""The ```python blocks of a Markdown page (the README, the documentation's guides), and a
runner that executes them as a reader would: in order, in one namespace, in a folder of
their own."""

from __future__ import annotations

import pathlib
import re

BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def python_blocks(path: pathlib.Path) -> list:
    """The source of each ```python block of the page, in order."""
    return BLOCK.findall(pathlib.Path(path).read_text())


def run_blocks(path: pathlib.Path) -> int:
    """Executes the page's python blocks in order in one namespace (a later block may use
    an earlier one's names, as a reader who runs them in turn would); returns how many ran.
    A failing block raises with its page and block number in the traceback's file name."""
    namespace: dict = {}
    blocks = python_blocks(path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{pathlib.Path(path).name}[block {i}]", "exec"), namespace)
    return len(blocks)
