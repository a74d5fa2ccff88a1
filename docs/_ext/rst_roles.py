"""The docstrings' reStructuredText roles as Markdown, for the API reference.

The package's docstrings name other objects as ``:class:`~fedjax_abc.algorithms.FedAvg```,
``:func:`simulate``` and so on, and end a paragraph that introduces a literal block with
``::``. mkdocstrings reads Markdown: a role becomes inline code of the name it shows (the
last component after ``~``), a link to that object's section where the API reference has
one, and ``::`` a single colon. A section headed ``Example:`` is read as Google's ``Examples:``, so
that its doctests render as code.
"""

from __future__ import annotations

import pathlib
import re

import griffe

ROLE = re.compile(r":(?:class|func|mod|meth|data|attr|obj|exc):`(~?)([^`]+)`")
LITERAL = re.compile(r"(\S)::$", flags=re.M)
EXAMPLE = re.compile(r"^(\s*)Example:$", flags=re.M)


API = pathlib.Path(__file__).resolve().parents[1] / "api"
ENTRY = re.compile(r"^::: *([\w.]+)", flags=re.M)


def documented() -> frozenset:
    """The objects the API reference has a section for (its ``::: name`` entries)."""
    return frozenset(m.group(1) for page in sorted(API.glob("*.md"))
                     for m in ENTRY.finditer(page.read_text(encoding="utf-8")))


_DOCUMENTED = documented()


def _name(match: re.Match) -> str:
    """The role's name as inline code, a link to its section where the reference has one
    (``[`FedAvg`][fedjax_abc.algorithms.FedAvg]``, which mkdocs-autorefs resolves)."""
    tilde, target = match.groups()
    shown = f"`{target.rsplit('.', 1)[-1] if tilde else target}`"
    return f"[{shown}][{target}]" if target in _DOCUMENTED else shown


def markdown(text: str) -> str:
    """``text`` with its roles as inline code (linked where documented), ``word::`` as
    ``word:`` and ``Example:`` as ``Examples:``."""
    return EXAMPLE.sub(r"\1Examples:", LITERAL.sub(r"\1:", ROLE.sub(_name, text)))


class RstRoles(griffe.Extension):
    """Rewrites every docstring as :func:`markdown` does, when griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
