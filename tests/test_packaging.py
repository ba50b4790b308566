"""The suite tests the installed wheel, and the wheel carries what a release needs."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest

import tfr_hooks

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif("TOX_ENV_NAME" not in os.environ, reason="only tox installs the wheel")
def test_tox_runs_the_suite_against_the_installed_wheel() -> None:
    package_dir = Path(tfr_hooks.__file__).resolve().parent
    assert "site-packages" in package_dir.parts, package_dir
    assert package_dir != ROOT / "tfr_hooks"  # not the checkout's source tree


def test_the_distribution_ships_its_license_and_type_marker() -> None:
    dist = metadata.distribution("tfr_hooks")
    files = {str(f) for f in dist.files or []}
    assert any(f.endswith("LICENSE") for f in files), sorted(files)
    assert "tfr_hooks/py.typed" in files
    assert dist.metadata["License-Expression"] == "Apache-2.0"
