"""A mkdocs hook: the benchmark results the pages link, published beside the pages.

The pages of ``docs/`` link the generated results in ``bench/results/`` by their path in the
repository (``../bench/results/latest.md``), which GitHub follows. mkdocs only knows the
files under ``docs/``: this hook adds every file of ``bench/results/`` to the site at its
repository path (``bench/results/latest.md`` becomes a page of its own) and rewrites the
pages' relative links that leave ``docs/`` to those paths, so that ``mkdocs build --strict``
checks them like any other link: a link to a file that does not exist still fails.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

__all__ = ["on_files", "on_page_markdown"]

ROOT = Path(__file__).resolve().parent.parent
#: The folders of the repository published at their own path, beside the pages.
MOUNTED = ("bench/results",)
LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?\))")


def on_files(files: Files, config: Any) -> Files:
    for folder in MOUNTED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and not path.name.endswith(".tmp"):
                src_uri = path.relative_to(ROOT).as_posix()
                files.append(
                    File(
                        src_uri,
                        str(ROOT),
                        config["site_dir"],
                        config["use_directory_urls"],
                    )
                )
    return files


def _repository_path(src_uri: str) -> str:
    """Where a page of the site sits in the repository."""
    if src_uri.startswith(tuple(f"{folder}/" for folder in MOUNTED)):
        return src_uri
    return f"docs/{src_uri}"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    here = posixpath.dirname(page.file.src_uri)
    in_repository = posixpath.dirname(_repository_path(page.file.src_uri))

    def rewrite(match: re.Match[str]) -> str:
        url = match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", url) or url.startswith("/"):
            return match.group(0)  # another site, or an absolute path: mkdocs' own rules
        target = posixpath.normpath(posixpath.join(in_repository, url))
        site_path = target[len("docs/") :] if target.startswith("docs/") else target
        new = posixpath.relpath(site_path, here or ".")
        return match.group(1) + new + match.group(3)

    return LINK.sub(rewrite, markdown)
