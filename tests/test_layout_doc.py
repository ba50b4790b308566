"""docs/layout.md names the tests of every module that has no test file named after it.

A module ``tfr_hooks/<folder>/<name>.py`` has a test file of its name when
``tests/test_<name>.py`` or ``tests/test_<folder>_<name>.py`` exists, or its folder's
(``test_tfrecord_memory.py`` for the ``tfrecord/pipelines/memory/`` folder). Every other module
is a row of the page's table "Modules without a test file of their name", and each file a row
names exists, so a module added, moved or given its own test file shows here until the page
follows. A module whose only test file of its name is its folder's may have a row too
(``tfrecord/formats/damage.py`` is tested in ``test_damaged_records.py``, not in
``test_tfrecord_sources.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfr_hooks"
TESTS = ROOT / "tests"
LAYOUT = ROOT / "docs" / "layout.md"
ROW = re.compile(r"^\| `(?P<module>[\w/]+\.py)` \| (?P<tests>.+) \|$")


def has_named_test_file(module: Path, *, folder: bool = True) -> bool:
    """Whether a test file is named after ``module`` (a path relative to the package).

    With ``folder``, a test file named after one of its folders counts too.
    """
    folders = list(module.parent.parts)
    names = {module.stem, *(f"{parent}_{module.stem}" for parent in folders)}
    if folder:  # tfrecord/pipelines/memory/*.py
        names |= {f"{folders[0]}_{name}" for name in folders[1:]}
    return any((TESTS / f"test_{name}.py").exists() for name in names)


def modules_without_a_test_file(*, folder: bool = True) -> set[str]:
    modules = (p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    return {m.as_posix() for m in modules if not has_named_test_file(m, folder=folder)}


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
    allowed = modules_without_a_test_file(folder=False)  # their folder's test file aside
    assert sorted(expected - rows.keys()) == [], "modules to add to docs/layout.md's table"
    assert sorted(rows.keys() - allowed) == [], "rows to remove from docs/layout.md's table"


def test_each_row_names_test_files_that_exist() -> None:
    rows = table()
    assert rows, "docs/layout.md has no table of modules and their test files"
    for module, files in rows.items():
        assert files, f"{module}: no test file named"
        missing = [name for name in files if not (TESTS / name).exists()]
        assert not missing, f"{module}: {missing} not in tests/"
