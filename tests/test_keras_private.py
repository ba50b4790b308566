"""tfr_hooks.keras_private: each private Keras attribute is where the module expects it.

Checked on real objects of every supported Keras (``keras`` 3 and ``tf_keras``), so that
a release that moves or renames one fails here, not in a resumed run. The module is also
the only one of the package that names them.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tfr_hooks import keras_private
from tfr_hooks.keras_private import (
    PRIVATE_ATTRIBUTES,
    backup_files,
    backup_metadata_path,
    set_backup_epoch,
    set_backup_files,
    set_backup_last_batch,
    take_restored_epoch,
    tf_keras_restored_epoch,
)

PACKAGE = Path(keras_private.__file__).resolve().parent
NAMES = {
    name for owners in PRIVATE_ATTRIBUTES.values() for names in owners.values() for name in names
}


def small_model(flavor: str) -> Any:
    """A compiled, built ``4 -> 2`` model of the Keras ``flavor`` (eager)."""
    keras = importlib.import_module(flavor)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    return model


def instance(flavor: str, owner: str, tmp_path: Path) -> Any:
    """A real instance of ``flavor``'s class ``owner``, as keras_private meets it."""
    if owner == "Model":
        return small_model(flavor)
    keras = importlib.import_module(flavor)
    if owner == "callbacks.BackupAndRestore":
        return keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    raise AssertionError(f"no instance for {flavor}.{owner}: add one here")


@pytest.mark.parametrize("flavor", sorted(PRIVATE_ATTRIBUTES))
def test_each_private_attribute_is_where_the_module_expects_it(flavor: str, tmp_path: Path) -> None:
    for owner, names in PRIVATE_ATTRIBUTES[flavor].items():
        obj = instance(flavor, owner, tmp_path)
        missing = [name for name in names if not hasattr(obj, name)]
        assert not missing, f"{flavor}.{owner} has no {missing}: update tfr_hooks/keras_private.py"


def test_every_flavor_the_package_supports_is_checked() -> None:
    assert set(PRIVATE_ATTRIBUTES) == {"keras", "tf_keras"}


def private_names(path: Path) -> set[str]:
    """The ``_name`` attributes (not ``self``'s) and ``"_name"`` strings in ``path``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in {"self", "cls"}):
                found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return {name for name in found if name.isidentifier() and re.match("_[^_]", name)}


def test_the_module_declares_every_private_attribute_it_touches() -> None:
    assert private_names(PACKAGE / "keras_private.py") == NAMES


@pytest.mark.main_only  # reads the package's source: the same on every version
def test_no_other_module_names_a_private_keras_attribute() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "keras_private.py":
            used = private_names(path) & NAMES
            assert not used, f"{path.relative_to(PACKAGE.parent)} touches {sorted(used)}"


def test_keras_backup_position_round_trips_through_its_own_save(tmp_path: Path) -> None:
    """What the setters write is what Keras 3's next save records, and restores."""
    import keras

    model = small_model("keras")
    callback = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=2)
    callback.set_model(model)
    callback.on_train_begin()
    assert take_restored_epoch(model) is None  # no backup yet
    set_backup_epoch(callback, 3)
    set_backup_last_batch(callback, 4)
    path = backup_metadata_path(callback)
    assert path is not None and path.startswith(str(tmp_path / "backup"))
    callback.on_train_batch_end(5)  # one batch past the last seen: no save yet
    assert not Path(path).exists()
    callback.on_train_batch_end(6)  # two: a batch-level save
    assert json.loads(Path(path).read_text()) == {"epoch": 3, "batch": 6}

    resumed = small_model("keras")
    again = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    again.set_model(resumed)
    again.on_train_begin()
    assert take_restored_epoch(resumed) == 3
    assert take_restored_epoch(resumed) is None  # consumed, as fit does


def test_keras_backup_files_move_and_come_back(tmp_path: Path) -> None:
    import keras

    callback = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    files = backup_files(callback)
    assert len(files) == 4 and all(p.startswith(str(tmp_path / "backup")) for p in files.values())
    assert backup_metadata_path(callback) in files.values()
    set_backup_files(callback, {name: str(tmp_path / "moved" / name) for name in files})
    assert backup_metadata_path(callback) == str(tmp_path / "moved" / "_training_metadata_path")
    set_backup_files(callback, files)
    assert backup_files(callback) == files
    with pytest.raises(ValueError, match="Received: name='backup_dir'"):
        set_backup_files(callback, {"backup_dir": "x"})


def test_tf_keras_restored_epoch_is_the_one_fit_would_resume_at(tmp_path: Path) -> None:
    import tf_keras

    model = small_model("tf_keras")
    assert tf_keras_restored_epoch(model, 1, 0) is None  # no BackupAndRestore yet
    callback = tf_keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    callback.set_model(model)
    callback.on_train_begin()
    assert tf_keras_restored_epoch(model, 1, 0) == 0  # nothing backed up: the start
    callback.on_epoch_begin(2)
    callback.on_epoch_end(2)  # a backup at the end of epoch 2

    resumed = small_model("tf_keras")
    again = tf_keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    again.set_model(resumed)
    again.on_train_begin()
    assert tf_keras_restored_epoch(resumed, 1, 0) == 3


def test_tf_keras_backups_have_no_files_to_move(tmp_path: Path) -> None:
    """tf_keras' ``BackupAndRestore`` writes under ``backup_dir``, moved on its own."""
    import tf_keras

    callback = tf_keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    assert backup_files(callback) == {} and backup_metadata_path(callback) is None
