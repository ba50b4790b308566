"""FunctionLoop: the engine on TensorFlow 2, driven by a compiled multi-step ``tf.function``.

The batches never leave the graph: the dataset's iterator is read inside the compiled
function, which runs up to ``steps_per_execution`` steps in an in-graph ``tf.while_loop``
and looks one batch ahead with ``iterator.get_next_as_optional()``. So the execution that
consumes the last (possibly partial) batch of an epoch already knows the data ran out: the
epoch ends there, with no empty extra call and no ``OutOfRangeError`` raised or logged.

A step is either a compiled Keras 3 model's public ``train_step``/``test_step`` (the logs
are the model's metric results, as ``model.fit`` shows them) or your own
``step_fn(batch) -> {name: scalar tensor}`` (the loop keeps batch-size-weighted means of
the values over the epoch). Under a ``tf.distribute`` strategy the dataset is distributed
by the strategy, each step runs in ``strategy.run`` and the values are reduced.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.checks import (
    check_bool,
    check_optional_positive_int,
    check_positive_int,
    expected,
)
from tfr_hooks.data_service import (
    ServedReads,
    Stalled,
    check_service_timeout,
    served_examples,
)
from tfr_hooks.engine import Passes, StepResult, check_run_args, run_loop
from tfr_hooks.hooks import HookList, LoopState, capabilities_of, check_hooks
from tfr_hooks.input_report import InputFacts, op_determinism_enabled
from tfr_hooks.signals import with_signal_hook
from tfr_hooks.task import is_multi_worker
from tfr_hooks.tf2 import distribute
from tfr_hooks.tfrecord.sharding import distributed_steps

__all__ = ["FunctionLoop"]

logger = logging.getLogger(__name__)

_v1 = tf.compat.v1


class FunctionLoop:
    """Train a Keras 3 model (or your own step) on a ``tf.data.Dataset``, driving hooks.

    The TF2 counterpart of :class:`~tfr_hooks.SessionLoop`: the same hooks
    (:class:`~tfr_hooks.Hook` subclasses, :class:`~tfr_hooks.KerasCallbacks` with
    ``keras.callbacks``), the same epochs, validation, stop requests and history. Each
    call of the compiled function runs ``steps_per_execution`` steps (fewer at the end of
    the data) and hooks see each call once, as Keras' callbacks do with
    ``steps_per_execution``: ``before_run`` before it (``self.loop.epoch_steps`` is the
    index of its first batch in the epoch) and ``after_run`` after it
    (``self.loop.batch_logs`` holds the logs of its last step). The arguments the two
    loops share (``data``, ``hooks``, ``steps_per_epoch``, ``handle_signals``,
    ``measure_input``, and
    ``run``'s ``epochs``, ``validation_data``, ``validation_steps``, ``validation_freq``,
    ``initial_epoch``) have the same names, meanings and defaults.

    Hooks get a ``SessionRunContext`` whose ``session`` is ``None`` and ``run_values``
    whose ``results`` are ``None``: there is no session to add fetches or feeds to, and a
    hook that asks for some in ``before_run`` fails with a clear error. Stock TensorFlow
    session hooks (``CheckpointSaverHook``, ``SummarySaverHook``, ...) and hooks with
    ``requires_session = True`` are refused at construction.

    Args:
        data: The training ``tf.data.Dataset`` of batches (for a Keras model,
            ``(x, y)`` or ``(x, y, sample_weight)``); one pass is one epoch unless
            ``steps_per_epoch`` is given.
        model: A compiled Keras 3 ``keras.Model``; its ``train_step`` trains and its
            ``test_step`` validates. Create and compile it under ``strategy.scope()``
            when you give a strategy.
        step_fn: Instead of ``model``: ``step_fn(batch) -> {name: scalar tensor}``, one
            training step (traced by ``tf.function``, run in ``strategy.run``).
        validation_step_fn: With ``step_fn``: the same for a validation batch (needed for
            ``run(validation_data=...)``).
        hooks: ``tfr_hooks.Hook`` instances (or session-free ``SessionRunHook`` instances),
            called in this order.
        steps_per_execution: Steps run by one call of the compiled function.
        steps_per_epoch: Steps per epoch, or ``None`` to let the data decide (an epoch
            then ends at the dataset's last batch and the data restarts for the next).
        strategy: A ``tf.distribute.Strategy``; ``None`` uses the current one (the
            default strategy outside any ``strategy.scope()``).
        handle_signals: Add a :class:`~tfr_hooks.StopOnSignal` (unless ``hooks`` has
            one): SIGINT/SIGTERM stop the run gracefully, a second one aborts it
            (SIGTERM is left to a :class:`~tfr_hooks.PreemptionCheckpoint` in ``hooks``).
        measure_input: Measure, per epoch, the share of step time spent waiting for
            input (two ``tf.timestamp`` ops a step; see :mod:`tfr_hooks.input_report`):
            ``loop.input_stats``, the history's ``input/...`` keys and the verdict.
            ``False`` leaves the timestamps out of the step (to measure what they cost).
        service_timeout: For data read through a tf.data service (marked by the
            readers, :func:`~tfr_hooks.data_service.mark_served`): the seconds a call
            may wait for its batches. A dispatcher gone or no worker left ends the run
            within it with a ``ConnectionError`` naming the address; a call that waits
            this long while workers are alive (a killed worker's part of the epoch,
            which TensorFlow never ends) ends the epoch with a warning.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument has a wrong value, or a hook needs a session.

    Examples:
        >>> model.compile(optimizer="adam", loss="mse")  # doctest: +SKIP
        >>> loop = FunctionLoop(train_ds, model=model, hooks=[KerasCallbacks(cbs, model)],
        ...                     steps_per_execution=8)  # doctest: +SKIP
        >>> history = loop.run(epochs=10, validation_data=val_ds)  # doctest: +SKIP
        >>> history["loss"], history["val_loss"]  # one value per epoch  # doctest: +SKIP
    """

    def __init__(
        self,
        data: Any,
        *,
        model: Any = None,
        step_fn: Callable[[Any], Mapping[str, Any]] | None = None,
        validation_step_fn: Callable[[Any], Mapping[str, Any]] | None = None,
        hooks: Sequence[Any] | None = None,
        steps_per_execution: int = 1,
        steps_per_epoch: int | None = None,
        strategy: Any = None,
        handle_signals: bool = True,
        measure_input: bool = True,
        service_timeout: float = 60.0,
    ) -> None:
        _check_dataset(data, "data")
        check_service_timeout(service_timeout)
        if (model is None) == (step_fn is None):
            raise ValueError(
                "Expected exactly one of `model` (a compiled Keras 3 model) and `step_fn` "
                f"(a function batch -> dict of scalar tensors). Received: model={model!r}, "
                f"step_fn={step_fn!r}"
            )
        if model is not None:
            _check_model(model)
            if validation_step_fn is not None:
                raise ValueError(
                    expected(
                        "validation_step_fn",
                        "None with `model` (a model validates with its own test_step; "
                        "`validation_step_fn` goes with `step_fn`)",
                        validation_step_fn,
                    )
                )
        for name, fn in (("step_fn", step_fn), ("validation_step_fn", validation_step_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(expected(name, "a function batch -> dict of scalar tensors", fn))
        check_positive_int(steps_per_execution, "steps_per_execution")
        check_optional_positive_int(steps_per_epoch, "steps_per_epoch")
        check_bool(measure_input, "measure_input")
        if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
            raise TypeError(expected("strategy", "a tf.distribute.Strategy or None", strategy))
        user_hooks = check_hooks(hooks)
        for i, hook in enumerate(user_hooks):
            _refuse_session_hook(hook, i)
        user_hooks = with_signal_hook(user_hooks, handle_signals)
        self.data = data
        self.model = model
        self.step_fn = step_fn
        self.validation_step_fn = validation_step_fn
        self.steps_per_execution = steps_per_execution
        self.steps_per_epoch = steps_per_epoch
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        extra = []  # under a multi-worker strategy, name a lost worker
        if is_multi_worker(self.strategy):
            extra.append(distribute.LostWorkerHook(distribute.current_task(self.strategy)))
        self.hooks = HookList([*user_hooks, *extra])
        self.loop = LoopState()
        self.loop.strategy = self.strategy
        # the compiled functions, built once per loop and kept across runs
        self._steps = _CompiledSteps(
            self.strategy,
            model=model,
            step_fn=step_fn,
            validation_step_fn=validation_step_fn,
            measure_input=measure_input,
            # served data of known size: after a lost worker, an epoch ends at its size
            bounded=served_examples(data) is not None,
        )
        self.measure_input = measure_input
        self.service_timeout = service_timeout
        #: the passes started over ``data`` (its seeded shuffles' state), across runs
        self._passes = Passes()

    def run(
        self,
        epochs: int = 1,
        *,
        validation_data: Any = None,
        validation_steps: int | None = None,
        validation_freq: int = 1,
        initial_epoch: int = 0,
    ) -> dict[str, list[float]]:
        """Train for ``epochs`` epochs and return the history of epoch logs.

        Args:
            epochs: Train until this epoch index (exclusive), like ``model.fit``.
            validation_data: A ``tf.data.Dataset`` of validation batches, run to its end
                (or for ``validation_steps``) after training epochs, from its start each
                time; its logs appear as ``val_<name>``.
            validation_steps: Stop each validation pass after this many steps.
            validation_freq: Validate after every this many epochs of this run.
            initial_epoch: The epoch to start at (when resuming); a hook such as
                ``KerasCallbacks`` with ``BackupAndRestore`` may move it further. When
                the data decides the epoch's length, the loop first starts (and leaves)
                a pass over ``data`` for every earlier epoch it has not run, so that a
                seeded shuffle gives the epoch the order it has in an uninterrupted run;
                resumed mid-epoch (a :class:`~tfr_hooks.PreemptionCheckpoint`), it then
                skips the batches already trained on and runs the epoch to the data's
                end.

        Returns:
            A dict from each log name (and ``val_<name>``, and anything hooks add to the
            epoch logs) to its list of per-epoch values, like Keras' ``History.history``.

        Raises:
            TypeError: If ``validation_data`` is not a dataset.
            ValueError: If an argument has a wrong value.
        """
        check_run_args(epochs, initial_epoch, validation_steps, validation_freq)
        if validation_data is not None:
            _check_dataset(validation_data, "validation_data")
            if self.model is None and self.validation_step_fn is None:
                raise ValueError(
                    "Expected `validation_step_fn` for `validation_data`: validation with "
                    "`step_fn` needs `validation_step_fn` (a function batch -> dict of "
                    "scalar tensors, without training). Received: validation_step_fn=None"
                )
        if self.model is not None:
            self.model.stop_training = False
        runner = _FunctionRunner(
            self._steps,
            hooks=self.hooks.hooks,
            dataset=self.data,
            validation_data=validation_data,
            service_timeout=self.service_timeout,
        )
        # a known length: Keras' params["steps"] get it up front; under a multi-worker
        # strategy, the steps a pass really makes (None when only running it tells)
        workers = 1
        if is_multi_worker(self.strategy):
            workers = distribute.current_task(self.strategy).num_workers
        known = distributed_steps(self.data, workers)
        return run_loop(
            runner,
            self.hooks,
            self.loop,
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=self.steps_per_epoch,
            steps_per_execution=self.steps_per_execution,
            known_steps=known if known else None,
            validation_freq=validation_freq,
            validation_steps=validation_steps,
            # a dataset says nothing of its files: the remedy names what to try
            input_facts=InputFacts(steps_per_execution=self.steps_per_execution),
            passes=self._passes,
        )


class _CompiledSteps:
    """A loop's compiled training and validation functions, and its model's state.

    Made once by :class:`FunctionLoop` and handed to each run's runner, so that the
    functions are traced once per loop, not once per run.
    """

    def __init__(
        self,
        strategy: Any,
        *,
        model: Any = None,
        step_fn: Callable[[Any], Mapping[str, Any]] | None = None,
        validation_step_fn: Callable[[Any], Mapping[str, Any]] | None = None,
        measure_input: bool = True,
        bounded: bool = False,
    ) -> None:
        self.strategy = strategy
        self.model = model
        #: whether the training steps time their wait for input
        self.measure_input = measure_input
        #: whether the training steps stop fetching at a number of examples (see _execute)
        self.bounded = bounded
        self.step_fn = step_fn
        self.validation_step_fn = validation_step_fn
        self.executors: dict[bool, _Executor] = {}
        #: whether the model's state was created (or needs no creating) already
        self.built = False

    def executor(self, training: bool) -> _Executor:
        """The compiled function for training steps, or for validation steps."""
        if training not in self.executors:
            fn: Any
            if self.model is not None:
                fn = self.model.train_step if training else self.model.test_step
            else:
                fn = self.step_fn if training else self.validation_step_fn
            # validation steps are not measured: only training input is reported
            self.executors[training] = _Executor(
                fn,
                self.strategy,
                self.model,
                measure_input=training and self.measure_input,
                bounded=training and self.bounded,
            )
        return self.executors[training]

    def build_model(self, batch: Any) -> None:
        """Create the model's metric, loss and optimizer variables before tracing.

        Under a distribution strategy, variables cannot be created inside a replica
        function; ``model.fit`` builds them symbolically first. The same with public
        calls: one forward pass, loss and metrics on a real batch, then reset metrics.
        """
        import keras

        model = self.model
        with self.strategy.scope():
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
            y_pred = model(x, training=False)
            model.compute_loss(x, y, y_pred, sample_weight, training=False)
            model.compute_metrics(x, y, y_pred, sample_weight)
            if model.optimizer is not None and not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
        model.reset_metrics()


class _Executor:
    """A compiled function that runs up to ``limit`` steps on an iterator, in the graph.

    ``execute(iterator, pending, limit, remaining) -> (steps, examples, logs, pending,
    more, wait)``: ``pending`` is the ``Optional`` batch fetched ahead by the previous
    call (or by ``first``); the call runs it, then up to ``limit - 1`` further batches,
    and returns the next one ahead with ``more`` (whether it holds a batch). With
    ``bounded``, no batch is fetched once the call's steps have taken ``remaining``
    examples (``more`` is then ``False``): an epoch of known size through a tf.data
    service that lost a worker ends at its size, as TensorFlow never ends it (the
    dispatcher gives the lost worker a task in every new job). ``wait`` is the seconds
    the steps waited for their batches: after each step, the time until the batch
    fetched ahead arrived (the fetch may overlap the step; only what is left after it
    counts), measured with ``tf.timestamp`` inside the function (with ``measure_input``;
    without it no timestamp is taken and ``wait`` is 0). Under op determinism, which
    refuses timestamps, it is not measured either (``measures_wait`` is ``False``).
    ``first(iterator) -> (pending, more)`` fetches the first batch ahead, and
    ``skip(iterator, pending, count)`` passes over batches without a step (see
    :func:`_skip`).

    With a Keras model, ``logs`` are the step's returned metric results (means over the
    replicas); with a user step, ``logs`` are ``(sums, weight)``: batch-size-weighted
    sums of the values over the call's steps, to be added to the epoch's totals.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        strategy: Any,
        model: Any = None,
        *,
        measure_input: bool = True,
        bounded: bool = False,
    ) -> None:
        keras_step = model is not None  # a Keras model's train_step/test_step
        self.keras_step = keras_step
        self.measure_input = measure_input
        # TensorFlow refuses tf.timestamp under enable_op_determinism(): no wait then
        measures_wait = measure_input and not op_determinism_enabled()
        self.measures_wait = measures_wait
        if measure_input and not measures_wait:
            logger.info("Op determinism is enabled: the steps' input wait is not measured.")
        # a Keras step runs as model.fit runs it: without autograph, with the model's
        # jit_compile setting (XLA when the model supports it)
        jit = bool(getattr(model, "jit_compile", False)) if keras_step else False
        one_step_fn = tf.function(
            _one_step(fn, strategy, keras_step),
            autograph=not keras_step,
            reduce_retracing=True,
            jit_compile=jit,
        )
        execute = _execute(one_step_fn, strategy, model, measures_wait, bounded)
        self.execute = tf.function(execute, autograph=False, reduce_retracing=True)
        self.first = tf.function(_first, autograph=False)
        self.skip = tf.function(_skip(strategy), autograph=False)


def _one_step(fn: Callable[[Any], Any], strategy: Any, keras_step: bool) -> Callable[[Any], Any]:
    """``one_step(batch) -> (logs, size)``: ``fn`` on a batch in ``strategy.run``.

    ``size`` is the batch's examples (of every replica). With a Keras step, ``logs`` are
    the first replica's results; with a user step, ``(sums, weight)``: the outputs
    weighted by the batch size, summed over the replicas, and that weight.
    """

    def replica_step(batch: Any) -> Any:
        outputs = fn(batch)
        size = _batch_size(batch)
        if keras_step:
            return outputs, size
        outputs = _check_outputs(outputs)
        weight = tf.cast(size, tf.float64)
        # a worker out of data gets an empty batch (mean NaN): it adds nothing
        return {
            k: tf.where(weight > 0, tf.cast(v, tf.float64) * weight, tf.zeros((), tf.float64))
            for k, v in outputs.items()
        }, size

    single = _is_default_strategy(strategy)  # no replicas: no reduction ops per step

    def one_step(batch: Any) -> Any:
        outputs, size = strategy.run(replica_step, args=(batch,))
        if not single:
            size = strategy.reduce(tf.distribute.ReduceOp.SUM, size, axis=None)
        if keras_step:
            # the first replica's results carry the structure through the loop; under a
            # strategy, `execute` reads the global results from the metric variables
            # once per call instead (see distribute.global_metric_results)
            outputs = tf.nest.map_structure(
                lambda v: strategy.experimental_local_results(v)[0], outputs
            )
            return outputs, size
        sums = {
            k: v if single else strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
            for k, v in outputs.items()
        }
        return (sums, tf.cast(size, tf.float64)), size

    return one_step


def _execute(
    one_step_fn: Callable[[Any], Any],
    strategy: Any,
    model: Any,
    measures_wait: bool,
    bounded: bool = False,
) -> Callable[[Any, Any, Any, Any], Any]:
    """``execute(iterator, pending, limit, remaining)`` of :class:`_Executor`."""
    keras_step = model is not None

    def accumulate(previous: Any, new: Any) -> Any:
        if keras_step:
            return new
        (sums, weight), (new_sums, new_weight) = previous, new
        return {k: sums[k] + new_sums[k] for k in sums}, weight + new_weight

    def waited(size: Any, fetch: Any) -> Any:
        """Run ``fetch`` after the step of ``size``; the seconds it waited."""
        if not measures_wait:
            return fetch(), tf.constant(0.0, tf.float64)
        done = _time_after(size)
        fetched = fetch()
        # created after ``done``, the second timestamp runs after it (TensorFlow
        # orders stateful ops without resource inputs as written): never negative
        return fetched, _time_after(fetched.has_value()) - done

    def fetcher(iterator: Any, examples: Any, remaining: Any) -> Any:
        """The look-ahead fetch: none once ``remaining`` examples were taken (bounded)."""
        if not bounded:
            return iterator.get_next_as_optional
        spec = iterator.element_spec
        return lambda: tf.cond(
            examples < remaining,
            iterator.get_next_as_optional,
            lambda: tf.experimental.Optional.empty(spec),
        )

    def execute(iterator: Any, pending: Any, limit: Any, remaining: Any) -> Any:
        logs, size = one_step_fn(pending.get_value())
        examples = tf.cast(size, tf.int64)
        pending, wait = waited(size, fetcher(iterator, examples, remaining))

        def cond(steps: Any, examples: Any, logs: Any, pending: Any, wait: Any) -> Any:
            return tf.logical_and(steps < limit, pending.has_value())

        def body(steps: Any, examples: Any, logs: Any, pending: Any, wait: Any) -> Any:
            new_logs, size = one_step_fn(pending.get_value())
            examples += tf.cast(size, tf.int64)
            pending, new_wait = waited(size, fetcher(iterator, examples, remaining))
            return steps + 1, examples, accumulate(logs, new_logs), pending, wait + new_wait

        steps, examples, logs, pending, wait = tf.while_loop(
            cond, body, (tf.constant(1, tf.int64), examples, logs, pending, wait)
        )
        if keras_step and not _is_default_strategy(strategy):  # global logs
            logs = distribute.global_metric_results(model)
        return steps, examples, logs, pending, pending.has_value(), wait

    return execute


def _first(iterator: Any) -> Any:
    """``first(iterator) -> (pending, more)`` of :class:`_Executor`."""
    pending = iterator.get_next_as_optional()
    return pending, pending.has_value()


def _skip(strategy: Any) -> Callable[[Any, Any, Any], Any]:
    """``skip(iterator, pending, count) -> (skipped, examples, pending, more)``.

    It drops ``pending`` and the batches after it, up to ``count`` in all, in the graph
    (no step runs); under a multi-worker strategy every worker drops the same number, as
    ``get_next_as_optional`` agrees on whether any has data left.
    """
    single = _is_default_strategy(strategy)

    def skip(iterator: Any, pending: Any, count: Any) -> Any:
        def cond(skipped: Any, examples: Any, pending: Any) -> Any:
            return tf.logical_and(skipped < count, pending.has_value())

        def body(skipped: Any, examples: Any, pending: Any) -> Any:
            size = strategy.run(_batch_size, args=(pending.get_value(),))
            if not single:  # the examples of every replica of every worker
                size = strategy.reduce(tf.distribute.ReduceOp.SUM, size, axis=None)
            examples += tf.cast(size, tf.int64)
            return skipped + 1, examples, iterator.get_next_as_optional()

        zero = tf.constant(0, tf.int64)
        skipped, examples, pending = tf.while_loop(cond, body, (zero, zero, pending))
        return skipped, examples, pending, pending.has_value()

    return skip


#: ``remaining`` of a call that may take any number of examples
_UNBOUNDED = 2**62


class _FunctionRunner:
    """The engine's runner for :class:`FunctionLoop`: one compiled call per step."""

    reinitializable = True
    skips_batches = True
    replays_passes = True
    session = None
    coord = None
    run_args = tf.compat.v1.train.SessionRunArgs(None)

    def __init__(
        self,
        steps: _CompiledSteps,
        *,
        hooks: Sequence[Any],
        dataset: Any,
        validation_data: Any = None,
        service_timeout: float = 60.0,
    ) -> None:
        self.steps = steps
        self.hooks = list(hooks)
        self.strategy = steps.strategy
        self.model = steps.model
        self.dataset = dataset
        self.train_data = self.strategy.experimental_distribute_dataset(dataset)
        self.val_data = None
        if validation_data is not None:
            self.val_data = self.strategy.experimental_distribute_dataset(validation_data)
        self.iterator: Any = None
        self.pending: Any = None  # the batch fetched ahead by the last call
        self.more = False  # whether ``pending`` holds a batch
        self.ran_out = False
        self.means = _Means()
        self.val_iterator: Any = None
        self.val_pending: Any = None
        self.val_more = False
        self.val_means = _Means()
        # reads through a tf.data service, cancelled by its watch (see _cancellable)
        self.manager: Any = None
        self.served = ServedReads([dataset, validation_data], service_timeout, self._cancel)
        self.lost_worker = False  # whether an epoch ended on a lost worker of the service

    def _cancel(self) -> None:
        self.manager.start_cancel()

    def _call(self, fn: Callable[..., Any], dataset: Any, *args: Any) -> Any:
        """``fn(*args)``, under the watch of ``dataset``'s service when it is served.

        Raises:
            Stalled: The call waited the bound while workers were alive.
            ConnectionError: The service's dispatcher is gone or no worker is left.
        """
        watch = self.served.watch_of(dataset)
        if watch is None:
            return fn(*args)
        if self.manager is None or self.manager.is_cancelled:
            self.manager = _cancellation_manager()
        # a first call traces and compiles: only a gone dispatcher or worker trips it
        traced = getattr(fn, "experimental_get_tracing_count", lambda: 1)() > 0
        with watch.reading(stall=traced):
            try:
                return _cancellable(self.manager, fn, *args)
            except tf.errors.CancelledError as error:
                self.served.raise_tripped(watch, error)
                raise

    def start(self) -> None:
        steps = self.steps
        distributed = not _is_default_strategy(self.strategy)
        # a hook that saves or restores the model's state needs its variables up front
        wanted = any(capabilities_of(h).needs_model_state for h in self.hooks)
        if self.model is not None and not steps.built and (distributed or wanted):
            # like model.fit under a strategy: build the model's state from one batch
            steps.build_model(next(iter(self.dataset)))
        steps.built = True

    def start_epoch(self, restart_data: bool) -> None:
        self.means = _Means()
        if self.model is not None:
            self.model.reset_metrics()
        if restart_data or self.iterator is None:
            self.iterator = iter(self.train_data)
            first = self.steps.executor(True).first
            try:
                self.pending, more = self._call(first, self.dataset, self.iterator)
            except Stalled:
                self.iterator, more = None, False
            self.more = bool(more)
        self.ran_out = not self.more
        self.served.start_epoch()

    def start_pass(self) -> None:
        """Start a pass over the training data and leave it, without a step.

        A seeded shuffle (``shuffle_buffer`` with ``seed``, the in-memory permutations)
        draws a new order for every pass started over the same dataset: epoch E of a run
        gets the order of the (E+1)-th pass. A run resumed at epoch E in a new process
        would give it the first pass's order; the engine starts E passes first, each an
        iterator that reads one batch (which is when a streamed pipeline's shuffle draws
        its seed). It costs the pass's start (a shuffle buffer's fill, one batch), not an
        epoch of input.
        """
        # under the service's watch: a read of a service without workers never ends; a
        # stalled one is left like the pass (the epoch's own reads are watched again)
        with contextlib.suppress(Stalled):
            self._call(self.steps.executor(True).first, self.dataset, iter(self.train_data))

    def skip_batches(self, count: int) -> tuple[int, int]:
        """Pass over the next ``count`` training batches without a step.

        A run resumed mid-epoch starts the epoch's data again and skips the batches the
        interrupted run trained on: the same ones, when the data's order is the same
        (no shuffling, or a seeded one). It costs the input work of those batches
        (reading and parsing them), not their steps.

        Returns:
            The batches skipped (fewer than ``count`` if the data ran out) and their
            examples (of all replicas).
        """
        skipped, examples, self.pending, more = self._call(
            self.steps.executor(True).skip,
            self.dataset,
            self.iterator,
            self.pending,
            tf.constant(count, tf.int64),
        )
        self.more = bool(more)
        self.ran_out = not self.more
        return int(skipped), int(examples)

    def run_step(self, hook_args: Sequence[Any], limit: int) -> StepResult:
        for hook, args in zip(self.hooks, hook_args, strict=True):
            _check_run_args(hook, args)
        return self._execute(self.steps.executor(True), self.iterator, limit, self.dataset)

    def start_validation(self) -> bool:
        if self.val_data is None:
            return False
        if self.model is not None:
            self.model.reset_metrics()
        self.val_means = _Means()
        self.val_iterator = iter(self.val_data)
        first, data = self.steps.executor(False).first, self.served.validation
        try:
            self.val_pending, more = self._call(first, data, self.val_iterator)
        except Stalled:
            more = False
        self.val_more = bool(more)
        self.ran_out = not self.val_more
        return True

    def run_validation_step(self, limit: int) -> StepResult:
        # the validation pass swaps its own look-ahead and means in for the call
        executor = self.steps.executor(False)
        train = self.pending, self.more, self.means
        self.pending, self.more, self.means = self.val_pending, self.val_more, self.val_means
        try:
            result = self._execute(executor, self.val_iterator, limit, self.served.validation)
        finally:
            self.val_pending, self.val_more = self.pending, self.more
            self.pending, self.more, self.means = train
        self.ran_out = not self.val_more  # start_epoch looks at the training data again
        return result

    def _execute(self, executor: _Executor, iterator: Any, limit: int, dataset: Any) -> StepResult:
        try:
            steps, examples, logs, self.pending, more, wait = self._call(
                executor.execute,
                dataset,
                iterator,
                self.pending,
                tf.constant(limit, tf.int64),
                tf.constant(self._remaining(dataset), tf.int64),
            )
        except Stalled:
            # the epoch (or validation pass) ends here; a new iterator starts the next
            self.served.end_stalled(dataset)
            if dataset is self.dataset:
                self.iterator = None
                self.lost_worker = True
            self.more, self.ran_out = False, True
            return StepResult(0, 0, self._last_values(), exhausted=True)
        self.served.add(dataset, int(examples))
        self.more = bool(more)
        self.ran_out = not self.more
        # a model's metric results, in the order fit shows them; or a user step's means
        keras = self.model is not None
        values = dict(sorted(logs.items())) if keras else self.means.add(*logs)
        result = StepResult(int(steps), int(examples), values, exhausted=not self.more)
        result.input_wait = float(wait) if executor.measures_wait else None
        return result

    def _remaining(self, dataset: Any) -> int:
        """The examples a call may still take from ``dataset`` (see :func:`_execute`).

        After a lost worker, TensorFlow 2.21's dispatcher gives every new job a task on
        it, whose end never comes: a training epoch of known size then ends once all its
        examples are read, instead of waiting ``service_timeout`` for its end.
        """
        expected = served_examples(dataset) if dataset is self.dataset else None
        if not self.lost_worker or expected is None:
            return _UNBOUNDED
        return max(expected - self.served.examples, 0)

    def _last_values(self) -> dict[str, Any]:
        if self.model is not None:
            return dict(sorted(self.model.get_metrics_result().items()))
        return self.means.add({}, 0.0)

    def finish(self) -> None:
        model = self.model
        if model is not None and getattr(model, "optimizer", None) is not None:
            # as model.fit does at the end (EMA weights, for example)
            model.optimizer.finalize_variable_values(model.trainable_weights)

    def close(self) -> None:
        self.iterator = self.pending = None
        self.val_iterator = self.val_pending = None
        self.served.close()


def _cancellation_manager() -> Any:
    """A new ``CancellationManager`` (TensorFlow's private API, checked on TF 2.21)."""
    from tensorflow.python.eager.cancellation import CancellationManager

    return CancellationManager()


def _cancellable(manager: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a ``tf.function``), cancelled by ``manager.start_cancel()``.

    A read through a tf.data service that lost its workers or dispatcher waits forever
    on TensorFlow 2.21, and no option bounds it; a function called inside a
    ``CancellationManagerContext`` registers its ops with the manager, whose
    ``start_cancel`` (from the service's watch thread) ends them with ``CancelledError``.
    Private API (``tensorflow.python.eager.cancellation``), checked on TensorFlow 2.21;
    ``CancellationManager.get_cancelable_function`` does the same for one concrete
    function.
    """
    from tensorflow.python.eager.cancellation import CancellationManagerContext

    with CancellationManagerContext(manager):
        return fn(*args)


class _Means:
    """Batch-size-weighted means over an epoch of a user step's values."""

    def __init__(self) -> None:
        self.totals: dict[str, Any] = {}
        self.weight = 0.0

    def add(self, sums: Mapping[str, Any], weight: Any) -> dict[str, Any]:
        """Add a call's weighted sums and weight; return the means so far."""
        for key, value in sums.items():
            self.totals[key] = self.totals.get(key, 0.0) + np.float64(value)
        self.weight += float(weight)
        if not self.weight:
            return {}
        return {key: total / self.weight for key, total in self.totals.items()}


def _is_default_strategy(strategy: Any) -> bool:
    """Whether ``strategy`` is TensorFlow's default (no distribution) strategy."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


def _check_dataset(dataset: object, name: str) -> None:
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"Expected `{name}` to be a tf.data.Dataset of batches (for example "
            f"tfr_hooks.tfrecord.dataset(...)). Received: {name}={dataset!r}"
        )


def _check_model(model: object) -> None:
    import keras

    if not isinstance(model, keras.Model):
        hint = ""
        if type(model).__module__.startswith("tf_keras"):
            hint = (
                " (a tf_keras model: train it in graph mode with SessionLoop, or build "
                "it with Keras 3, `import keras`)"
            )
        raise TypeError(
            f"Expected `model` to be a compiled Keras 3 keras.Model{hint}. "
            f"Received: model={model!r}"
        )
    if not getattr(model, "compiled", False):
        raise ValueError(
            "Expected `model` to be compiled (model.compile(optimizer=..., loss=...)) so "
            f"that its train_step can run. Received: model={model!r}, not compiled"
        )


def _refuse_session_hook(hook: Any, index: int) -> None:
    """Raise a clear ``ValueError`` for a hook that needs a ``tf.compat.v1.Session``."""
    name = type(hook).__name__
    if capabilities_of(hook).requires_session:
        raise ValueError(
            f"Expected `hooks[{index}]` to be a hook that needs no session: "
            f"{name} needs a tf.compat.v1.Session (it fetches tensors or runs ops in "
            "session.run), and FunctionLoop runs a tf.function without one. Use "
            "SessionLoop for graph-mode training, or a Keras callback (through "
            "tfr_hooks.KerasCallbacks) or a tfr_hooks.Hook that reads self.loop instead. "
            f"Received: hooks[{index}]={hook!r}"
        )


def _check_run_args(hook: Any, args: Any) -> None:
    if args is None:
        return
    fetches = getattr(args, "fetches", None)
    feeds = getattr(args, "feed_dict", None)
    if fetches is not None or feeds:
        name = f"{type(hook).__name__}.before_run"
        raise ValueError(
            f"Expected `{name}` to ask for no fetches or feeds: {name} asked for fetches "
            "or feeds, which need a tf.compat.v1.Session, and FunctionLoop runs a "
            "tf.function without one (read the step's values from self.loop.batch_logs "
            f"in after_run, or use SessionLoop). Received: {name}=SessionRunArgs("
            f"fetches={fetches!r}, feed_dict={feeds!r})"
        )


def _time_after(tensor: Any) -> Any:
    """``tf.timestamp()`` (seconds, float64) once ``tensor`` is computed."""
    with tf.control_dependencies([tensor]):
        return tf.timestamp()


def _batch_size(batch: Any) -> Any:
    """The number of examples in a batch: the first dimension of its first tensor."""
    for item in tf.nest.flatten(batch):
        if item is not None:
            return tf.shape(item, out_type=tf.int64)[0]
    return tf.constant(1, tf.int64)


def _check_outputs(outputs: Any) -> dict[str, Any]:
    if not isinstance(outputs, Mapping):
        raise TypeError(
            "Expected `step_fn` to return a dict from names to scalar tensors. "
            f"Received: outputs={outputs!r}"
        )
    result = {}
    for key, value in outputs.items():
        value = tf.convert_to_tensor(value)
        if value.shape.rank not in (0, None):
            raise ValueError(
                "Expected `step_fn` to return scalar tensors. "
                f"Received: outputs[{key!r}] of shape {value.shape}"
            )
        result[str(key)] = value
    return result
