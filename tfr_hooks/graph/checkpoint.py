"""EpochCheckpoint: save every variable at each epoch end; resume a graph-mode run from it.

The hook saves a ``tf.compat.v1.train.Saver`` checkpoint of all global variables (the
model's weights, the optimizer's slots and iteration count, a global step) at the end of
every epoch, and at the start of a run restores the latest one it finds in ``log_dir`` and
moves ``loop.initial_epoch`` so the loop continues where the last run stopped.

The position to resume at is part of the checkpoint's name, ``ckpt-epoch<E>-<N>`` (``E``
the epoch to start at, ``N`` a save counter kept across runs), or
``ckpt-epoch<E>-step<S>-workers<W>-<N>`` inside an epoch (``S`` steps of epoch ``E``
already run by a cluster of ``W`` workers; names without ``-workers<W>`` still read), so
the name that TensorFlow's ``checkpoint`` state file points to says everything; there is
no second file that could disagree with it. An epoch cut short by a stop request (Ctrl-C,
SIGTERM through ``StopOnSignal``) is saved as well, and so is every ``save_steps``-th step
when asked:

* where the loop resumes mid-epoch exactly (``loop.resumes_mid_epoch``: a
  :class:`~tfr_hooks.SessionLoop` on a ``read_batches(pipeline="dataset")`` pipeline,
  streamed, packed or in memory, without ``steps_per_epoch``), at the step reached: the
  resumed run starts the epoch's data in the same order (replaying the earlier passes of a
  seeded shuffle), skips the ``S`` batches already trained on and runs the rest, so that
  with a seed every example is seen once per epoch and the weights end as an
  uninterrupted run's;
* elsewhere (a queue pipeline, whose order no run can repeat; data the loop was not
  given; ``steps_per_epoch``), with ``E`` the interrupted epoch: the resumed run repeats
  that epoch in full, from the weights it had reached.

(An epoch counts as complete when it ran the number of steps known at its start; when
that number is not known yet, when no stop was requested before this hook's
``epoch_end``: put the hook before hooks that stop training from their own ``epoch_end``,
such as ``KerasCallbacks`` with ``EarlyStopping``.)

A read whose passes depend on more than the position (a mixture's stretches of weights,
``loop.input_state``) has its state saved beside each checkpoint, in
``<checkpoint>.input`` (written before the checkpoint, so a checkpoint never lacks it);
a resumed run hands it to the read's seek (``loop.initial_input``), which goes on from
it at the reader's weights, changed or not.

Crash safety relies on TensorFlow's own atomic writes, which ``tests/test_signals.py``
checks by SIGKILLing a process in the middle of a save: the data and index files are
written under ``.tempstate<random>`` names and renamed when complete, and the
``checkpoint`` state file is replaced atomically (temporary file and rename) only after
both exist. Names are never reused, so a checkpoint is never overwritten in place. A
process killed during a save therefore leaves the previous checkpoint as the latest one,
intact.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import check_bool, check_optional_positive_int, check_positive_int
from tfr_hooks.hooks import Hook
from tfr_hooks.task import current_task

__all__ = [
    "EpochCheckpoint",
    "CHECKPOINT_PREFIX",
    "resume_position_of",
    "saved_workers_of",
]

logger = logging.getLogger(__name__)

#: The file name prefix of the checkpoints :class:`EpochCheckpoint` writes.
CHECKPOINT_PREFIX = "ckpt-epoch"
# beside a checkpoint: the input's state (``loop.input_state``: a mixture's weights)
_INPUT_SUFFIX = ".input"
_NAME = re.compile(rf"{CHECKPOINT_PREFIX}(\d+)(?:-step(\d+))?(?:-workers(\d+))?-(\d+)$")


def resume_position_of(path: str) -> tuple[int, int, int]:
    """The epoch and step to resume at and the save counter encoded in a checkpoint path.

    Args:
        path: A checkpoint prefix written by :class:`EpochCheckpoint`.

    Returns:
        ``(epoch, step, counter)``: ``step`` is the number of steps of ``epoch`` already
        run (0 for a checkpoint of an epoch's end).

    Raises:
        ValueError: If ``path`` is not named like :class:`EpochCheckpoint`'s checkpoints.

    Examples:
        >>> resume_position_of("runs/1/ckpt-epoch2-step5-7")
        (2, 5, 7)
        >>> resume_position_of("runs/1/ckpt-epoch3-8")
        (3, 0, 8)
    """
    match = _NAME.search(os.path.basename(os.fspath(path)))
    if match is None:
        raise ValueError(
            f"Expected a checkpoint named '{CHECKPOINT_PREFIX}<epoch>-<n>' or "
            f"'{CHECKPOINT_PREFIX}<epoch>-step<step>-<n>' (written by "
            f"tfr_hooks.EpochCheckpoint). Received: path={path!r}"
        )
    return int(match.group(1)), int(match.group(2) or 0), int(match.group(4))


def saved_workers_of(path: str) -> int | None:
    """The worker count of the run that saved a mid-epoch checkpoint, when its name has it.

    A mid-epoch save records the cluster's worker count (``-workers<n>``), so that a run
    resumed on another count knows its data moved (a graph-mode cluster has no position
    that holds across counts: it replays, and the loop says so). ``None`` for an epoch's
    end and for names written before the count was recorded.

    Examples:
        >>> saved_workers_of("runs/1/ckpt-epoch2-step5-workers2-7")
        2
        >>> saved_workers_of("runs/1/ckpt-epoch2-step5-7") is None
        True
    """
    resume_position_of(path)  # the same names, the same error
    match = _NAME.search(os.path.basename(os.fspath(path)))
    assert match is not None  # checked just above
    return int(match.group(3)) if match.group(3) else None


class EpochCheckpoint(Hook):
    """Save all variables at each epoch end; restore the latest and resume where it was.

    Put it in a :class:`~tfr_hooks.SessionLoop`'s hooks and call ``loop.run(epochs=N)``
    again with the same ``log_dir`` after a crash, a Ctrl-C or a SIGTERM: the run restores
    the weights, optimizer state and global step, starts at the right epoch (and, on a
    ``read_batches(pipeline="dataset")`` pipeline, at the right step of it, with the data
    at the next batch: see the module's docstring) and ends after epoch ``N - 1`` as
    asked. ``log_dir`` holding no checkpoint starts from scratch.

    Args:
        log_dir: The directory of the checkpoints (created when needed), absolute or
            relative to the working directory.
        max_to_keep: How many recent checkpoints to keep.
        restore: Whether to restore the latest checkpoint when a run starts.
        var_list: The variables to save (default: all global variables, with the
            optimizer's slots and the global step).
        save_steps: Also save after every this many steps of an epoch, at the data's
            position where the loop resumes mid-epoch (``loop.resumes_mid_epoch``), so a
            process killed without warning (SIGKILL, a lost machine) loses at most that
            many steps; ``None`` (the default) saves at epoch ends and on a stop only.
            Elsewhere those saves are skipped: a resumed run would repeat the epoch.

    Attributes:
        restored_from: The checkpoint restored at the start of the last run, or ``None``.
        last_saved: The checkpoint written last, or ``None``.

    Raises:
        TypeError: If ``log_dir`` is not a path.
        ValueError: If ``max_to_keep`` or ``save_steps`` is not a positive integer; when
            a run starts, if the latest checkpoint in ``log_dir`` does not match the
            graph's variables.
        FileNotFoundError: When a run starts, if the ``checkpoint`` state file in
            ``log_dir`` names a latest checkpoint whose files are missing.

    Examples:
        >>> loop = SessionLoop(train_op, fetches, initializers=[it.initializer],
        ...                    hooks=[EpochCheckpoint("runs/1")])  # doctest: +SKIP
        >>> loop.run(epochs=10)  # killed in epoch 6? run again: epochs 6-9  # doctest: +SKIP
    """

    requires_session = True
    #: Only the chief saves the run's checkpoints (a non-chief ``SessionLoop`` drops it).
    chief_only = True

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        max_to_keep: int = 3,
        restore: bool = True,
        var_list: Any = None,
        save_steps: int | None = None,
    ) -> None:
        if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir):
            raise TypeError(
                f"Expected `log_dir` to be a directory path. Received: log_dir={log_dir!r}"
            )
        check_positive_int(max_to_keep, "max_to_keep")
        check_bool(restore, "restore")
        check_optional_positive_int(save_steps, "save_steps")
        self.log_dir = os.fspath(log_dir)
        self.max_to_keep = max_to_keep
        self.restore = restore
        self.var_list = var_list
        self.save_steps = save_steps
        self._graph: Any = None
        self._saver: Any = None
        self._session: Any = None
        self._counter = 0
        self._steps_known: int | None = None
        self._saved_at = -1  # the epoch step of the last save_steps save
        self.restored_from: str | None = None
        self.last_saved: str | None = None

    def begin(self) -> None:
        """Reset the run's state and build the saver in the run's (default) graph.

        The saver is built here, before the session exists, as a stock
        ``CheckpointSaverHook`` builds its own: once a session runs the graph (the queue
        threads start in an earlier hook's ``after_create_session``), adding ops to it
        races with those runs, and TensorFlow warns that the ops it had already seen were
        changed after it ran them.
        """
        self._session = None
        self._counter = 0
        self.restored_from = None
        self.last_saved = None
        self._saver_for(tf.compat.v1.get_default_graph())

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Restore the latest checkpoint, if any, and move the loop's start there.

        ``loop.initial_epoch`` becomes the checkpoint's epoch, and ``loop.initial_step``
        its step when the loop resumes mid-epoch (``loop.resumes_mid_epoch``); a
        mid-epoch checkpoint restored where it does not repeats its epoch in full.
        """
        self._session = session
        saver = self._saver_for(session.graph)
        state = tf.train.get_checkpoint_state(self.log_dir)
        if state is None or not state.model_checkpoint_path:
            logger.info("No checkpoint in %s: training starts from scratch.", self.log_dir)
            return
        # get_checkpoint_state has already joined a relative path to log_dir
        path = self._located(state.model_checkpoint_path)
        epoch, step, counter = resume_position_of(path)
        self._counter = counter + 1  # names are never reused, even without restoring
        if not self.restore:
            return
        if not _exists(path):
            state_file = os.path.join(self.log_dir, "checkpoint")
            raise FileNotFoundError(
                f"Expected the latest checkpoint that {state_file!r} names, {path!r}, to "
                "exist, to resume from it; its files are missing (deleted, or the state "
                "file was written elsewhere). Restore them, or delete the state file to "
                f"start from scratch. Received: log_dir={self.log_dir!r}"
            )
        try:
            saver.restore(session, path)
        except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, ValueError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise ValueError(
                f"Expected the checkpoint {path!r} to hold this model's variables, to resume "
                f"from it; it does not match the graph ({first_line}). Use another "
                f"`log_dir` for a different model. Received: log_dir={self.log_dir!r}"
            ) from error
        saver.recover_last_checkpoints(
            [p for p in map(self._located, state.all_model_checkpoint_paths) if _exists(p)]
        )
        self.restored_from = path
        loop = self.loop
        input_path = path + _INPUT_SUFFIX
        if tf.io.gfile.exists(input_path):  # a mixture's weights, saved beside it
            with tf.io.gfile.GFile(input_path, "rb") as f:
                loop.initial_input = f.read() or None
        if epoch > loop.initial_epoch or (epoch == loop.initial_epoch and step):
            loop.initial_epoch = epoch
            if step and loop.resumes_mid_epoch:
                loop.initial_step = step
                loop.initial_workers = saved_workers_of(path)
            elif step:
                logger.warning(
                    "%s was saved at step %d of epoch %d, but this loop cannot resume "
                    "its data there (a queue pipeline, data it was not given, or "
                    "steps_per_epoch): epoch %d runs again in full.",
                    path,
                    step,
                    epoch,
                    epoch,
                )
        logger.info(
            "Restored %s: resuming at epoch %d, step %d.",
            path,
            loop.initial_epoch,
            loop.initial_step,
        )

    def epoch_begin(self, epoch: int) -> None:
        """Note the epoch's length, if known before it runs."""
        loop = self.loop
        self._steps_known = loop.steps_per_epoch
        # a resumed epoch starts at the step of the checkpoint it was restored from
        self._saved_at = loop.initial_step if epoch == loop.initial_epoch else -1

    def before_run(self, run_context: Any) -> None:
        """Every ``save_steps`` steps into an epoch, save its position before the next."""
        loop = self.loop
        steps = loop.epoch_steps
        if (
            self.save_steps is not None
            and loop.resumes_mid_epoch
            and steps > 0
            and steps % self.save_steps == 0
            and steps != self._saved_at
        ):
            self._save(_mid_epoch(loop.epoch, steps))
            self._saved_at = steps

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Save every variable; the name records the epoch (and step) to resume at."""
        loop = self.loop
        if self._steps_known is not None:
            complete = loop.epoch_steps >= self._steps_known
        else:  # the epoch's length is unknown (or was learned from this very epoch)
            complete = not loop.stop_requested
        if complete:
            name = f"{CHECKPOINT_PREFIX}{epoch + 1}"
        elif loop.resumes_mid_epoch and loop.epoch_steps:
            name = _mid_epoch(epoch, loop.epoch_steps)
        else:
            name = f"{CHECKPOINT_PREFIX}{epoch}"
        self._save(name)
        self._saved_at = -1

    def _save(self, name: str) -> None:
        """Save every variable as ``log_dir/<name>-<counter>``, on the chief only."""
        if self._session is None or self._saver is None:
            return
        told = self.loop.is_chief  # SessionLoop(is_chief=...), else the strategy/TF_CONFIG
        if not (told if told is not None else current_task().is_chief):
            return  # the chief saves, once
        os.makedirs(self.log_dir, exist_ok=True)
        prefix = os.path.join(self.log_dir, name)
        state = self.loop.input_state
        if state is not None:  # before the checkpoint: a checkpoint never lacks it
            _write_atomically(f"{prefix}-{self._counter}{_INPUT_SUFFIX}", state)
        self.last_saved = self._saver.save(
            self._session, prefix, global_step=self._counter, write_meta_graph=False
        )
        self._counter += 1
        if state is not None:
            self._remove_stale_inputs()
        logger.debug("Saved %s", self.last_saved)

    def end(self, session: Any) -> None:
        """Forget the session."""
        self._session = None

    def _remove_stale_inputs(self) -> None:
        """Remove the input states of checkpoints the saver no longer keeps."""
        for path in tf.io.gfile.glob(os.path.join(self.log_dir, f"*{_INPUT_SUFFIX}")):
            if not _exists(path[: -len(_INPUT_SUFFIX)]):
                tf.io.gfile.remove(path)

    def _located(self, path: str) -> str:
        """A checkpoint path from the state file, found in ``log_dir`` if moved there.

        ``tf.train.get_checkpoint_state`` joins a relative path to ``log_dir`` itself. An
        absolute path (a state file written by another saver) that no longer exists,
        because the directory was moved or copied, is looked up by name in ``log_dir``.
        """
        if _exists(path):
            return path
        moved = os.path.join(self.log_dir, os.path.basename(path))
        return moved if _exists(moved) else path

    def _saver_for(self, graph: Any) -> Any:
        """One saver per graph, built once (no ops are added per run or per epoch)."""
        if self._saver is None or self._graph is not graph:
            with graph.as_default():
                self._saver = tf.compat.v1.train.Saver(
                    var_list=self.var_list,
                    max_to_keep=self.max_to_keep,
                    save_relative_paths=True,
                    name="tfr_hooks_epoch_checkpoint",
                )
            self._graph = graph
        return self._saver

    def __repr__(self) -> str:
        return f"EpochCheckpoint(log_dir={self.log_dir!r})"


def _mid_epoch(epoch: int, steps: int) -> str:
    """The name of a save at step ``steps`` of ``epoch``, with this cluster's worker count."""
    return f"{CHECKPOINT_PREFIX}{epoch}-step{steps}-workers{current_task().num_workers}"


def _write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it."""
    temporary = f"{path}.tempstate"
    with tf.io.gfile.GFile(temporary, "wb") as f:
        f.write(data)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def _exists(path: str) -> bool:
    """Whether a checkpoint prefix has its files (V2 ``.index``, or a V1 file)."""
    return bool(tf.io.gfile.exists(path + ".index") or tf.io.gfile.exists(path))
