"""TensorBoardLogger: epoch and batch scalars in ``train/`` and ``validation/`` runs.

In graph mode ``tf_keras.callbacks.TensorBoard`` becomes the TF1 callback, which writes
every scalar (``epoch_loss``, ``epoch_val_loss``...) into one events directory, so
TensorBoard shows no separate train and validation curves. This hook writes the layout
of the TF2 Keras callback instead, in any mode (it writes event files directly with
TensorBoard's own writer, so it needs no session and no eager context):

* ``LOG_DIR/train``: ``epoch_<name>`` for each epoch log without ``val_``, including
  ``epoch_learning_rate``; ``batch_<name>`` every ``update_freq`` batches.
* ``LOG_DIR/validation``: ``epoch_<name>`` for each ``val_<name>`` epoch log.
* ``LOG_DIR/train`` too: the loop's input measurement of each epoch
  (``loop.input_stats``, see :mod:`tfr_hooks.input_report`) as ``input/wait_share``
  and ``input/examples_per_sec``, and a mixture's sources (``weights=``) as
  ``input/examples/<name>`` and ``input/epochs/<name>`` (:func:`mixture_scalars`), the
  keys of the run's history, which TensorBoard shows as a group of their own
  (``input``).
* In graph mode, the session's graph, once per run, in ``LOG_DIR/train`` (TensorBoard's
  Graphs tab), as ``FileWriter(logdir, graph)`` and ``tf_keras``'
  ``TensorBoard(write_graph=True)`` write it.

Open them with ``tensorboard --logdir LOG_DIR``.

Users of Keras' own ``TensorBoard`` callback (through :class:`~tfr_hooks.KerasCallbacks`)
get the input scalars too: :class:`InputScalarWriter` writes them to a run of their own,
``input``, beside the callback's runs (``LOG_DIR/input``). A run of its own, not a second
events file in the callback's ``train`` directory: TensorBoard follows only the newest
events file of a run directory while it is being written (unless started with
``--reload_multifile``), so two writers in one directory would hide one's scalars.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tfr_hooks.entries import MIXTURE_EPOCHS, MIXTURE_EXAMPLES
from tfr_hooks.hooks import Hook
from tfr_hooks.input_report import InputStats
from tfr_hooks.task import current_task

__all__ = ["INPUT_RUN", "InputScalarWriter", "TensorBoardLogger", "mixture_scalars"]

logger = logging.getLogger(__name__)

_LR_KEYS = ("learning_rate", "lr")

#: The run, beside a Keras ``TensorBoard`` callback's ``train`` and ``validation`` runs,
#: that holds the loop's input scalars (``input/wait_share``, ``input/examples_per_sec``).
INPUT_RUN = "input"


def mixture_scalars(entries: dict[str, Any]) -> dict[str, Any]:
    """A mixture's sources' history entries: ``input/examples/<name>``, ``input/epochs/<name>``.

    What :class:`~tfr_hooks.entries.MixtureEntries` added to ``loop.history_entries``.
    """
    keys = (MIXTURE_EXAMPLES, MIXTURE_EPOCHS)
    return {key: value for key, value in entries.items() if key.startswith(keys)}


def _scalar_event(step: int, values: dict[str, Any]) -> Event | None:
    """An event of the numeric ``values`` as scalars at ``step``; ``None`` if none is."""
    scalars = []
    for tag, value in values.items():
        try:
            scalars.append(Summary.Value(tag=tag, simple_value=float(value)))
        except (TypeError, ValueError):
            continue  # not a number
    if not scalars:
        return None
    return Event(wall_time=time.time(), step=step, summary=Summary(value=scalars))


class InputScalarWriter:
    """Writes each epoch's input measurement as scalars of a run directory.

    The tags are the run history's keys (:data:`~tfr_hooks.input_report.HISTORY_KEYS`),
    which TensorBoard shows as a group of their own, ``input``; the step is the epoch.
    :class:`~tfr_hooks.KerasCallbacks` uses it to put them beside the runs of Keras'
    ``TensorBoard`` callback, in ``LOG_DIR/input`` (:data:`INPUT_RUN`).
    """

    def __init__(self) -> None:
        self._writers: dict[str, EventFileWriter] = {}

    def write(
        self,
        run_dir: str | os.PathLike[str],
        stats: InputStats,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Write ``stats`` (and ``extra`` scalars) at its epoch in ``run_dir``, and flush them."""
        path = os.fspath(run_dir)
        writer = self._writers.get(path)
        if writer is None:  # the writer makes the directory
            writer = self._writers[path] = EventFileWriter(path)
        event = _scalar_event(stats.epoch, {**stats.history(), **(extra or {})})
        if event is not None:
            writer.add_event(event)
        writer.flush()

    def close(self) -> None:
        """Close the event files."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


class TensorBoardLogger(Hook):
    """Write epoch (and batch) scalars as TensorBoard ``train`` and ``validation`` runs.

    Put it after :class:`~tfr_hooks.KerasCallbacks` in the hook list so it sees keys the
    callbacks add to the epoch logs (``lr`` from ``ReduceLROnPlateau``).

    Args:
        log_dir: The directory holding the ``train`` and ``validation`` runs.
        update_freq: ``"epoch"`` (epoch scalars only), ``"batch"`` (also ``batch_<name>``
            after every batch) or an integer N (after every N batches). Batch scalars
            are the running epoch means the loop logs, stepped by the global batch count.
            A call of several steps writes once, at its last step.
        model: A Keras model whose ``optimizer`` learning rate is written as
            ``epoch_learning_rate`` when the epoch logs carry no ``lr``/``learning_rate``.
        write_graph: Whether to write the graph of a graph-mode loop's session to
            ``train/`` when the session is created (TF2 loops have no session graph).

    Raises:
        TypeError: If ``log_dir`` is not a path.
        ValueError: If ``update_freq`` is invalid.

    Examples:
        >>> board = TensorBoardLogger("logs/tensorboard", model=model)  # doctest: +SKIP
        >>> hooks = [KerasCallbacks(callbacks, model), board]  # doctest: +SKIP
    """

    #: Only the chief writes the run's events (a non-chief ``SessionLoop`` drops it).
    chief_only = True
    #: Its ``after_run`` counts ``loop.call_steps``, so calls of many steps are fine.
    needs_every_step = False

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        update_freq: str | int = "epoch",
        model: Any = None,
        write_graph: bool = True,
    ) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"Expected `log_dir` to be a path. Received: log_dir={log_dir!r}")
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (
            isinstance(update_freq, bool) or not isinstance(update_freq, int) or update_freq <= 0
        ):
            raise ValueError(
                "Expected `update_freq` to be 'epoch', 'batch' or a positive integer. "
                f"Received: update_freq={update_freq!r}"
            )
        self.log_dir = os.fspath(log_dir)
        self.update_freq = update_freq
        self.model = model
        if not isinstance(write_graph, bool):
            raise TypeError(
                f"Expected `write_graph` to be a bool. Received: write_graph={write_graph!r}"
            )
        self.write_graph = write_graph
        self._writers: dict[str, EventFileWriter] = {}
        self._batches = 0
        self._chief = True

    def begin(self) -> None:
        """Reset the batch count; writers open when first needed."""
        self._writers = {}
        self._batches = 0
        # in a multi-worker cluster only the chief writes events; a loop told who the
        # chief is (SessionLoop(is_chief=...)) says so, else the strategy or TF_CONFIG
        loop = self.attached_loop
        told = None if loop is None else loop.is_chief
        self._chief = told if told is not None else current_task(model=self.model).is_chief

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Write the session's graph to ``train/`` (graph mode, with ``write_graph``)."""
        graph = getattr(session, "graph", None)
        if not self.write_graph or graph is None or not hasattr(graph, "as_graph_def"):
            return
        graph_def = graph.as_graph_def(add_shapes=True)
        event = Event(wall_time=time.time(), step=0, graph_def=graph_def.SerializeToString())
        self._writer("train").add_event(event)
        self._writer("train").flush()

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Write ``batch_<name>`` scalars when a multiple of ``update_freq`` batches ran.

        A call of several steps (``steps_per_execution``) counts all of them and writes at
        most once, at its last step, when it passed a multiple of ``update_freq``.
        """
        loop = self.loop
        ran = max(1, loop.call_steps)
        before, self._batches = self._batches, self._batches + ran
        if self.update_freq == "epoch":
            return
        freq = int(self.update_freq)
        if self._batches // freq > before // freq:
            values = {f"batch_{k}": v for k, v in loop.batch_logs.items()}
            self._write("train", loop.global_step + ran, values)

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Write ``epoch_<name>`` and ``input/...`` scalars to ``train/`` and ``validation/``."""
        train: dict[str, float] = {}
        validation: dict[str, float] = {}
        for key, value in logs.items():
            if key.startswith("val_"):
                validation[f"epoch_{key[4:]}"] = value
            elif key in _LR_KEYS:
                train["epoch_learning_rate"] = value
            else:
                train[f"epoch_{key}"] = value
        if "epoch_learning_rate" not in train:
            lr = self._optimizer_learning_rate()
            if lr is not None:
                train["epoch_learning_rate"] = lr
        loop = self.attached_loop
        stats = None if loop is None else loop.input_stats
        if isinstance(stats, InputStats) and stats.epoch == epoch:
            train.update(stats.history())  # input/wait_share, input/examples_per_sec
        if loop is not None:  # a mixture's sources: input/examples/<name>, input/epochs/<name>
            train.update(mixture_scalars(loop.history_entries))
        self._write("train", epoch, train)
        if validation:
            self._write("validation", epoch, validation)
        for writer in self._writers.values():
            writer.flush()

    def end(self, session: Any) -> None:
        """Close the event files."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def _write(self, run: str, step: int, values: dict[str, Any]) -> None:
        if not self._chief:  # the chief writes the run's events, once
            return
        event = _scalar_event(step, values)
        if event is not None:
            self._writer(run).add_event(event)

    def _writer(self, run: str) -> EventFileWriter:
        writer = self._writers.get(run)
        if writer is None:
            path = os.path.join(self.log_dir, run)
            os.makedirs(path, exist_ok=True)
            writer = self._writers[run] = EventFileWriter(path)
        return writer

    def _optimizer_learning_rate(self) -> float | None:
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return None
        lr = getattr(optimizer, "learning_rate", None)
        if lr is None:
            lr = getattr(optimizer, "lr", None)
        if lr is None or (callable(lr) and not hasattr(lr, "dtype")):
            return None  # a schedule: its value is in the logs when a callback puts it there
        try:
            session = getattr(self.loop, "session", None)
            if session is not None and hasattr(lr, "graph"):
                return float(session.run(lr))
            return float(lr)
        except Exception:
            logger.debug("Could not read the learning rate", exc_info=True)
            return None
