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

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks import distribute
from tfr_hooks.engine import StepResult, check_positive, check_steps, run_loop
from tfr_hooks.hooks import Hook, HookList, LoopState, check_hooks
from tfr_hooks.signals import with_signal_hook

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
    (``self.loop.batch_logs`` holds the logs of its last step).

    Hooks get a ``SessionRunContext`` whose ``session`` is ``None`` and ``run_values``
    whose ``results`` are ``None``: there is no session to add fetches or feeds to, and a
    hook that asks for some in ``before_run`` fails with a clear error. Stock TensorFlow
    session hooks (``CheckpointSaverHook``, ``SummarySaverHook``, ...) and hooks with
    ``requires_session = True`` are refused at construction.

    Args:
        dataset: The training ``tf.data.Dataset`` of batches (for a Keras model,
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
            one): SIGINT/SIGTERM stop the run gracefully, a second one aborts it.

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
        dataset: Any,
        *,
        model: Any = None,
        step_fn: Callable[[Any], Mapping[str, Any]] | None = None,
        validation_step_fn: Callable[[Any], Mapping[str, Any]] | None = None,
        hooks: Sequence[Any] | None = None,
        steps_per_execution: int = 1,
        steps_per_epoch: int | None = None,
        strategy: Any = None,
        handle_signals: bool = True,
    ) -> None:
        _check_dataset(dataset, "dataset")
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
                    "`validation_step_fn` goes with `step_fn`; a model validates with its own "
                    f"test_step. Received: validation_step_fn={validation_step_fn!r}"
                )
        for name, fn in (("step_fn", step_fn), ("validation_step_fn", validation_step_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(
                    f"Expected `{name}` to be a function batch -> dict of scalar tensors. "
                    f"Received: {name}={fn!r}"
                )
        check_positive(steps_per_execution, "steps_per_execution")
        check_steps(steps_per_epoch, "steps_per_epoch")
        if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
            raise TypeError(
                "Expected `strategy` to be a tf.distribute.Strategy or None. "
                f"Received: strategy={strategy!r}"
            )
        user_hooks = check_hooks(hooks)
        for i, hook in enumerate(user_hooks):
            _refuse_session_hook(hook, i)
        user_hooks = with_signal_hook(user_hooks, handle_signals)
        self.dataset = dataset
        self.model = model
        self.step_fn = step_fn
        self.validation_step_fn = validation_step_fn
        self.steps_per_execution = steps_per_execution
        self.steps_per_epoch = steps_per_epoch
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        extra = []  # issue 13: under a multi-worker strategy, name a lost worker
        if distribute.is_multi_worker(self.strategy):
            extra.append(distribute.LostWorkerHook(distribute.current_task(self.strategy)))
        self.hooks = HookList([_LoopSetup(self), *user_hooks, *extra])
        self.loop = LoopState()
        self.loop.steps_per_execution = steps_per_execution
        self._executors: dict[bool, _Executor] = {}
        self._built = False

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
                ``KerasCallbacks`` with ``BackupAndRestore`` may move it further.

        Returns:
            A dict from each log name (and ``val_<name>``, and anything hooks add to the
            epoch logs) to its list of per-epoch values, like Keras' ``History.history``.

        Raises:
            TypeError: If ``validation_data`` is not a dataset.
            ValueError: If an argument has a wrong value.
        """
        if validation_data is not None:
            _check_dataset(validation_data, "validation_data")
            if self.model is None and self.validation_step_fn is None:
                raise ValueError(
                    "Validation with `step_fn` needs `validation_step_fn` (a function "
                    "batch -> dict of scalar tensors, without training). Received: "
                    "validation_step_fn=None"
                )
        check_steps(validation_steps, "validation_steps")
        check_positive(validation_freq, "validation_freq")
        if self.model is not None:
            self.model.stop_training = False
        runner = _FunctionRunner(self, validation_data, validation_steps)
        return run_loop(
            runner,
            self.hooks,
            self.loop,
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=self.steps_per_epoch,
            validation_freq=validation_freq,
        )

    # -- compiled functions, built once per loop ---------------------------------------

    def _executor(self, training: bool) -> _Executor:
        if training not in self._executors:
            fn: Any
            if self.model is not None:
                fn = self.model.train_step if training else self.model.test_step
            else:
                fn = self.step_fn if training else self.validation_step_fn
            self._executors[training] = _Executor(fn, self, keras_step=self.model is not None)
        return self._executors[training]

    def _build_model(self, batch: Any) -> None:
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

    ``execute(iterator, pending, limit) -> (steps, examples, logs, pending, more)``:
    ``pending`` is the ``Optional`` batch fetched ahead by the previous call (or by
    ``first``); the call runs it, then up to ``limit - 1`` further batches, and returns
    the next one ahead with ``more`` (whether it holds a batch).

    With a Keras model, ``logs`` are the step's returned metric results (means over the
    replicas); with a user step, ``logs`` are ``(sums, weight)``: batch-size-weighted
    sums of the values over the call's steps, to be added to the epoch's totals.
    """

    def __init__(self, fn: Callable[[Any], Any], owner: FunctionLoop, *, keras_step: bool):
        strategy = owner.strategy
        self.keras_step = keras_step

        def replica_step(batch: Any) -> Any:
            outputs = fn(batch)
            size = _batch_size(batch)
            if keras_step:
                return outputs, size
            outputs = _check_outputs(outputs)
            weight = tf.cast(size, tf.float64)
            # issue 13: a worker out of data gets an empty batch (mean NaN): it adds nothing
            return {
                k: tf.where(weight > 0, tf.cast(v, tf.float64) * weight, tf.zeros((), tf.float64))
                for k, v in outputs.items()
            }, size

        def one_step(batch: Any) -> Any:
            outputs, size = strategy.run(replica_step, args=(batch,))
            size = strategy.reduce(tf.distribute.ReduceOp.SUM, size, axis=None)
            if keras_step:  # metric results: the mean over replicas, as model.fit does
                outputs = tf.nest.map_structure(
                    lambda v: tf.reduce_mean(tf.stack(strategy.experimental_local_results(v)), 0),
                    outputs,
                )
                return outputs, size
            sums = {
                k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in outputs.items()
            }
            return (sums, tf.cast(size, tf.float64)), size

        # a Keras step runs as model.fit runs it: without autograph, with the model's
        # jit_compile setting (XLA when the model supports it)
        jit = bool(getattr(owner.model, "jit_compile", False)) if keras_step else False
        one_step_fn = tf.function(
            one_step, autograph=not keras_step, reduce_retracing=True, jit_compile=jit
        )

        def accumulate(previous: Any, new: Any) -> Any:
            if keras_step:
                return new
            (sums, weight), (new_sums, new_weight) = previous, new
            return {k: sums[k] + new_sums[k] for k in sums}, weight + new_weight

        def execute(iterator: Any, pending: Any, limit: Any) -> Any:
            logs, size = one_step_fn(pending.get_value())
            examples = tf.cast(size, tf.int64)
            pending = iterator.get_next_as_optional()

            def cond(steps: Any, examples: Any, logs: Any, pending: Any) -> Any:
                return tf.logical_and(steps < limit, pending.has_value())

            def body(steps: Any, examples: Any, logs: Any, pending: Any) -> Any:
                new_logs, size = one_step_fn(pending.get_value())
                return (
                    steps + 1,
                    examples + tf.cast(size, tf.int64),
                    accumulate(logs, new_logs),
                    iterator.get_next_as_optional(),
                )

            steps, examples, logs, pending = tf.while_loop(
                cond, body, (tf.constant(1, tf.int64), examples, logs, pending)
            )
            if keras_step and not _is_default_strategy(strategy):  # issue 13: global logs
                logs = distribute.global_metric_results(owner.model)
            return steps, examples, logs, pending, pending.has_value()

        def first(iterator: Any) -> Any:
            pending = iterator.get_next_as_optional()
            return pending, pending.has_value()

        self.execute = tf.function(execute, autograph=False, reduce_retracing=True)
        self.first = tf.function(first, autograph=False)


class _LoopSetup(Hook):
    """First in the hook list: shows the loop's settings to the hooks from ``begin`` on."""

    def __init__(self, owner: FunctionLoop) -> None:
        self.owner = owner

    def begin(self) -> None:
        """Set ``steps_per_execution``, and ``steps_per_epoch`` when the dataset knows it."""
        owner, loop = self.owner, self.loop
        loop.steps_per_execution = owner.steps_per_execution
        if loop.steps_per_epoch is None:
            cardinality = int(owner.dataset.cardinality())
            if cardinality > 0:  # a known length: Keras' params["steps"] get it up front
                loop.steps_per_epoch = cardinality


class _FunctionRunner:
    """The engine's runner for :class:`FunctionLoop`."""

    def __init__(self, owner: FunctionLoop, validation_data: Any, validation_steps: int | None):
        self.owner = owner
        self.reinitializable = True
        self.validation_data = validation_data
        self.validation_steps = validation_steps
        self.strategy = owner.strategy
        self.train_data = self._distribute(owner.dataset)
        self.val_data = None if validation_data is None else self._distribute(validation_data)
        self.iterator: Any = None
        self.pending: Any = None
        self.more = False
        self.totals: dict[str, float] = {}
        self.weight = 0.0
        self.model = owner.model

    def _distribute(self, dataset: Any) -> Any:
        return self.strategy.experimental_distribute_dataset(dataset)

    def start(self, loop: LoopState, hooks: HookList) -> None:
        owner = self.owner
        model = self.model
        if model is not None and not owner._built and not _is_default_strategy(self.strategy):
            # like model.fit under a strategy: build the model's state from one batch
            owner._build_model(next(iter(owner.dataset)))
        owner._built = True
        hooks.after_create_session(None, None)

    def start_epoch(self, epoch: int, restart_data: bool) -> None:
        self.totals, self.weight = {}, 0.0
        if self.model is not None:
            self.model.reset_metrics()
        if restart_data or self.iterator is None:
            self.iterator = iter(self.train_data)
            self.pending, more = self.owner._executor(True).first(self.iterator)
            self.more = bool(more)

    def step(self, loop: LoopState, hooks: HookList) -> StepResult:
        if not self.more:
            return StepResult(0, 0, exhausted=True)
        spe = self.owner.steps_per_execution
        limit = spe
        if self.owner.steps_per_epoch is not None:
            limit = min(spe, self.owner.steps_per_epoch - loop.epoch_steps)
        run_context = _v1.train.SessionRunContext(
            original_args=_v1.train.SessionRunArgs(None), session=None
        )
        for hook in hooks:
            _check_run_args(hook, hook.before_run(run_context))
        executor = self.owner._executor(True)
        steps, examples, logs, self.pending, more = executor.execute(
            self.iterator, self.pending, tf.constant(limit, tf.int64)
        )
        self.more = bool(more)
        steps, examples = int(steps), int(examples)
        loop.batch_logs = self._logs(logs)
        values = _v1.train.SessionRunValues(
            results=None, options=_v1.RunOptions(), run_metadata=_v1.RunMetadata()
        )
        for hook in hooks:
            hook.after_run(run_context, values)
        if run_context.stop_requested:
            loop.request_stop("a hook called run_context.request_stop()")
        exhausted = not self.more and (self.owner.steps_per_epoch is None or steps < limit)
        return StepResult(steps, examples, loop.batch_logs, exhausted)

    def _logs(self, logs: Any) -> dict[str, float]:
        if self.model is not None:
            return _pythonify(logs)
        sums, weight = logs
        for key, value in sums.items():
            self.totals[key] = self.totals.get(key, 0.0) + float(value)
        self.weight += float(weight)
        return {k: v / self.weight for k, v in self.totals.items()} if self.weight else {}

    def evaluate(self, hooks: HookList) -> dict[str, float]:
        if self.val_data is None:
            return {}
        executor = self.owner._executor(False)
        spe = self.owner.steps_per_execution
        if self.model is not None:
            self.model.reset_metrics()
        totals_before, weight_before = self.totals, self.weight
        self.totals, self.weight = {}, 0.0
        try:
            iterator = iter(self.val_data)
            pending, more = executor.first(iterator)
            hooks.validation_begin()
            logs: dict[str, float] = {}
            step = 0
            while bool(more) and (self.validation_steps is None or step < self.validation_steps):
                limit = spe
                if self.validation_steps is not None:
                    limit = min(spe, self.validation_steps - step)
                hooks.validation_batch_begin(step)
                steps, _, values, pending, more = executor.execute(
                    iterator, pending, tf.constant(limit, tf.int64)
                )
                logs = self._logs(values)
                # like Keras' evaluate: the end index of the execution (begin + spe - 1)
                hooks.validation_batch_end(step + spe - 1, logs)
                step += int(steps)
            if step == 0:
                logger.warning("The validation data gave no batch; no val_ logs this epoch.")
            hooks.validation_end(logs)
        finally:
            self.totals, self.weight = totals_before, weight_before
        return logs

    def finish(self, hooks: HookList) -> BaseException | None:
        error: BaseException | None = None
        model = self.model
        if model is not None and getattr(model, "optimizer", None) is not None:
            try:  # as model.fit does at the end (EMA weights, for example)
                model.optimizer.finalize_variable_values(model.trainable_weights)
            except Exception as exc:  # every hook's end must still run
                error = exc
        end_error = hooks.end(None)
        self.iterator = self.pending = None
        return error or end_error


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
    stock = not isinstance(hook, Hook) and type(hook).__module__.startswith("tensorflow.")
    if stock or getattr(hook, "requires_session", False):
        raise ValueError(
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
        raise ValueError(
            f"{type(hook).__name__}.before_run asked for fetches or feeds "
            f"(SessionRunArgs(fetches={fetches!r}, feed_dict={feeds!r})), which need a "
            "tf.compat.v1.Session; FunctionLoop runs a tf.function without one. Read the "
            "step's values from self.loop.batch_logs in after_run, or use SessionLoop."
        )


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
            f"Received: {outputs!r}"
        )
    result = {}
    for key, value in outputs.items():
        value = tf.convert_to_tensor(value)
        if value.shape.rank not in (0, None):
            raise ValueError(
                f"Expected `step_fn` to return scalar tensors. Received: {key!r} of shape "
                f"{value.shape}"
            )
        result[str(key)] = value
    return result


def _pythonify(logs: Any) -> dict[str, Any]:
    """Flatten nested dicts and turn numeric scalars into Python floats, sorted by name."""
    result: dict[str, Any] = {}
    for key, value in sorted(logs.items()):
        if isinstance(value, Mapping):
            result.update(_pythonify(value))
            continue
        array = np.asarray(value)
        result[key] = float(array) if array.size == 1 else array
    return result
