"""PreemptionCheckpoint: a SIGTERM to any worker saves one checkpoint all workers agree on.

Cluster schedulers (Kubernetes, Slurm, spot and preemptible VMs) take a machine back by
sending ``SIGTERM`` to its process and killing it a little later. On a multi-worker
cluster, one worker stopping on its own leaves the others waiting in a collective until
they fail. This hook hands the signal to TensorFlow's own
``tf.distribute.experimental.PreemptionCheckpointHandler``, which tells every worker
through the cluster's coordination service and picks the call of the step function at
which all of them save. So:

1. ``SIGTERM`` reaches one worker (any of them). Training goes on for a call or two while
   the workers agree on when to save.
2. At the start of the agreed call, every worker saves the model, the optimizer and the
   position in the run (epoch and step within it, the cluster's worker count, and the
   input's state when it keeps one: a mixture's stretches of weights): the
   chief to ``log_dir``, the others to a temporary place that is removed at once
   (saving may read synchronized variables, which needs every worker).
3. Every worker stops there: the epoch is left open (no ``epoch_end``, no
   ``on_train_end``), every hook's ``end`` runs, and the loop raises :class:`Preempted`,
   a ``SystemExit`` with ``exit_code`` (42 by default, TensorFlow's own), so the process
   exits cleanly with a code the launcher can read as "restart me".
4. Started again with the same ``log_dir``, the hook restores the checkpoint before the
   first step and the loop resumes at the saved epoch: it starts the epoch's data again,
   skips the batches already trained on and runs the rest of the epoch (as many steps
   as an uninterrupted run, whatever the dataset's cardinality says); the run ends after
   the epochs asked for. The cluster may come back with another worker count: an input
   that seeks (a position in one global sequence) resumes there exactly; one that
   replays says in the log that the resumed epoch's examples move.

It works in one process too (no cluster: the signal is this process's own). It needs
:class:`~tfr_hooks.FunctionLoop` (TF2): graph-mode runs have
:class:`~tfr_hooks.EpochCheckpoint` with :class:`~tfr_hooks.StopOnSignal`.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.hooks import Hook
from tfr_hooks.tf2 import distribute

__all__ = ["PreemptionCheckpoint", "Preempted", "PREEMPTION_EXIT_CODE"]

logger = logging.getLogger(__name__)

#: The exit code of a preempted worker, as TensorFlow's handler uses by default.
PREEMPTION_EXIT_CODE = 42
# where the position in the run is kept in the checkpoint
_POSITION_KEY = "tfr_hooks_position/.ATTRIBUTES/VARIABLE_VALUE"


class Preempted(SystemExit):
    """Training stopped on a preemption, after every worker saved the agreed checkpoint.

    A ``SystemExit``: uncaught, the process exits with :attr:`code` and no traceback.

    Attributes:
        code: The exit code (``PreemptionCheckpoint(exit_code=...)``).
        epoch: The epoch the checkpoint resumes at.
        step: The steps of that epoch already run.
        path: The checkpoint this worker wrote (the chief's), or ``None`` on the others.
    """

    def __init__(self, code: int, epoch: int, step: int, path: str | None) -> None:
        super().__init__(code)
        self.epoch = epoch
        self.step = step
        self.path = path


class PreemptionCheckpoint(Hook):
    """On SIGTERM to any worker, save a checkpoint all workers agree on, then exit.

    Add it to a :class:`~tfr_hooks.FunctionLoop`'s hooks on every worker (after
    :class:`~tfr_hooks.KerasCallbacks`, so that its mid-epoch state wins over an older
    ``BackupAndRestore`` epoch backup). SIGTERM is then this hook's: the loop's
    :class:`~tfr_hooks.StopOnSignal` handles SIGINT only.

    Args:
        log_dir: Where the chief keeps the checkpoint (the latest one only); the same
            path on every worker, as with Keras' ``BackupAndRestore``.
        model: A compiled Keras 3 model: its weights and optimizer state are saved.
        objects: Instead of (or beside) ``model``: name to trackable object
            (``tf.Variable``, ``tf.Module``, a Keras model or optimizer) to save, for a
            ``step_fn`` loop.
        exit_code: The code the process exits with after a preemption.
        delete_checkpoint: Whether the chief removes the checkpoint from ``log_dir``
            when a run ends without an error and without a preemption (it ran its
            epochs, or a hook stopped it), as Keras' ``BackupAndRestore`` removes its
            backup: a later start then begins afresh (or where another hook's backup
            says) instead of going back to an old mid-epoch state. ``False`` keeps it.

    Attributes:
        preempted: Whether the last run stopped on a preemption.
        restored: The ``(epoch, step)`` the run resumed at, or ``None``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If nothing is given to save.

    Examples:
        >>> hooks = [KerasCallbacks(callbacks, model),
        ...          PreemptionCheckpoint("/shared/run1/preemption", model=model)]
        >>> FunctionLoop(train_ds, model=model, hooks=hooks).run(epochs=10)  # doctest: +SKIP
    """

    #: The signals this hook handles itself (the loop's ``StopOnSignal`` leaves them).
    owns_signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)
    #: ``FunctionLoop`` creates the model's variables before ``after_create_session``.
    needs_model_state = True
    #: Its ``before_run`` saves at whatever step the call boundary is.
    needs_every_step = False

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        model: Any = None,
        objects: Mapping[str, Any] | None = None,
        exit_code: int = PREEMPTION_EXIT_CODE,
        delete_checkpoint: bool = True,
    ) -> None:
        if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir):
            raise TypeError(expected("log_dir", "a path (str or os.PathLike)", log_dir))
        if objects is not None and (
            not isinstance(objects, Mapping) or not all(isinstance(k, str) for k in objects)
        ):
            raise TypeError(expected("objects", "a dict from names to trackable objects", objects))
        if model is None and not objects:
            raise ValueError(
                "Expected `model` (a compiled Keras 3 model) or `objects` (name to "
                "tf.Variable, tf.Module or Keras object) to save. Received: model=None, "
                f"objects={objects!r}"
            )
        if isinstance(exit_code, bool) or not isinstance(exit_code, int) or exit_code >> 8:
            raise TypeError(expected("exit_code", "an int from 0 to 255", exit_code))
        self.log_dir = os.fspath(log_dir)
        self.model = model
        self.objects = dict(objects or {})
        if not isinstance(delete_checkpoint, bool):
            raise TypeError(expected("delete_checkpoint", "True or False", delete_checkpoint))
        self.exit_code = exit_code
        self.delete_checkpoint = delete_checkpoint
        self.preempted = False
        self.restored: tuple[int, int] | None = None
        self._signalled = threading.Event()
        self._previous: Any = None
        self._handler: Any = None
        self._manager: Any = None
        self._checkpoint: Any = None
        self._position: Any = None
        self._workers: Any = None
        self._input: Any = None
        self._task = distribute.TaskInfo()
        self._saved_path: str | None = None
        self._saved = False
        self._iterations: int | None = None

    # -- lifecycle -------------------------------------------------------------------

    def begin(self) -> None:
        """Take SIGTERM (main thread only, unless it is ignored)."""
        self.preempted = self._saved = False
        self._saved_path = None
        self._iterations = None
        self._signalled.clear()
        if threading.current_thread() is not threading.main_thread():
            logger.warning("Not in the main thread: SIGTERM is left to its handler.")
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_IGN:
            return
        self._previous = previous
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Create TensorFlow's handler (once), which restores the checkpoint; resume there."""
        if session is not None:
            raise ValueError(
                "Expected PreemptionCheckpoint in a FunctionLoop (TF2): it saves eager "
                "state through tf.distribute's PreemptionCheckpointHandler. In graph mode "
                "(SessionLoop), use EpochCheckpoint with StopOnSignal. Received: a "
                f"tf.compat.v1.Session ({session!r})"
            )
        if self._handler is not None:
            return  # a further run in this process: the state is already in memory
        strategy = self._strategy()
        self._task = distribute.current_task(strategy)
        self._position = tf.Variable([0, 0], dtype=tf.int64, trainable=False)
        self._workers = tf.Variable(0, dtype=tf.int64, trainable=False)
        # the input's state (a mixture's weights, ``loop.input_state``): b"" for none
        self._input = tf.Variable(b"", dtype=tf.string, trainable=False)
        objects = dict(self.objects)
        if self.model is not None:
            objects.setdefault("model", self.model)
            if getattr(self.model, "optimizer", None) is not None:
                objects.setdefault("optimizer", self.model.optimizer)
        self._checkpoint = tf.train.Checkpoint(
            **objects,
            tfr_hooks_position=self._position,
            tfr_hooks_workers=self._workers,
            tfr_hooks_input=self._input,
        )
        # one manager on the chief's directory: every worker restores the chief's state
        self._manager = tf.train.CheckpointManager(self._checkpoint, self.log_dir, max_to_keep=1)
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=self._signalled.is_set,
            exit_fn=self._on_saved,
            save_fn=self._save,
        )
        resolver = getattr(strategy, "cluster_resolver", None)
        # the handler restores the latest checkpoint its manager finds: hand it an empty
        # directory instead when there is none to restore, or only one older than the
        # start another hook (BackupAndRestore) has already restored
        saved = self._saved_position()
        start = (self.loop.initial_epoch, self.loop.initial_step)
        fresh = saved is not None and saved >= start
        scratch = None if fresh else tempfile.mkdtemp(prefix="tfr_hooks_preemption_read_")
        reader = self._manager
        if scratch is not None:
            reader = tf.train.CheckpointManager(self._checkpoint, scratch, max_to_keep=1)
        try:
            with strategy.scope():
                self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                    resolver, reader, termination_config=config
                )
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        if saved is not None and not fresh:
            logger.info(
                "The preemption checkpoint in %s (epoch %d, step %d) is older than epoch "
                "%d, step %d, where another hook restored this run: not restored.",
                self.log_dir,
                *saved,
                *start,
            )
        if fresh:
            epoch, step = (int(v) for v in self._position.numpy())
            self._resume_at(epoch, step)

    def epoch_begin(self, epoch: int) -> None:
        """Start the resumed epoch from its first step if a later hook restored others.

        A hook after this one (``KerasCallbacks`` with ``BackupAndRestore``) that restored
        its own backup over this checkpoint's weights has the last word: the optimizer's
        step count tells, and the epoch then runs in full from that backup.
        """
        if self._iterations is None or epoch != self.loop.initial_epoch:
            return
        iterations, self._iterations = self._iterations, None
        optimizer = getattr(self.model, "optimizer", None)
        now = None if optimizer is None else int(optimizer.iterations.numpy())
        if now is not None and now != iterations and self.loop.initial_step:
            logger.warning(
                "A hook after PreemptionCheckpoint restored other weights (optimizer "
                "step %d, not %d): epoch %d runs from its first step. Put "
                "PreemptionCheckpoint after KerasCallbacks.",
                now,
                iterations,
                epoch,
            )
            self.loop.initial_step = 0
            self.restored = None

    def before_run(self, run_context: Any) -> None:
        """Save and stop at the agreed call, on every worker; else go on."""
        if self._handler is None:
            return None
        loop = self.loop
        self._handler.save_checkpoint_if_preempted()
        if self._saved:
            self.preempted = True
            logger.warning(
                "Preempted: every worker saved the checkpoint at epoch %d, step %d%s; "
                "exiting with code %d. Start the cluster again to resume there.",
                loop.epoch,
                loop.epoch_steps,
                f" ({self._saved_path})" if self._saved_path else "",
                self.exit_code,
            )
            raise Preempted(self.exit_code, loop.epoch, loop.epoch_steps, self._saved_path)
        return None

    def end(self, session: Any) -> None:
        """Give SIGTERM back; after a run that ended well, remove the checkpoint (chief)."""
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signal.SIGTERM, self._previous)
        self._previous = None
        finished = self.loop.error is None and not self.preempted
        if finished and self.delete_checkpoint and self._task.is_chief:
            self._remove_checkpoints()

    # -- helpers ---------------------------------------------------------------------

    def _strategy(self) -> Any:
        """The model's strategy, else the loop's (a ``step_fn`` loop), else the current one."""
        strategy = getattr(self.model, "distribute_strategy", None)
        if strategy is None:
            strategy = getattr(self.loop, "strategy", None)
        if strategy is None:
            strategy = tf.distribute.get_strategy()
        return strategy

    def _saved_position(self) -> tuple[int, int] | None:
        """The (epoch, step) of the latest checkpoint in ``log_dir``, without restoring."""
        latest = tf.train.latest_checkpoint(self.log_dir)
        if latest is None:
            return None
        try:
            value = tf.train.load_variable(latest, _POSITION_KEY)
        except (tf.errors.NotFoundError, ValueError) as error:
            raise ValueError(
                f"Expected {latest} to be a checkpoint written by PreemptionCheckpoint "
                f"(with the variable {_POSITION_KEY!r}); give the hook a directory of its "
                f"own. Received: log_dir={self.log_dir!r}"
            ) from error
        return int(value[0]), int(value[1])

    def _remove_checkpoints(self) -> None:
        """Remove the checkpoints of ``log_dir`` (and the directory, if nothing else is left)."""
        state = tf.train.get_checkpoint_state(self.log_dir)
        if state is None:
            return
        prefixes = {state.model_checkpoint_path, *state.all_model_checkpoint_paths}
        for prefix in prefixes:
            prefix = os.path.join(self.log_dir, os.path.basename(prefix))
            for path in glob.glob(glob.escape(prefix) + ".*"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.log_dir, "checkpoint"))
        with contextlib.suppress(OSError):
            os.rmdir(self.log_dir)  # only when empty: never another writer's files
        logger.info("The run ended: removed the preemption checkpoint in %s", self.log_dir)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        logger.warning(
            "SIGTERM received: every worker saves a checkpoint at a step they agree on, "
            "then exits with code %d.",
            self.exit_code,
        )
        self._signalled.set()  # TensorFlow's handler polls this and tells the cluster

    def _save(self, *args: Any, **kwargs: Any) -> None:
        """The handler's save: the chief to ``log_dir``, the others to a removed place."""
        # where the run is, only when saving: nothing added to the calls of other steps
        self._position.assign([self.loop.epoch, self.loop.epoch_steps])
        self._workers.assign(max(1, self._task.num_workers))
        self._input.assign(self.loop.input_state or b"")
        if self._task.is_chief:
            self._saved_path = self._manager.save(*args, **kwargs)
            return
        scratch = tempfile.mkdtemp(prefix=f"tfr_hooks_preemption_{self._task.task_id}_")
        try:
            self._checkpoint.write(os.path.join(scratch, "ckpt"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _on_saved(self) -> None:
        self._saved = True  # the handler's exit_fn: before_run stops the run

    def _resume_at(self, epoch: int, step: int) -> None:
        loop = self.loop
        if epoch < loop.initial_epoch:
            logger.info(
                "The preemption checkpoint in %s is at epoch %d, before epoch %d where "
                "this run starts; starting there.",
                self.log_dir,
                epoch,
                loop.initial_epoch,
            )
            return
        # the loop skips the batches of those steps and runs the epoch to the data's end
        # (or to its steps_per_epoch): no length needs to be known up front
        loop.initial_epoch = epoch
        loop.initial_step = step
        loop.initial_workers = int(self._workers.numpy()) or None  # 0: saved before counts
        loop.initial_input = bytes(self._input.numpy()) or None  # a mixture's weights
        self.restored = (epoch, step)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:  # to tell, at the epoch's start, that nobody restored after
            self._iterations = int(optimizer.iterations.numpy())
        logger.info(
            "Resuming at epoch %d, step %d from the preemption checkpoint in %s (saved on "
            "%s worker(s))",
            epoch,
            step,
            self.log_dir,
            loop.initial_workers or "an unrecorded number of",
        )
