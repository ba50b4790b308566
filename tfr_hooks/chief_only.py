"""Chief-only writing: the files of Keras callbacks of non-chief workers go to a temporary place.

Shared by both modes: :class:`~tfr_hooks.KerasCallbacks` applies it on every worker of a
multi-worker run (``FunctionLoop`` under a strategy, ``SessionLoop`` on a cluster).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from tfr_hooks.keras_private import backup_files, set_backup_files
from tfr_hooks.task import TaskInfo

__all__ = ["ChiefOnlyWriting"]


class ChiefOnlyWriting:
    """Point the files of Keras callbacks at a temporary place on non-chief workers.

    TensorFlow's multi-worker guides have every worker run the saving code (saving may
    read synchronized variables, which takes collective ops all workers must join) while
    only the chief writes to the real path: non-chief workers write to a temporary
    directory removed afterwards. :meth:`apply` does that to ``ModelCheckpoint``
    (``filepath``), ``TensorBoard`` (``log_dir``), ``CSVLogger`` (``filename``) and
    ``BackupAndRestore`` (its backup files: it still *restores* from the chief's backup,
    so that a restarted cluster resumes at the same epoch on every worker), and drops
    ``ProgbarLogger`` so that progress is shown by the chief only. :meth:`restore` puts
    the callbacks back as they were and removes the temporary directory.

    Args:
        task: The task of this process; on the chief nothing changes.
    """

    def __init__(self, task: TaskInfo) -> None:
        self.task = task
        self.tempdir: str | None = None
        self._undo: list[Callable[[], None]] = []

    def apply(self, callbacks: Sequence[Any], keras: Any) -> list[Any]:
        """Return the callbacks this worker runs, with their paths moved when not chief.

        Call it before the callbacks' ``set_model`` (which derives TensorBoard's run
        directories from ``log_dir``).

        Args:
            callbacks: The callbacks of the run.
            keras: The Keras module the callbacks come from (``keras`` or ``tf_keras``).

        Returns:
            The callbacks to call on this worker.
        """
        if self.task.is_chief:
            return list(callbacks)
        kept = []
        cbs = keras.callbacks
        for callback in callbacks:
            if isinstance(callback, cbs.ProgbarLogger):
                continue  # progress on the chief only
            if isinstance(callback, cbs.ModelCheckpoint):
                self._move(callback, "filepath")
            elif isinstance(callback, cbs.TensorBoard):
                self._move(callback, "log_dir")
            elif isinstance(callback, cbs.CSVLogger):
                self._move(callback, "filename")
            kept.append(callback)
        return kept

    def after_train_begin(self, callbacks: Sequence[Any], keras: Any) -> None:
        """Move ``BackupAndRestore``'s files once it has restored from the chief's backup.

        Every worker must resume at the same epoch with the same weights, so each one
        reads the chief's backup in ``on_train_begin``; after that, a non-chief worker
        writes its backups to its temporary directory, and never deletes the chief's.

        Args:
            callbacks: The callbacks :meth:`apply` returned.
            keras: The Keras module the callbacks come from.
        """
        if self.task.is_chief:
            return
        for callback in callbacks:
            if not isinstance(callback, keras.callbacks.BackupAndRestore):
                continue
            files = backup_files(callback)  # Keras 3's; tf_keras' follow backup_dir
            if files:
                self._undo.append(functools.partial(set_backup_files, callback, files))
                set_backup_files(callback, {n: self.temp_path(p) for n, p in files.items()})
            self._undo.append(
                functools.partial(setattr, callback, "backup_dir", callback.backup_dir)
            )
            callback.backup_dir = self.temp_path("backup")

    def temp_path(self, path: str) -> str:
        """Where a non-chief worker writes what the chief writes at ``path``."""
        if self.tempdir is None:
            kind = self.task.task_type or "worker"
            self.tempdir = tempfile.mkdtemp(prefix=f"tfr_hooks_{kind}{self.task.task_id}_")
        # a directory of its own per path: two callbacks' files of one name never collide
        own = tempfile.mkdtemp(dir=self.tempdir)
        return os.path.join(own, os.path.basename(os.path.normpath(path)) or "out")

    def restore(self) -> None:
        """Put the callbacks' paths back and remove the temporary directory."""
        while self._undo:
            self._undo.pop()()
        if self.tempdir is not None:
            shutil.rmtree(self.tempdir, ignore_errors=True)
            self.tempdir = None

    def _move(self, obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if value is None:
            return
        self._undo.append(functools.partial(setattr, obj, attr, value))
        setattr(obj, attr, self.temp_path(os.fspath(value)))
