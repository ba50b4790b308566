"""SessionLoop: the engine in graph mode, one ``session.run`` per step with merged fetches."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import (
    check_bool,
    check_fetches,
    check_optional_positive_int,
    check_positive_number,
    expected,
)
from tfr_hooks.engine import Passes, RunInput, check_run_args, run_loop
from tfr_hooks.entries import input_entries
from tfr_hooks.graph.cluster import (
    DEFAULT_WAIT_FOR_CHIEF_SECS,
    ClusterSession,
    checkpoint_dir_of,
    drop_writers,
    loop_device,
    warn_local_variables_on_ps,
    worker_device,
)
from tfr_hooks.graph.input_wait import input_wait
from tfr_hooks.graph.metrics import RunningMeans
from tfr_hooks.graph.packed_fetches import PackedFetches
from tfr_hooks.graph.session_runner import RunSettings, SessionRunner
from tfr_hooks.graph.setup import (
    TrainingGraph,
    check_data,
    ensure_saver,
    input_hooks,
    training_of,
)
from tfr_hooks.graph.validation import Validation
from tfr_hooks.hooks import HookList, LoopState, check_hooks
from tfr_hooks.input_report import InputFacts, facts_of_read
from tfr_hooks.service.address import check_service_address
from tfr_hooks.service.watch import check_service_timeout
from tfr_hooks.signals import with_signal_hook
from tfr_hooks.task import current_task
from tfr_hooks.tfrecord.pipelines.read import Batches, PipelineKind

__all__ = ["SessionLoop"]

logger = logging.getLogger(__name__)

_v1 = tf.compat.v1


class SessionLoop:
    """Train with your own train op in a ``tf.compat.v1.Session``, driving hooks.

    Each step is one ``session.run`` of the train op, the running means of ``fetches`` and
    whatever the hooks add in ``before_run``. An ``OutOfRangeError`` from the input ends
    the epoch: with ``initializers`` (a re-initializable source) the next epoch restarts
    the data; without them (a one-shot source such as queues the loop was not told
    about) training ends after closing the epoch. With ``steps_per_epoch``, epochs are
    counted in steps. Queue runners in the graph are started and joined by a
    :class:`~tfr_hooks.QueueRunnerHook` added automatically.

    A queue pipeline given as ``data`` (``read_batches(..., pipeline="queue")``) is one
    stream of ``num_epochs`` passes that cannot be restarted. When the number of examples
    in a pass is known (every file listed in a ``schema.json``, as ``tfrecord.write``
    writes), the loop splits the stream into epochs of that many examples (the batch
    that crosses a boundary counts in the epoch it ends, as the queue mixes the passes
    when it shuffles), so ``run(epochs=5)`` on ``num_epochs=5`` gives five epochs; with
    ``num_epochs=None`` the stream is endless and the run ends after ``epochs``. A queue
    pipeline that could never end an epoch (``num_epochs=None`` and no count) is refused
    here, and ``run`` refuses epochs the stream cannot give; ``steps_per_epoch`` counts
    epochs in steps instead, whatever the pipeline. A ``"dataset"`` pipeline built with
    ``num_epochs=None`` never runs out either, so it needs ``steps_per_epoch``.

    The arguments it shares with :class:`~tfr_hooks.FunctionLoop` (``data``, ``hooks``,
    ``steps_per_epoch``, ``handle_signals``, ``measure_input``, and ``run``'s ``epochs``,
    ``validation_data``, ``validation_steps``, ``validation_freq``, ``initial_epoch``)
    have the same names, meanings and defaults.

    Args:
        train_op: The op (or tensor, or list of them) to run each step, or a
            :class:`~tfr_hooks.KerasTrainingGraph`: its train op, and its ``fetches``,
            ``batch_size`` and hooks (the learning-phase feed) unless given here.
        fetches: Name to scalar tensor to average over each epoch (``loss``, ``acc``...).
        data: The :class:`~tfr_hooks.tfrecord.Batches` the train op reads (from
            ``tfrecord.read_batches``, or ``tfrecord.batches_of`` for a dataset built in
            the graph): the loop runs its initializers at each epoch
            start, weighs the means by its batch size and turns its read errors into
            errors naming the file.
        hooks: ``SessionRunHook`` instances (stock TensorFlow hooks or
            :class:`~tfr_hooks.Hook` subclasses), called in this order.
        steps_per_epoch: Steps per epoch, or ``None`` to let the data decide.
        initializers: Ops run at the start of each epoch to restart the data (after
            those of ``data``).
        batch_size: The batch size (a scalar tensor such as ``tf.shape(x)[0]``, or an
            int) to weigh the means and count examples; ``None`` takes that of ``data``
            or ``train_op``, else weighs steps equally.
        session_config: A ``tf.compat.v1.ConfigProto`` for the session the loop creates.
        run_timeout_secs: Fail a step that blocks for longer than this (for example on a
            queue nobody fills) with ``DeadlineExceededError``; ``None`` waits forever.
        handle_signals: Add a :class:`~tfr_hooks.StopOnSignal` (unless ``hooks`` has
            one): SIGINT/SIGTERM stop the run gracefully, a second one aborts it.
        service_timeout: For input read through a tf.data service (``data`` marked by
            the readers, or a ``distribute`` dataset in the graph): the seconds a step
            may wait for its batch. A step that waits longer ends the run with a
            ``ConnectionError`` naming the address and why (dispatcher unreachable, no
            worker left, or a killed worker's share that TensorFlow never ends).
        measure_input: Measure, per epoch, the share of step time spent waiting for
            input (two ``tf.timestamp`` ops in each ``session.run``; see
            :mod:`tfr_hooks.input_report`): ``loop.input_stats``, the history's
            ``input/...`` keys and the verdict.
            ``False`` leaves the timestamps out of the step (to measure what they cost).
        master: The session target of this worker on a ``tf.compat.v1.train.Server``
            cluster (``server.target``, ``"grpc://host:port"``), for between-graph
            replication as ``MonitoredTrainingSession`` runs it: the chief restores the
            global variables from ``log_dir`` or initializes them, the other
            workers wait for it, every worker initializes its own local variables.
            ``""`` (the default): an in-process session, as without a cluster.
        is_chief: Whether this worker is the chief, which initializes the global
            variables and alone writes checkpoints and events: on other workers the
            stock ``CheckpointSaverHook`` and ``SummarySaverHook`` and the package's
            :class:`~tfr_hooks.TensorBoardLogger` and :class:`~tfr_hooks.EpochCheckpoint`
            in ``hooks`` are dropped. ``None``: with a ``master``, from ``TF_CONFIG``
            (:func:`tfr_hooks.distribute.current_task`; no ``TF_CONFIG`` is a chief);
            without one, the loop is a single process's and drops nothing. ``False``
            needs a ``master``.
        chief_only_hooks: Hooks run after ``hooks``, on the chief only.
        log_dir: The directory whose latest checkpoint (if any) the chief restores the
            global variables from when it creates its session on ``master``; ``None``
            takes the directory of the first stock ``CheckpointSaverHook`` in the hooks,
            if any.
        wait_for_chief_secs: How long a non-chief waits for the chief to initialize the
            global variables before failing with ``DeadlineExceededError`` (by default
            two hours, as ``MonitoredTrainingSession``); it checks every second.

    Examples:
        >>> batches = tfrecord.read_batches("data/train", 128)  # doctest: +SKIP
        >>> loop = SessionLoop(train_op, fetches={"loss": loss}, data=batches)  # doctest: +SKIP
        >>> history = loop.run(epochs=3)  # doctest: +SKIP
        >>> history["loss"]  # one mean per epoch  # doctest: +SKIP

        Validation after each epoch, on a second pipeline sharing the weights:

        >>> val = Validation({"loss": val_loss},  # doctest: +SKIP
        ...                  initializers=val_batches.initializers)
        >>> loop.run(epochs=3, validation_data=val)  # doctest: +SKIP

        Worker ``index`` of a cluster with a ``ps`` job (see ``docs/distributed.md``):

        >>> server = tf.compat.v1.train.Server(cluster, "worker", index)  # doctest: +SKIP
        >>> setter = tf.compat.v1.train.replica_device_setter(  # doctest: +SKIP
        ...     cluster=cluster, worker_device=f"/job:worker/task:{index}")
        >>> with tf.compat.v1.device(setter):  # doctest: +SKIP
        ...     train_op, loss = build_model(batches)
        >>> loop = SessionLoop(  # doctest: +SKIP
        ...     train_op, {"loss": loss}, data=batches, master=server.target,
        ...     is_chief=index == 0, hooks=[CheckpointSaverHook("ckpt", save_steps=100)])
        >>> loop.run(epochs=1)  # doctest: +SKIP
    """

    def __init__(
        self,
        train_op: Any,
        fetches: Mapping[str, Any] | None = None,
        *,
        data: Any = None,
        hooks: Sequence[Any] | None = None,
        steps_per_epoch: int | None = None,
        initializers: Sequence[Any] = (),
        batch_size: Any = None,
        session_config: Any = None,
        run_timeout_secs: float | None = None,
        handle_signals: bool = True,
        measure_input: bool = True,
        master: str | bytes = "",
        is_chief: bool | None = None,
        chief_only_hooks: Sequence[Any] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        wait_for_chief_secs: float = DEFAULT_WAIT_FOR_CHIEF_SECS,
        service_timeout: float = 60.0,
    ) -> None:
        if train_op is None:
            raise TypeError(expected("train_op", "a tf.Operation or tf.Tensor", train_op))
        training = training_of(train_op)
        data = check_data(data)
        train_op, fetches, batch_size = _with_defaults(
            train_op, training, fetches, batch_size, data
        )
        fetch_weights = _fetch_weights(training, fetches)
        check_optional_positive_int(steps_per_epoch, "steps_per_epoch")
        #: the queue pipeline the loop splits into epochs itself (no steps_per_epoch)
        self._stream = _stream_of(data, steps_per_epoch)
        user_hooks = check_hooks(hooks)
        check_positive_number(run_timeout_secs, "run_timeout_secs", optional=True)
        check_bool(measure_input, "measure_input")
        master, is_chief = _check_cluster(master, is_chief)
        chief_hooks = check_hooks(chief_only_hooks, argument="chief_only_hooks")
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(expected("log_dir", "a directory path or None", log_dir))
        check_positive_number(wait_for_chief_secs, "wait_for_chief_secs")
        self.service_timeout = check_service_timeout(service_timeout)
        self.graph = _graph_of(train_op)
        self.train_op = train_op
        self.steps_per_epoch = steps_per_epoch
        self.initializers = [*(() if data is None else data.initializers), *initializers]
        self.session_config = session_config
        self.run_timeout_secs = run_timeout_secs
        self.master = master
        self.is_chief = is_chief
        user_hooks = _hooks_of_role(user_hooks, chief_hooks, is_chief)
        if log_dir is None:
            log_dir = checkpoint_dir_of(user_hooks)
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.wait_for_chief_secs = float(wait_for_chief_secs)
        #: the tf.data service the graph's input is read through, or None
        self.service = data.facts.service if data is not None else _graph_service(self.graph)
        self._build_step_tensors(fetches, batch_size, measure_input, fetch_weights)
        self.measure_input = measure_input
        self._data = data
        # the running means of each Validation given to run, built on first use
        self._val_means: dict[int, tuple[Validation, RunningMeans]] = {}
        auto = input_hooks(self.graph, user_hooks, data, training)
        self._cluster = self._cluster_session(user_hooks) if master else None
        # the read's history entries (input/corrupt_records, a mixture's sources) come
        # from hooks of its own, before the user's (a TensorBoard hook writes them)
        features = [] if data is None else input_entries(data.facts, data.position)
        self.hooks = HookList(auto + features + with_signal_hook(user_hooks, handle_signals))
        #: what a skipped batch is pulled through: a tensor of the data's own batches
        self._skip_tensor = data.batch_size if data is not None and not _is_queue(data) else None
        #: the passes over the data started in the session a run used last
        self._passes = Passes()
        self.loop = LoopState()
        self.loop.is_chief = is_chief
        self.loop.resumes_mid_epoch = self._skip_tensor is not None and steps_per_epoch is None

    def _build_step_tensors(
        self,
        fetches: Mapping[str, Any],
        batch_size: Any,
        measure: bool,
        fetch_weights: Mapping[str, Any],
    ) -> None:
        """Build the training means, the batch size tensor and the input wait, if measured.

        ``fetch_weights`` weigh the fetches that are weighted means by their batch's
        weight instead of its size.

        The loop's own variables are each worker's: on the device of a plain op here,
        never on a ps task an enclosing ``replica_device_setter`` would send them to.
        """
        self._device = worker_device(self.graph)
        with self.graph.as_default(), loop_device(self.graph, self._device):
            self._means = RunningMeans(
                fetches, batch_size, name="tfr_hooks_train_means", weights=fetch_weights
            )
            self._batch_size = _as_tensor_or_none(batch_size)
            # what the step waits for its batch, from inside its session.run
            self._input_wait = None
            if measure:
                self._input_wait = input_wait(
                    [*_as_list(self.train_op), *self._means.update.values(), self._batch_size]
                )
            # the step's scalars as one fetched tensor (a hook's fetches and feeds join it)
            self._packed = PackedFetches(
                {
                    "logs": self._means.update,
                    "batch_size": self._batch_size,
                    "input_wait": self._input_wait,
                },
                _as_list(self.train_op),
            )

    def _cluster_session(self, user_hooks: list[Any]) -> ClusterSession:
        """What creates each run's session on ``master`` (the chief restores or initializes).

        A chief with a ``log_dir`` gets a saver in the graph if no hook brings one.
        """
        with self.graph.as_default():
            ensure_saver(user_hooks, needed=bool(self.is_chief and self.log_dir))
        warn_local_variables_on_ps(self.graph)
        return ClusterSession(
            self.graph,
            self.master,
            bool(self.is_chief),
            self.session_config,
            self.log_dir if self.is_chief else None,
            self.wait_for_chief_secs,
        )

    def run(
        self,
        epochs: int = 1,
        *,
        validation_data: Validation | None = None,
        validation_steps: int | None = None,
        validation_freq: int = 1,
        initial_epoch: int = 0,
        session: Any = None,
    ) -> dict[str, list[Any]]:
        """Train for ``epochs`` epochs and return the history of epoch means.

        Args:
            epochs: Train until this epoch index (exclusive), like ``model.fit``.
            validation_data: A :class:`~tfr_hooks.Validation`: fetches computed on a
                second pipeline's batches, run to its end (or for ``validation_steps``)
                after training epochs, restarted by its ``initializers`` each time; its
                means appear in the logs as ``val_<name>``.
            validation_steps: Stop each validation pass after this many steps; needed
                when the validation data has no ``initializers`` to restart it.
            validation_freq: Validate after every this many epochs, counted as
                ``model.fit`` counts it (after epochs ``validation_freq - 1``,
                ``2 * validation_freq - 1``, ...).
            initial_epoch: The epoch to start at (when resuming). Without
                ``steps_per_epoch``, a session that has not yet started that many passes
                over the data first starts them (running the initializers), so that a
                seeded shuffle that reshuffles each pass (streamed, packed shards, in
                memory) gives the epoch the order it has in an uninterrupted run.
            session: A ``tf.compat.v1.Session`` on the train op's graph to use (for
                example the ``tf_keras`` backend session); the loop then initializes only
                variables that are not yet initialized and leaves the session open.
                ``None`` creates a session, initializes every variable and closes it.

        Returns:
            A dict from each fetch name (and ``val_<name>``, and anything hooks add to the
            epoch logs) to its list of per-epoch values, like Keras' ``History.history``.

        Raises:
            TypeError: If ``validation_data`` is not a :class:`~tfr_hooks.Validation`.
            ValueError: If ``session`` is on another graph (or given with a ``master``);
                if ``validation_data`` has no ``initializers`` and no
                ``validation_steps`` is given;
                if ``data`` is a queue pipeline (without ``steps_per_epoch``) that cannot
                give ``epochs - initial_epoch`` epochs: more than its ``num_epochs``, or
                more than one when its files do not count their examples.
        """
        check_run_args(epochs, initial_epoch, validation_steps, validation_freq)
        if session is not None and getattr(session, "graph", None) is not self.graph:
            raise ValueError(
                expected("session", "a tf.compat.v1.Session on the train op's graph", session)
            )
        if session is not None and self._cluster is not None:
            raise ValueError(
                expected(
                    "session",
                    f"None when the loop creates its session on master={self.master!r}",
                    session,
                )
            )
        if validation_data is not None and not isinstance(validation_data, Validation):
            raise TypeError(
                expected("validation_data", "a tfr_hooks.Validation or None", validation_data)
            )
        restartable = validation_data is None or bool(validation_data.initializers)
        if not restartable and validation_steps is None:
            raise ValueError(
                "Expected `validation_steps` for `validation_data` without initializers: "
                "a validation pipeline that cannot be restarted can only be run once, so "
                "give the Validation `initializers` (an initializable iterator's "
                "initializer) or run(validation_steps=...). Received: validation_steps=None"
            )
        if self._stream is not None:
            _check_stream_epochs(self._stream, epochs, initial_epoch)
        runner = SessionRunner(self._settings(self._validation_means(validation_data)), session)
        with self.graph.as_default():  # hooks look things up in the default graph
            return run_loop(
                runner,
                self.hooks,
                self.loop,
                epochs=epochs,
                initial_epoch=initial_epoch,
                steps_per_epoch=self.steps_per_epoch,
                validation_freq=validation_freq,
                validation_steps=validation_steps,
                data=RunInput(
                    examples=None if self._data is None else self._data.facts.served_examples(),
                    report=self._input_facts,
                    position=self._position(runner),
                ),
                # the data's random ops go on in a session given again
                passes=self._passes,
            )

    def _position(self, runner: SessionRunner) -> Any:
        """The training data's position, seeking in the runner's session (once made)."""
        position = None if self._data is None else self._data.position
        if position is None or self._stream is not None:
            return None
        return position.in_session(lambda: runner.session)

    def _input_facts(self) -> InputFacts:
        """What the loop knows of its input's files, for the verdict's remedy."""
        if self._data is None:
            return InputFacts()
        return facts_of_read(self._data.facts)

    def _validation_means(
        self, validation: Validation | None
    ) -> tuple[Validation, RunningMeans] | None:
        """The running means of ``validation``'s fetches, built once per Validation."""
        if validation is None:
            return None
        if id(validation) not in self._val_means:
            with self.graph.as_default(), loop_device(self.graph, self._device):
                means = RunningMeans(
                    validation.fetches,
                    validation.batch_size,
                    name="tfr_hooks_val_means",
                    weights=validation.weights,
                )
            # the Validation is kept with its means, so its id is never reused
            self._val_means[id(validation)] = (validation, means)
        return self._val_means[id(validation)]

    def _settings(self, validation: tuple[Validation, RunningMeans] | None) -> RunSettings:
        """What this run's runner needs of the loop, as it is now, with its validation."""
        return RunSettings(
            graph=self.graph,
            train_op=self.train_op,
            hooks=list(self.hooks.hooks),
            means=self._means,
            batch_size=self._batch_size,
            initializers=list(self.initializers),
            validation=None if validation is None else validation[0],
            val_means=None if validation is None else validation[1],
            session_config=self.session_config,
            run_timeout_secs=self.run_timeout_secs,
            service=self.service,
            service_timeout=self.service_timeout,
            epochs_restart=self.steps_per_epoch is None,
            cluster=self._cluster,
            pass_examples=None if self._stream is None else self._stream.facts.examples,
            input_wait=self._input_wait,
            packed=self._packed,
            skip_tensor=self._skip_tensor if self.steps_per_epoch is None else None,
        )


def _is_queue(data: Batches | None) -> bool:
    return data is not None and data.facts.kind is PipelineKind.QUEUE


def _check_stream(data: Batches) -> None:
    """Refuse a queue pipeline that could never end an epoch."""
    if data.facts.num_epochs is None and data.facts.examples is None:
        raise ValueError(
            "Expected `data` from read_batches(pipeline='queue') to end its epochs: with "
            "num_epochs=None the queue never runs out, and its files have no schema.json "
            "to count the examples of a pass. Pass steps_per_epoch=... to SessionLoop, "
            "or num_epochs=... to read_batches (or write the files with tfrecord.write, "
            "whose schema.json counts them). Received: pipeline='queue', num_epochs=None, "
            f"num_examples=None, steps_per_epoch=None, files={data.facts.files[:3]!r}"
        )


def _refuse_endless(data: Batches) -> None:
    """Refuse a ``"dataset"`` pipeline that repeats without end and no epoch length."""
    raise ValueError(
        "Expected `data` from read_batches(pipeline='dataset') to end its epochs: with "
        "num_epochs=None it repeats without end, so no epoch would ever close. Pass "
        "steps_per_epoch=... to SessionLoop, or num_epochs=... to read_batches (one "
        "initialization reads num_epochs passes, and each epoch starts a new one). "
        "Received: pipeline='dataset', num_epochs=None, steps_per_epoch=None"
    )


def _check_stream_epochs(data: Batches, epochs: int, initial_epoch: int) -> None:
    """Refuse ``run`` epochs (checked ints) that a queue stream cannot give, one pass each."""
    wanted = epochs - initial_epoch
    if data.facts.examples is None and wanted > 1:
        raise ValueError(
            f"Expected `epochs` to be at most initial_epoch + 1 = {initial_epoch + 1} for "
            "data from read_batches(pipeline='queue') whose files have no schema.json: "
            f"the loop cannot tell where one of its num_epochs={data.facts.num_epochs} passes "
            "ends, so the whole stream is one epoch. Pass steps_per_epoch=... to "
            "SessionLoop (examples per pass // batch size), or write the files with "
            f"tfrecord.write (its schema.json counts the examples). Received: epochs={epochs}"
        )
    passes = data.facts.num_epochs
    if passes is not None and wanted > passes:
        raise ValueError(
            f"Expected `epochs` to be at most initial_epoch + num_epochs = "
            f"{initial_epoch + passes}: data from read_batches(pipeline='queue', "
            f"num_epochs={passes}) gives {passes} passes, one per epoch, "
            f"and a queue cannot be restarted. Pass num_epochs={wanted} (or None, endless) "
            f"to read_batches, or run fewer epochs. Received: epochs={epochs}, "
            f"initial_epoch={initial_epoch}"
        )


def _with_defaults(
    train_op: Any,
    training: TrainingGraph | None,
    fetches: Mapping[str, Any] | None,
    batch_size: Any,
    data: Batches | None,
) -> tuple[Any, Mapping[str, Any], Any]:
    """The train op, the (checked) fetches and the batch size the loop runs with.

    A :class:`~tfr_hooks.KerasTrainingGraph` gives its train op, and its fetches and batch
    size where none are given; ``data`` its batch size where still none is.
    """
    if training is not None:
        train_op = training.train_op
        fetches = training.fetches if fetches is None else fetches
        batch_size = training.batch_size if batch_size is None else batch_size
    if data is not None:
        batch_size = data.batch_size if batch_size is None else batch_size
    fetches = {} if fetches is None else fetches
    check_fetches(fetches, "fetches")
    return train_op, fetches, batch_size


def _fetch_weights(training: TrainingGraph | None, fetches: Mapping[str, Any]) -> dict[str, Any]:
    """The weights of a ``KerasTrainingGraph``'s weighted means the loop still fetches."""
    if training is None:
        return {}
    return {
        name: weight
        for name, weight in getattr(training, "fetch_weights", {}).items()
        if fetches.get(name) is training.fetches.get(name)
    }


def _stream_of(data: Batches | None, steps_per_epoch: int | None) -> Batches | None:
    """The queue pipeline the loop splits into epochs itself, or ``None``.

    Raises:
        ValueError: If ``data`` could never end an epoch and no ``steps_per_epoch`` is
            given (a queue stream that cannot count its passes, a dataset that repeats
            without end).
    """
    stream = data if _is_queue(data) and steps_per_epoch is None else None
    if stream is not None:
        _check_stream(stream)
    elif data is not None and data.facts.num_epochs is None and steps_per_epoch is None:
        _refuse_endless(data)
    return stream


def _hooks_of_role(
    user_hooks: list[Any], chief_hooks: list[Any], is_chief: bool | None
) -> list[Any]:
    """The hooks of this worker: the writers dropped off the chief, the chief's added.

    ``is_chief=None`` (a single process, no master) is its own chief and drops nothing.
    """
    if is_chief is not None:  # told who the chief is: drop the writers elsewhere
        user_hooks = drop_writers(user_hooks, is_chief)
        if is_chief:
            user_hooks += chief_hooks
    elif chief_hooks:
        user_hooks += chief_hooks
    return user_hooks


def _check_cluster(master: object, is_chief: object) -> tuple[str, bool | None]:
    """``master`` as a string and ``is_chief`` resolved (from ``TF_CONFIG`` if ``None``)."""
    if isinstance(master, bytes):  # server.target is bytes
        master = master.decode()
    if not isinstance(master, str):
        raise TypeError(
            expected("master", "a session target string such as server.target or ''", master)
        )
    if is_chief is not None and not isinstance(is_chief, bool):
        raise TypeError(expected("is_chief", "a bool or None", is_chief))
    if is_chief is False and not master:
        raise ValueError(
            expected(
                "is_chief",
                "True or None without a `master` (a non-chief waits for the chief on the "
                "cluster of its master)",
                is_chief,
            )
        )
    if is_chief is None and master:
        is_chief = current_task().is_chief
    return master, is_chief


def _graph_of(train_op: Any) -> Any:
    items = train_op if isinstance(train_op, (list, tuple)) else [train_op]
    for item in items:
        graph = getattr(item, "graph", None)
        if graph is not None:
            return graph
    raise TypeError(
        expected(
            "train_op",
            "a graph-mode tf.Operation or tf.Tensor (or a list of them), built under a "
            "tf.Graph or with eager execution disabled",
            train_op,
        )
    )


def _as_list(train_op: Any) -> list[Any]:
    return list(train_op) if isinstance(train_op, (list, tuple)) else [train_op]


def _as_tensor_or_none(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, int):
        return tf.constant(value, tf.int64)
    return value


def _graph_service(graph: Any) -> str | None:
    """The address of the first tf.data service a dataset of ``graph`` reads, or ``None``.

    A ``DataServiceDataset`` op (``distribute``, ``from_dataset_id``) takes its address
    as a constant input named ``address`` (checked on TensorFlow 2.21).
    """
    for op in graph.get_operations():
        if not op.type.startswith("DataServiceDataset"):
            continue
        for tensor in op.inputs:
            if tensor.op.type == "Const" and tensor.op.name.rpartition("/")[2] == "address":
                value = tf.get_static_value(tensor)  # a 0-d array of dtype object
                if value is not None and isinstance(value.item(), bytes):
                    return check_service_address(value.item().decode())
    return None
