"""KerasCallbacks: drive standard Keras callback objects from the loop's events.

The hook makes the calls ``model.fit`` makes, in the same order, with the same ``params``
and ``logs``::

    after_create_session -> on_train_begin     (weights exist and are initialized)
    epoch_begin          -> on_epoch_begin(epoch, {})
    before_run           -> on_train_batch_begin(batch)
    after_run            -> on_train_batch_end(batch, logs)   (running epoch means)
    validation_begin     -> on_test_begin
    validation_batch_*   -> on_test_batch_begin / on_test_batch_end
    validation_end       -> on_test_end
    epoch_end            -> on_epoch_end(epoch, logs)          (the loop's shared logs)
    end                  -> on_train_end                       (not after a failure)

With Keras' own ``TensorBoard`` callback in the list, the hook also writes the loop's
input measurement of each epoch (``loop.input_stats``: ``input/wait_share`` and
``input/examples_per_sec``, see :mod:`tfr_hooks.input_report`) to a run of its own beside
the callback's runs, ``LOG_DIR/input`` (:data:`tfr_hooks.tensorboard.INPUT_RUN`), after
the callbacks' ``on_epoch_end``: TensorBoard shows them as the group ``input``.

It works with ``tf_keras`` models in graph mode (:class:`~tfr_hooks.SessionLoop`) and with
Keras 3 or eager ``tf_keras`` models in a TF2 loop: the callbacks must come from the
Keras that built the model (``tf_keras.callbacks`` or ``keras.callbacks``).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.chief_only import ChiefOnlyWriting
from tfr_hooks.hooks import Hook
from tfr_hooks.input_report import InputStats
from tfr_hooks.keras_private import (
    backup_metadata_path,
    set_backup_epoch,
    set_backup_last_batch,
    take_restored_epoch,
    tf_keras_restored_epoch,
)
from tfr_hooks.task import TaskInfo, current_task
from tfr_hooks.tensorboard import INPUT_RUN, InputScalarWriter, mixture_scalars

__all__ = ["KerasCallbacks"]

logger = logging.getLogger(__name__)

_VERBOSE = (0, 1, 2, "auto")


def _keras_flavor(model: Any) -> tuple[str, Any]:
    """Return ``(name, keras module)`` of the Keras that built ``model``.

    Told by the modules of the model's classes (``tf_keras.src...`` or ``keras.src...``;
    ``tf.keras`` is Keras 3), so that only the Keras that built it is imported.
    """
    packages = {cls.__module__.partition(".")[0] for cls in type(model).__mro__}
    for name in ("tf_keras", "keras"):
        if name not in packages:
            continue
        module = importlib.import_module(name)
        if isinstance(model, module.Model):
            return name, module
    raise TypeError(
        "Expected `model` to be a tf_keras.Model or a keras.Model (Keras 3). "
        f"Received: model={model!r} of type {type(model).__name__}"
    )


def _in_graph_mode(model: Any) -> bool:
    """Whether the model's weights live in a ``tf.Graph`` (v1 graph mode)."""
    for weight in getattr(model, "weights", []):
        try:
            return weight.graph is not None
        except AttributeError:  # eager variables have no graph
            return False
    return not tf.compat.v1.executing_eagerly_outside_functions()


class KerasCallbacks(Hook):
    """Drive a list of Keras callbacks from the loop, as ``model.fit`` would.

    ``params`` are those of the matching ``fit``: ``epochs``, ``steps`` and ``verbose``,
    and in graph mode also ``batch_size``, ``samples``, ``do_validation`` and
    ``metrics``, as ``tf_keras``' graph-mode ``fit`` gives them. Logs hold Python
    floats. Epoch logs are the loop's shared ``logs`` dict: keys a callback adds there
    (``lr`` from ``ReduceLROnPlateau``, for example) reach the history the loop returns.
    In graph mode batch logs also hold ``batch`` and ``size`` (1), as graph-mode ``fit``
    gives them. Batch logs hold the running means of the fetched values over the epoch.

    ``model.stop_training = True`` set by a callback stops the loop where ``fit`` stops:
    after the current batch (from a batch hook) or after the epoch. Like ``fit``, the
    hook appends a ``History`` (unless one is in the list; it becomes ``model.history``)
    and, when ``verbose`` is not 0, a ``ProgbarLogger``.

    In graph mode the loop's session becomes the default session while callbacks run,
    so Keras' own calls (``get_weights``, ``save_weights``, ``backend.get_value``) use
    it. Callbacks that read ``model.optimizer`` (``ReduceLROnPlateau``,
    ``LearningRateScheduler``, ``TensorBoard``'s learning rate) need the model to have
    one: ``tfr_hooks.keras_training_graph`` sets it.

    Callbacks that cannot work in graph mode are refused at construction with a
    ``ValueError``: ``BackupAndRestore`` (``tf_keras`` supports it in eager mode only),
    ``ModelCheckpoint`` to a ``.weights.h5`` or ``.keras`` path (the Keras 3 formats
    need eager mode; use ``.h5``), and ``TensorBoard(histogram_freq>0)`` or
    ``TensorBoard(embeddings_freq>0)`` (they need a compiled model's own test function
    and fed inputs).

    Args:
        callbacks: Keras callback instances of the Keras that built ``model``.
        model: The model the callbacks watch (``callback.model``).
        verbose: ``fit``'s ``verbose``: 0 (silent, the default here), 1 (progress bar),
            2 (one line per epoch) or ``"auto"`` (1).
        add_history: Append a ``History`` callback when the list has none, as ``fit``
            does.
        metrics: Graph mode: the names of the logged values (``loss`` first) for
            ``params["metrics"]``; by default the compiled model's ``metrics_names``,
            else the batch log names once the first batch ran.
            :meth:`KerasTrainingGraph.keras_callbacks` fills it in.
        do_validation: Graph mode: ``params["do_validation"]``; by default ``False``
            until the first validation pass, which sets it (and adds the ``val_`` names
            to ``params["metrics"]``).

    Raises:
        TypeError: If ``model`` is not a Keras model, or an item of ``callbacks`` is not
            a callback of that Keras.
        ValueError: If ``verbose`` is invalid, or a callback cannot work in graph mode.

    Examples:
        >>> stop = tf_keras.callbacks.EarlyStopping(monitor="val_loss")  # doctest: +SKIP
        >>> hook = KerasCallbacks([stop], model)  # doctest: +SKIP
        >>> loop = SessionLoop(train_op, fetches, hooks=[hook])  # doctest: +SKIP
        >>> history = loop.run(epochs=20, validation_data=val)  # doctest: +SKIP
    """

    def __init__(
        self,
        callbacks: Sequence[Any] | None,
        model: Any,
        *,
        verbose: int | str = 0,
        add_history: bool = True,
        metrics: Sequence[str] | None = None,
        do_validation: bool | None = None,
    ) -> None:
        self.flavor, keras = _keras_flavor(model)
        if isinstance(verbose, bool) or verbose not in _VERBOSE:
            raise ValueError(
                f"Expected `verbose` to be one of 0, 1, 2 or 'auto'. Received: verbose={verbose!r}"
            )
        if callbacks is None:
            callbacks = []
        if isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Sequence):
            raise TypeError(
                f"Expected `callbacks` to be a list of {self.flavor}.callbacks.Callback "
                f"instances. Received: callbacks={callbacks!r}"
            )
        base = keras.callbacks.Callback
        for i, callback in enumerate(callbacks):
            if not isinstance(callback, base):
                hint = ""
                if type(callback).__name__ in dir(keras.callbacks):
                    hint = (
                        f" (a callback of another Keras: the model is a {self.flavor} model, "
                        f"so use {self.flavor}.callbacks.{type(callback).__name__})"
                    )
                raise TypeError(
                    f"Expected `callbacks[{i}]` to be a {self.flavor}.callbacks."
                    f"Callback{hint}. Received: callbacks[{i}]={callback!r} of type "
                    f"{type(callback).__name__}"
                )
        self.model = model
        self.graph_mode = self.flavor == "tf_keras" and _in_graph_mode(model)
        if self.graph_mode:
            _refuse_graph_incompatible(callbacks, keras)
        self.verbose = 1 if verbose == "auto" else int(verbose)
        self.callbacks = list(callbacks)
        if add_history and not any(isinstance(c, keras.callbacks.History) for c in callbacks):
            self.callbacks.append(keras.callbacks.History())
        if self.verbose and not any(
            isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks
        ):
            if self.flavor == "tf_keras":
                self.callbacks.append(keras.callbacks.ProgbarLogger(count_mode="steps"))
            else:
                self.callbacks.append(keras.callbacks.ProgbarLogger())
        if metrics is not None and (
            isinstance(metrics, (str, bytes)) or not all(isinstance(m, str) for m in metrics)
        ):
            raise TypeError(
                f"Expected `metrics` to be a list of names. Received: metrics={metrics!r}"
            )
        self.metrics = None if metrics is None else list(metrics)
        self.do_validation = do_validation
        self._keras = keras
        self.params: dict[str, Any] = {}
        self._began = False
        self._contexts: list[Any] = []
        self._last_logs: dict[str, Any] = {}
        self._deferred = self._val_deferred = False
        self._val_steps: int | None = None
        self._val_seen = 0
        self._writing = ChiefOnlyWriting(TaskInfo())
        self._active: list[Any] = list(self.callbacks)
        self._input_scalars = InputScalarWriter()
        #: The callbacks with batch methods of their own, as ``Name.method``: Keras' own
        #: callbacks take one call per execution (as ``fit`` with ``steps_per_execution``
        #: makes it), a batch method from your code is taken to count every batch.
        self.per_batch = tuple(
            f"{type(c).__name__}.{m}" for c in self.callbacks if (m := _own_batch_method(c))
        )
        self.needs_every_step = bool(self.per_batch)

    def __repr__(self) -> str:
        names = ", ".join(type(c).__name__ for c in self.callbacks)
        batch = f", per batch: {', '.join(self.per_batch)}" if self.per_batch else ""
        return f"KerasCallbacks([{names}]{batch})"

    # -- lifecycle -------------------------------------------------------------------

    def begin(self) -> None:
        """Reset the run's state."""
        self._began = False
        self._contexts = []
        self._last_logs = {}
        self.params = {}
        self._deferred = self._val_deferred = False
        self._val_steps = None
        self._val_seen = 0
        self._input_scalars = InputScalarWriter()
        #: the active callbacks whose training batch methods do something (see
        #: :func:`_listeners`), set at ``after_create_session``: the rest get no call a step
        self._batch_begin: list[Any] = []
        self._batch_end: list[Any] = []

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Set params and model, then ``on_train_begin``; pick up a restored epoch."""
        if self.graph_mode and session is not None:
            self._enter(session.graph.as_default())
            self._enter(session.as_default())
        loop = self.loop
        steps = loop.steps_per_epoch
        params: dict[str, Any] = {"verbose": self.verbose, "epochs": loop.epochs, "steps": steps}
        if self.graph_mode:
            names = self.metrics
            if names is None:
                names = list(getattr(self.model, "metrics_names", None) or [])
            do_validation = bool(self.do_validation)
            if do_validation:
                names = names + [f"val_{n}" for n in names]
            params.update(
                batch_size=None,
                samples=steps,
                do_validation=do_validation,
                metrics=names,
            )
        self.params = params
        history = None
        # on non-chief workers, files go to a temporary place; no progress bar
        self._writing = ChiefOnlyWriting(current_task(model=self.model))
        self._active = self._writing.apply(self.callbacks, self._keras)
        for callback in self._active:
            callback.set_model(self.model)
            callback.set_params(params)
            if isinstance(callback, self._keras.callbacks.History):
                history = callback
        if history is not None:
            self.model.history = history
        base = self._keras.callbacks.Callback
        self._batch_begin = _listeners(self._active, base, "on_train_batch_begin", "on_batch_begin")
        self._batch_end = _listeners(self._active, base, "on_train_batch_end", "on_batch_end")
        self.model.stop_training = False
        self._began = True
        self._call("on_train_begin", {})
        # what the backups restored say, read before the other workers' paths move
        positions = self._backup_positions()
        inputs = [_read_input(callback) for callback, _, _ in positions]
        self._writing.after_train_begin(self._active, self._keras)
        self._pick_up_initial_epoch()
        self._pick_up_initial_step(positions)
        saved = [state for state in inputs if state]
        if saved and positions:  # a mixture's weights, saved beside the Keras backup
            loop.initial_input = saved[0]

    def epoch_begin(self, epoch: int) -> None:
        """``on_epoch_begin(epoch, {})``.

        A Keras 3 ``BackupAndRestore`` learns the epoch of its batch-level saves from
        its own epoch ends only: in a run another hook resumed at a later epoch than its
        backup (a ``PreemptionCheckpoint``), it would write the backup's epoch until the
        next epoch end, and a start from that save would go back further than needed.
        It is told the epoch here.
        """
        if self.flavor == "keras" and not self.graph_mode:
            state = self.loop.input_state if epoch == self.loop.initial_epoch else None
            for callback in self._active:
                if isinstance(callback, self._keras.callbacks.BackupAndRestore):
                    set_backup_epoch(callback, epoch)
                    if state is not None:  # the run's input state: the same all along
                        _write_input(callback, state)
        self._call("on_epoch_begin", epoch, {})

    def before_run(self, run_context: Any) -> None:
        """``on_train_batch_begin(batch)``; the batch index is ``loop.epoch_steps``.

        Once the epoch length is known, the step that only finds the end of the data is
        not announced (``fit`` knows the length and does not run it); should it bring a
        batch after all, its ``on_train_batch_begin`` comes just before its end.
        """
        loop = self.loop
        known = loop.steps_per_epoch
        self._deferred = known is not None and loop.epoch_steps >= known
        if not self._deferred and self._batch_begin:
            self._call_batch(self._batch_begin, "on_train_batch_begin", loop.epoch_steps, None)
        return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """``on_train_batch_end(batch, logs)``; a stop asked by a callback ends the epoch.

        The logs are copied once a step, for the callbacks that listen to it only.
        """
        loop = self.loop
        batch = loop.epoch_steps
        if self._deferred:
            self._deferred = False
            if self._batch_begin:
                self._call_batch(self._batch_begin, "on_train_batch_begin", batch, None)
        if self.graph_mode and not self.params.get("metrics"):
            self.params["metrics"] = list(loop.batch_logs)
        if self._batch_end:
            # with steps_per_execution=K, Keras 3 fit ends a call with the index of its last step
            end = batch + max(1, loop.steps_per_execution) - 1
            self._call_batch(self._batch_end, "on_train_batch_end", end, loop.batch_logs)
        if getattr(self.model, "stop_training", False):
            loop.request_stop("a Keras callback set model.stop_training")

    def validation_begin(self) -> None:
        """``on_test_begin``."""
        if self.graph_mode and not self.params.get("do_validation") and self.do_validation is None:
            self.params["do_validation"] = True
            names = list(self.params.get("metrics") or [])
            self.params["metrics"] = names + [f"val_{n}" for n in names]
        self._val_seen = 0
        self._call("on_test_begin", {})

    def validation_batch_begin(self, step: int) -> None:
        """``on_test_batch_begin(step)`` (held back past the known end, as in training)."""
        self._val_deferred = self._val_steps is not None and step >= self._val_steps
        if not self._val_deferred:
            self._call("on_test_batch_begin", step, self._batch_logs(None, step))

    def validation_batch_end(self, step: int, logs: dict[str, float]) -> None:
        """``on_test_batch_end(step, logs)``."""
        if self._val_deferred:
            self._val_deferred = False
            self._call("on_test_batch_begin", step, self._batch_logs(None, step))
        self._val_seen = step + 1
        self._call("on_test_batch_end", step, self._batch_logs(logs, step))

    def validation_end(self, logs: dict[str, float]) -> None:
        """``on_test_end``."""
        self._val_steps = max(self._val_steps or 0, self._val_seen)
        self._val_seen = 0
        self._call("on_test_end", {} if self.graph_mode else dict(logs))

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """``on_epoch_end(epoch, logs)`` with the loop's shared logs; honour stop_training."""
        # on_train_end gets the logs as they were before the callbacks added keys (fit
        # gives its callbacks a copy, so ReduceLROnPlateau's learning_rate stays out).
        # The engine made the values Python floats already, and turns what callbacks add
        # into floats for the history.
        self._last_logs = dict(logs)
        self._call("on_epoch_end", epoch, logs)
        self._write_input_scalars(epoch)
        if getattr(self.model, "stop_training", False):
            self.loop.request_stop("a Keras callback set model.stop_training")

    def end(self, session: Any) -> None:
        """``on_train_end``, unless the run failed (as ``fit``, which lets errors through)."""
        try:
            if self._began and self.loop.error is None:
                self._call("on_train_end", {} if self.graph_mode else dict(self._last_logs))
        finally:
            self._began = False
            self._input_scalars.close()  # before a non-chief's temporary dir goes
            self._writing.restore()  # original paths back, temporary dir removed
            self._active = list(self.callbacks)
            self._batch_begin, self._batch_end = [], []
            while self._contexts:
                self._contexts.pop().__exit__(None, None, None)

    # -- helpers ---------------------------------------------------------------------

    def _write_input_scalars(self, epoch: int) -> None:
        """The epoch's input measurement beside each ``TensorBoard`` callback's runs."""
        stats = self.loop.input_stats
        if not isinstance(stats, InputStats) or stats.epoch != epoch:
            return  # not measured (data fed by a hook, or measure_input=False)
        for callback in self._active:  # on a non-chief, log_dir is its temporary place
            if isinstance(callback, self._keras.callbacks.TensorBoard):
                log_dir = os.fspath(callback.log_dir)
                sources = mixture_scalars(self.loop.history_entries)  # a mixture's
                self._input_scalars.write(os.path.join(log_dir, INPUT_RUN), stats, sources)

    def _call(self, method: str, *args: Any) -> None:
        for callback in self._active:  # the callbacks this worker runs
            getattr(callback, method)(*args)

    def _call_batch(
        self, callbacks: list[Any], method: str, batch: int, logs: dict[str, Any] | None
    ) -> None:
        """A training batch event for ``callbacks``: one fresh logs dict, as ``fit`` gives."""
        logs = self._batch_logs(logs)
        for callback in callbacks:
            getattr(callback, method)(batch, logs)

    def _batch_logs(self, logs: dict[str, float] | None = None, batch: int | None = None) -> Any:
        """Batch logs as ``fit`` gives them: graph-mode ``fit`` adds ``batch`` and ``size``."""
        result: dict[str, Any] = {}
        if self.graph_mode:
            result = {"batch": self.loop.epoch_steps if batch is None else batch, "size": 1}
        if logs:
            result.update(logs)
        return result

    def _enter(self, context: Any) -> None:
        context.__enter__()
        self._contexts.append(context)

    def _pick_up_initial_epoch(self) -> None:
        """Start where a restored backup says (Keras' ``BackupAndRestore``)."""
        model, loop = self.model, self.loop
        if self.flavor == "keras":
            restored = take_restored_epoch(model)  # consumed, as fit does
        else:
            steps = loop.steps_per_epoch or 1
            restored = tf_keras_restored_epoch(model, steps, loop.initial_epoch)
        if restored is not None and restored > loop.initial_epoch:
            logger.info("Resuming at epoch %d from a Keras backup", restored)
            loop.initial_epoch = restored

    def _backup_positions(self) -> list[tuple[Any, int, int]]:
        """``(callback, epoch, batch)`` from each Keras 3 ``BackupAndRestore``'s metadata.

        ``batch`` is the index of the last batch trained before a batch-level save
        (``save_freq=N``), 0 in a save at an epoch's end (which names the next epoch).
        """
        found: list[tuple[Any, int, int]] = []
        if self.flavor != "keras" or self.graph_mode:
            return found
        for callback in self._active:
            if not isinstance(callback, self._keras.callbacks.BackupAndRestore):
                continue
            path = backup_metadata_path(callback)
            if not path or not tf.io.gfile.exists(path):
                continue
            try:
                with tf.io.gfile.GFile(path, "r") as f:
                    metadata = json.loads(f.read())
                found.append((callback, int(metadata["epoch"]), int(metadata.get("batch", 0))))
            except (ValueError, KeyError, TypeError) as error:
                logger.warning("Could not read the Keras backup metadata %s: %s", path, error)
        return found

    def _pick_up_initial_step(self, positions: list[tuple[Any, int, int]]) -> None:
        """Resume mid-epoch where a batch-level ``BackupAndRestore`` save was taken.

        Keras records the last batch of a batch-level save (``save_freq=N``) but
        ``fit`` restarts that epoch from its first batch (keras-team/keras#19179), so
        that its first batches are trained twice. Here the loop resumes at the next
        batch instead, as after a :class:`~tfr_hooks.PreemptionCheckpoint`: it skips
        the batches trained before the save and runs the epoch to its end.

        An epoch-end save and a save after an epoch's first batch both record batch 0;
        the optimizer's step count tells them apart when the steps of an epoch are
        known up front (``loop.steps_per_epoch``), else batch 0 is taken as the epoch's
        start.
        """
        loop = self.loop
        for callback, epoch, batch in positions:
            # Keras counts the epoch of its batch-level saves from its own epoch ends: a
            # resumed callback would write epoch 0 until its first one
            set_backup_epoch(callback, epoch)
            if epoch != loop.initial_epoch:
                continue
            done = batch + 1 if batch > 0 else 0
            known = loop.steps_per_epoch
            optimizer = getattr(self.model, "optimizer", None)
            if batch == 0 and known is not None and optimizer is not None:
                done = int(int(optimizer.iterations.numpy()) == epoch * known + 1)
            if done > loop.initial_step:
                logger.info(
                    "Resuming at epoch %d, step %d from a batch-level Keras backup",
                    epoch,
                    done,
                )
                loop.initial_step = done
            set_backup_last_batch(callback, max(done - 1, 0))


#: Beside a Keras 3 ``BackupAndRestore``'s metadata: the input's state (a mixture's
#: weights, ``loop.input_state``), removed with the backup's directory at the run's end.
_INPUT_FILE = "tfr_hooks_input"


def _input_path(callback: Any) -> str | None:
    """Where the input state of a Keras 3 ``BackupAndRestore``'s backup is kept."""
    metadata = backup_metadata_path(callback)
    return None if metadata is None else os.path.join(os.path.dirname(metadata), _INPUT_FILE)


def _read_input(callback: Any) -> bytes | None:
    """The input state saved beside a backup, if any."""
    path = _input_path(callback)
    if path is None or not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read() or None


def _write_input(callback: Any, state: bytes) -> None:
    """Save the run's input state beside the backup (a temporary file, renamed)."""
    path = _input_path(callback)
    if path is None:
        return
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path + ".tempstate", "wb") as f:
        f.write(state)
    tf.io.gfile.rename(path + ".tempstate", path, overwrite=True)


#: The batch-level methods of a Keras callback.
_BATCH_METHODS = (
    "on_batch_begin",
    "on_batch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_batch_begin",
    "on_test_batch_end",
)


def _listeners(callbacks: Sequence[Any], base: type, method: str, alias: str) -> list[Any]:
    """The ``callbacks`` whose ``method`` is not the Keras base class's no-op.

    The base class's ``on_train_batch_begin``/``_end`` only call ``on_batch_begin``/
    ``_end`` (``alias``), no-ops too: a callback that overrides neither (``History``,
    ``EarlyStopping``, a callback of epoch methods only) does nothing at a batch, and
    gets no call there, as ``fit`` sends its batch ends to no callback when none
    overrides them. A method set on the instance (``LambdaCallback``) counts as one.
    """
    return [
        callback
        for callback in callbacks
        if any(
            name in vars(callback) or getattr(type(callback), name) is not getattr(base, name)
            for name in (method, alias)
        )
    ]


def _own_batch_method(callback: Any) -> str | None:
    """The first batch method of ``callback`` that comes from outside Keras, or ``None``.

    A method set on the instance (``LambdaCallback(on_train_batch_end=...)``) or defined
    by a class of another package than ``keras``/``tf_keras`` (the user's subclass)
    counts; Keras' own definitions (its no-op base methods, ``ProgbarLogger``'s,
    ``TensorBoard``'s, ``ModelCheckpoint``'s) work per execution, as in ``fit``.
    """
    for name in _BATCH_METHODS:
        if name in vars(callback):
            return name
        for cls in type(callback).__mro__:
            if name in vars(cls):
                if cls.__module__.partition(".")[0] not in ("keras", "tf_keras"):
                    return name
                break
    return None


def _refuse_graph_incompatible(callbacks: Sequence[Any], keras: Any) -> None:
    """Raise a clear ``ValueError`` for callbacks that cannot work in graph mode."""
    for i, callback in enumerate(callbacks):
        if isinstance(callback, keras.callbacks.BackupAndRestore):
            raise ValueError(
                "tf_keras' BackupAndRestore works in eager mode only, and this model lives "
                "in a graph (SessionLoop). Use ModelCheckpoint(save_weights_only=True), "
                "then model.load_weights(...) and loop.run(initial_epoch=...) to resume, or "
                f"train with a TF2 loop. Received: callbacks[{i}]={callback!r}"
            )
        filepath = str(getattr(callback, "filepath", ""))
        if isinstance(callback, keras.callbacks.ModelCheckpoint) and filepath.endswith(
            (".weights.h5", ".keras")
        ):
            raise ValueError(
                "tf_keras' ModelCheckpoint writes `.weights.h5` and `.keras` files in the "
                "Keras 3 format, which needs eager execution; this model lives in a graph "
                "(SessionLoop). Expected a filepath ending in `.h5` (or a TensorFlow "
                f"checkpoint prefix). Received: callbacks[{i}]={callback!r} with "
                f"filepath={filepath!r}"
            )
        if isinstance(callback, keras.callbacks.TensorBoard):
            for name in ("histogram_freq", "embeddings_freq"):
                value = getattr(callback, name, 0)
                if value:
                    raise ValueError(
                        f"TensorBoard({name}={value}) does not work on a tensor-fed model in "
                        "graph mode (it needs the compiled model's test function and fed "
                        f"inputs). Expected {name}=0. Received: callbacks[{i}]={callback!r}"
                    )
