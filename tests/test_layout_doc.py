"""docs/layout.md names the tests of every module that has no test file named after it.

A module ``tfr_hooks/<folder>/<name>.py`` has a test file of its name when
``tests/test_<name>.py`` or ``tests/test_<folder>_<name>.py`` exists (``test_tfrecord_memory.py``
for the ``tfrecord/memory/`` folder). Every other module is a row of the page's table
"Modules without a test file of their name", and each file a row names exists, so a module
added, moved or given its own test file shows here until the page follows.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfr_hooks"
TESTS = ROOT / "tests"
LAYOUT = ROOT / "docs" / "layout.md"
ROW = re.compile(r"^\| `(?P<module>[\w/]+\.py)` \| (?P<tests>.+) \|$")


def has_named_test_file(module: Path) -> bool:
    """Whether a test file is named after ``module`` (a path relative to the package)."""
    folders = list(module.parent.parts)
    names = {module.stem, *(f"{folder}_{module.stem}" for folder in folders)}
    names |= {f"{folders[0]}_{folder}" for folder in folders[1:]}  # tfrecord/memory/*.py
    return any((TESTS / f"test_{name}.py").exists() for name in names)


def modules_without_a_test_file() -> set[str]:
    modules = (p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    return {m.as_posix() for m in modules if not has_named_test_file(m)}


def table() -> dict[str, list[str]]:
    """The page's rows: module -> the test files named for it."""
    rows = {}
    for line in LAYOUT.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows[match["module"]] = re.findall(r"`(test_\w+\.py)`", match["tests"])
    return rows


def test_the_table_names_each_module_without_a_test_file_of_its_name() -> None:
    rows = table()
    expected = modules_without_a_test_file()
    assert sorted(expected - rows.keys()) == [], "modules to add to docs/layout.md's table"
    assert sorted(rows.keys() - expected) == [], "rows to remove from docs/layout.md's table"


def test_each_row_names_test_files_that_exist() -> None:
    rows = table()
    assert rows, "docs/layout.md has no table of modules and their test files"
    for module, files in rows.items():
        assert files, f"{module}: no test file named"
        missing = [name for name in files if not (TESTS / name).exists()]
        assert not missing, f"{module}: {missing} not in tests/"
