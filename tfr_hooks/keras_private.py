"""Every private attribute of Keras the package reads or writes, behind one small function each.

Resuming from a Keras ``BackupAndRestore`` the way ``fit`` does takes a few attributes
that neither Keras 3 nor ``tf_keras`` makes public: where the backup's files are, which
epoch and batch the callback believes it is at, and the epoch a restored backup asks the
model to start at. They are read and written here only, so that a Keras release that
moves one is one module to fix, and ``tests/test_keras_private.py`` checks each of them,
on real objects of every supported Keras (:data:`PRIVATE_ATTRIBUTES`), so that such a
release fails a test instead of resuming at the wrong place.

Each function says which versions it was checked against: the oldest the package
supports (``tests/constraints-oldest.txt``: Keras 3.11.0, tf_keras 2.17.0) and the newest
it was developed with (Keras 3.15.1, tf_keras 2.21.0). Every function degrades as Keras
itself would without the attribute (``None``, nothing to move), so that a Keras that moved
one still trains, only without the resume position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "PRIVATE_ATTRIBUTES",
    "backup_files",
    "backup_metadata_path",
    "set_backup_epoch",
    "set_backup_files",
    "set_backup_last_batch",
    "take_restored_epoch",
    "tf_keras_restored_epoch",
]

#: The private attributes this module uses: Keras flavor -> the public name of the
#: class that holds them (``Model``, ``callbacks.BackupAndRestore``) -> their names, on
#: an instance made as ``tests/test_keras_private.py`` makes one (a built model; a
#: ``BackupAndRestore`` given a ``backup_dir``).
#: Keras 3 ``BackupAndRestore``'s file paths (set in ``__init__`` from ``backup_dir``).
_BACKUP_FILES = (
    "_weights_path",
    "_training_metadata_path",
    "_prev_weights_path",
    "_prev_training_metadata_path",
)

PRIVATE_ATTRIBUTES: dict[str, dict[str, tuple[str, ...]]] = {
    "keras": {
        "Model": ("_initial_epoch",),
        "callbacks.BackupAndRestore": ("_current_epoch", "_last_batch_seen", *_BACKUP_FILES),
    },
    "tf_keras": {
        "Model": ("_training_state", "_maybe_load_initial_counters_from_ckpt"),
    },
}


# -- Keras 3 BackupAndRestore ----------------------------------------------------------


def backup_metadata_path(callback: Any) -> str | None:
    """The JSON file (``{"epoch": ..., "batch": ...}``) of a Keras 3 ``BackupAndRestore``.

    ``None`` for a callback that has none (``tf_keras``' keeps its position in a
    checkpoint).
    """
    # Keras 3.11.0 and 3.15.1: `_training_metadata_path`, set in __init__
    path = getattr(callback, "_training_metadata_path", None)
    return None if path is None else str(path)


def backup_files(callback: Any) -> dict[str, str]:
    """The paths a Keras 3 ``BackupAndRestore`` writes, by attribute; ``{}`` for others.

    For :func:`set_backup_files`: a non-chief worker points them at a temporary place
    once the callback has restored from the chief's backup.
    """
    # Keras 3.11.0 and 3.15.1: `_weights_path`, `_training_metadata_path`,
    # `_prev_weights_path`, `_prev_training_metadata_path`, all set in __init__.
    # tf_keras 2.17.0 and 2.21.0 have none of them (their files follow `backup_dir`).
    found = {name: getattr(callback, name, None) for name in _BACKUP_FILES}
    return {name: str(path) for name, path in found.items() if path is not None}


def set_backup_files(callback: Any, files: Mapping[str, str]) -> None:
    """Set paths :func:`backup_files` returned (moved, or the original ones back)."""
    for name, path in files.items():
        if name not in _BACKUP_FILES:
            raise ValueError(f"Expected one of {_BACKUP_FILES}. Received: name={name!r}")
        setattr(callback, name, path)


def set_backup_epoch(callback: Any, epoch: int) -> None:
    """Tell a Keras 3 ``BackupAndRestore`` the epoch it is in.

    It learns the epoch only from its own ``on_epoch_end`` and writes it in each save:
    a callback resumed at a later epoch than its backup's, or one a backup restored,
    would otherwise write a stale epoch into its batch-level saves.
    """
    # Keras 3.11.0 and 3.15.1: `_current_epoch`, 0 from __init__, epoch + 1 at each
    # on_epoch_end, written as the metadata's "epoch" by each save
    callback._current_epoch = epoch


def set_backup_last_batch(callback: Any, batch: int) -> None:
    """Tell a Keras 3 ``BackupAndRestore`` the last batch trained in its epoch.

    It counts the batches towards its next batch-level save (``save_freq=N``) from that
    index, and writes it as the metadata's ``"batch"``.
    """
    # Keras 3.11.0 and 3.15.1: `_last_batch_seen`, 0 from __init__ and each on_epoch_end
    callback._last_batch_seen = batch


# -- the epoch a restored backup resumes at --------------------------------------------


def take_restored_epoch(model: Any) -> int | None:
    """The epoch a Keras 3 ``BackupAndRestore`` asked ``model`` to start at, consumed.

    Keras 3's callback stores it on the model in ``on_train_begin`` and ``fit`` reads it
    once and clears it; so does this function.

    Returns:
        The epoch, or ``None`` when no backup was restored.
    """
    # Keras 3.11.0 and 3.15.1: Trainer.__init__ sets `_initial_epoch = None`;
    # BackupAndRestore._load_model sets it to the metadata's epoch; fit reads it
    restored = getattr(model, "_initial_epoch", None)
    if restored is not None:
        model._initial_epoch = None
    return None if restored is None else int(restored)


def tf_keras_restored_epoch(model: Any, steps_per_epoch: int, initial_epoch: int) -> int | None:
    """The epoch a ``tf_keras`` ``BackupAndRestore`` restored ``model`` at, as ``fit`` asks.

    Args:
        model: The ``tf_keras`` model, after the callbacks' ``on_train_begin``.
        steps_per_epoch: The steps of an epoch (1 when unknown).
        initial_epoch: The epoch the run would start at otherwise.

    Returns:
        The epoch, or ``None`` when no ``BackupAndRestore`` set the model's state.
    """
    # tf_keras 2.17.0 and 2.21.0: Model.__init__ sets `_training_state = None`;
    # BackupAndRestore.on_train_begin sets a WorkerTrainingState there, which
    # `_maybe_load_initial_counters_from_ckpt(steps_per_epoch, initial_epoch)` reads
    # into (epoch, step), as fit calls it
    if getattr(model, "_training_state", None) is None:
        return None
    load = getattr(model, "_maybe_load_initial_counters_from_ckpt", None)
    if load is None:
        return None
    epoch, _ = load(steps_per_epoch, initial_epoch)
    return int(epoch)
