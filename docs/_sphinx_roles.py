"""A griffe extension: the package's Sphinx roles as cross-references of the API site.

The docstrings are Google style, and name other objects with Sphinx roles
(``:class:`~tfr_hooks.Hook```, ``:func:`dataset```). mkdocstrings does not read roles, so
this extension turns each into an optional cross-reference of mkdocs-autorefs: a link
where the site documents the object, the name as code where it does not (an internal
helper), never a broken link. A relative name is looked up from the object whose
docstring holds it, as Sphinx would; ``~`` keeps only the last part as the title.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

__all__ = ["SphinxRoles"]

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`(~?)([\w.]+)(\(\))?`")


def _resolve(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as written in ``obj``'s docstring (``name`` if unknown)."""
    head, _, rest = name.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            found = scope.resolve(head)
        except (griffe.NameResolutionError, AttributeError, KeyError):
            scope = scope.parent
            continue
        return f"{found}.{rest}" if rest else found
    return name


def convert(obj: griffe.Object, text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        short, name, call = match.groups()
        title = (name.rsplit(".", 1)[-1] if short else name) + (call or "")
        target = html.escape(_resolve(obj, name), quote=True)
        return (
            f'<autoref identifier="{target}" optional><code>{html.escape(title)}</code></autoref>'
        )

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = convert(obj, obj.docstring.value)
            stack.extend(m for m in obj.members.values() if isinstance(m, griffe.Object))
