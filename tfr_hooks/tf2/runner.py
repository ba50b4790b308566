"""FunctionLoop's runner: one compiled call per engine step, cancellable, watched.

The engine (:mod:`tfr_hooks.engine`) fires every hook event; this runner only calls the
compiled functions (:mod:`tfr_hooks.tf2.compiled`) on the dataset's iterators. Every call
runs under a ``CancellationManager`` (:mod:`tfr_hooks.tf_private`), so that a read that
cannot finish can be ended from another thread: by a signal's watcher
(:meth:`FunctionRunner.cancel`, see :class:`~tfr_hooks.StopOnSignal`), or, for data read
through a tf.data service, by the service's watch (:mod:`tfr_hooks.service.watch`), which
turns a lost dispatcher or the last worker gone into a ``ConnectionError`` and a read that
waited its bound while workers are alive into a stalled pass (``StepResult.stall``),
which the engine ends (:class:`~tfr_hooks.stalls.StallPolicy`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import tfr_hooks.tf_private as tf_private
from tfr_hooks.hooks import capabilities_of
from tfr_hooks.runners import StepResult
from tfr_hooks.service.watch import ServiceWatches, Stalled
from tfr_hooks.tf2.compiled import UNBOUNDED, CompiledSteps, Executor, is_default_strategy

__all__ = ["FunctionRunner", "Means"]


class FunctionRunner:
    """The engine's runner for :class:`~tfr_hooks.FunctionLoop`: one compiled call a step.

    Args:
        steps: The loop's compiled functions.
        hooks: The run's hooks (their ``before_run`` arguments are checked).
        dataset: The training dataset.
        service: The tf.data service the training data is read through, or ``None``.
        validation_data: The validation dataset, or ``None``.
        validation_service: The service the validation data is read through, or ``None``.
        service_timeout: The bound of a read through a service, seconds.
    """

    reinitializable = True
    skips_batches = True
    replays_passes = True
    session = None
    coord = None
    run_args = tf.compat.v1.train.SessionRunArgs(None)

    def __init__(
        self,
        steps: CompiledSteps,
        *,
        hooks: Sequence[Any],
        dataset: Any,
        service: str | None = None,
        validation_data: Any = None,
        validation_service: str | None = None,
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
        self.service, self.validation_service = service, validation_service
        self.iterator: Any = None
        self.pending: Any = None  # the batch fetched ahead by the last call
        self.more = False  # whether ``pending`` holds a batch
        self.ran_out = False
        self.means = Means()
        self.val_iterator: Any = None
        self.val_pending: Any = None
        self.val_more = False
        self.val_means = Means()
        # the call under way, cancelled by a service's watch or a signal's watcher
        self.manager: Any = None
        self.calling = threading.Event()
        self.watches = ServiceWatches(service_timeout, self._cancel_call)
        # per step, the call's dispatch (not its steps) is most of the Python cost at
        # steps_per_execution=1: the int64 scalars it takes, made once, and the function
        # each executor traced, called without tf.function's cache lookup
        self._scalars: dict[int, Any] = {}
        self._traced: dict[Any, Any] = {}

    def cancel(self) -> bool:
        """End the call under way from another thread; whether one was under way."""
        if not self.calling.is_set():
            return False
        return self._cancel_call()

    def _cancel_call(self) -> bool:
        manager = self.manager
        if manager is None:
            return False
        tf_private.start_cancel(manager)
        return True

    def _call(self, fn: Callable[..., Any], service: str | None, *args: Any) -> Any:
        """``fn(*args)``, cancellable, under the watch of ``service`` when it is served.

        Raises:
            Stalled: The call waited the service's bound while workers were alive.
            ConnectionError: The service's dispatcher is gone or no worker is left.
        """
        if self.manager is None or tf_private.is_cancelled(self.manager):
            self.manager = tf_private.cancellation_manager()
        watch = None if service is None else self.watches.watch_of(service)
        # a first call traces and compiles: only a gone dispatcher or worker trips it
        traced = getattr(fn, "experimental_get_tracing_count", lambda: 1)() > 0
        reading = contextlib.nullcontext() if watch is None else watch.reading(stall=traced)
        self.calling.set()
        try:
            with reading:
                return tf_private.call_cancellable(self.manager, fn, *args)
        except tf.errors.CancelledError as error:
            if watch is not None:
                self.watches.raise_tripped(watch, error)
            raise
        finally:
            self.calling.clear()

    def start(self) -> None:
        """Prepare to run (see :meth:`tfr_hooks.runners.Runner.start`)."""
        steps = self.steps
        distributed = not is_default_strategy(self.strategy)
        # a hook that saves or restores the model's state needs its variables up front
        wanted = any(capabilities_of(h).needs_model_state for h in self.hooks)
        if self.model is not None and not steps.built and (distributed or wanted):
            # like model.fit under a strategy: build the model's state from one batch
            steps.build_model(next(iter(self.dataset)))
        steps.built = True

    def start_epoch(self, restart_data: bool) -> None:
        """Reset the epoch's means; restart the data when asked."""
        self.means = Means()
        if self.model is not None:
            self.model.reset_metrics()
        if restart_data or self.iterator is None:
            self.iterator = iter(self.train_data)
            first = self.steps.executor(True).first
            try:
                self.pending, more = self._call(first, self.service, self.iterator)
            except Stalled:
                self.iterator, more = None, False
            self.more = bool(more)
        self.ran_out = not self.more

    def start_pass(self) -> None:
        """Start a pass over the training data and leave it, without a step.

        A seeded shuffle (``shuffle=N`` with ``seed``, the in-memory orders)
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
            self._call(self.steps.executor(True).first, self.service, iter(self.train_data))

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
            self.service,
            self.iterator,
            self.pending,
            tf.constant(count, tf.int64),
        )
        self.more = bool(more)
        self.ran_out = not self.more
        return int(skipped), int(examples)

    def run_step(
        self, hook_args: Sequence[Any], limit: int, examples_left: int | None = None
    ) -> StepResult:
        """Run up to ``limit`` training steps (see :meth:`tfr_hooks.runners.Runner.run_step`)."""
        for hook, args in zip(self.hooks, hook_args, strict=True):
            check_run_args(hook, args)
        bound = UNBOUNDED if examples_left is None else examples_left
        return self._execute(self.steps.executor(True), self.iterator, limit, bound, True)

    def start_validation(self) -> bool:
        """Restart the validation data and its means; ``False`` when there is none."""
        if self.val_data is None:
            return False
        if self.model is not None:
            self.model.reset_metrics()
        self.val_means = Means()
        self.val_iterator = iter(self.val_data)
        first = self.steps.executor(False).first
        try:
            self.val_pending, more = self._call(first, self.validation_service, self.val_iterator)
        except Stalled:
            more = False
        self.val_more = bool(more)
        self.ran_out = not self.val_more
        return True

    def run_validation_step(self, limit: int) -> StepResult:
        """Run up to ``limit`` validation steps; ``steps=0`` when the data ran out."""
        # the validation pass swaps its own look-ahead and means in for the call
        executor = self.steps.executor(False)
        train = self.pending, self.more, self.means
        self.pending, self.more, self.means = self.val_pending, self.val_more, self.val_means
        try:
            result = self._execute(executor, self.val_iterator, limit, UNBOUNDED, False)
        finally:
            self.val_pending, self.val_more = self.pending, self.more
            self.pending, self.more, self.means = train
        self.ran_out = not self.val_more  # start_epoch looks at the training data again
        return result

    def _execute(
        self, executor: Executor, iterator: Any, limit: int, remaining: int, training: bool
    ) -> StepResult:
        """One call of ``executor``: up to ``limit`` steps, ``remaining`` examples at most.

        A read that stalled (see :class:`~tfr_hooks.stalls.StallPolicy`) ends the pass:
        the iterator is dropped, and the next pass starts a new one.
        """
        service = self.service if training else self.validation_service
        args = (iterator, self.pending, self._scalar(limit), self._scalar(remaining))
        try:
            steps, examples, logs, self.pending, more, wait = self._call_execute(
                executor, service, args, limit
            )
        except Stalled as stall:
            if training:
                self.iterator = None
            self.more, self.ran_out = False, True
            return StepResult(0, 0, self._last_values(), exhausted=True, stall=str(stall))
        self.more = bool(more)
        self.ran_out = not self.more
        # a model's metric results, in the order fit shows them; or a user step's means
        keras = self.model is not None
        values = dict(sorted(logs.items())) if keras else self.means.add(*logs)
        result = StepResult(int(steps), int(examples), values, exhausted=not self.more)
        result.input_wait = float(wait) if executor.measures_wait else None
        return result

    def _scalar(self, value: int) -> Any:
        """``tf.constant(value, tf.int64)``, made once for the few values a run passes."""
        scalar = self._scalars.get(value)
        if scalar is None:
            if len(self._scalars) >= 64:  # a bounded epoch's ``remaining`` changes each call
                self._scalars.clear()
            scalar = self._scalars[value] = tf.constant(value, tf.int64)
        return scalar

    def _call_execute(
        self, executor: Executor, service: str | None, args: tuple[Any, ...], limit: int
    ) -> Any:
        """``executor.execute(*args)``; after its first call, the function it traced.

        A loop whose calls all run one step (``CompiledSteps.one_step_calls``) runs
        ``executor.execute_one`` instead: the same step and look-ahead fetch without the
        ``tf.while_loop``, as ``fit`` runs ``steps_per_execution=1`` (the loop's control
        flow no longer runs at every call).

        The first call goes through the ``tf.function`` (it traces); the function it ran
        is then called directly, which skips the lookup of the arguments' types (the
        iterator's and the look-ahead ``Optional``'s specs) in TensorFlow's cache: about
        0.3 ms of a 4 ms step on 2 cores. Arguments it does not take (a ``TypeError``
        when they are bound, before anything runs) go through the ``tf.function``
        again, which traces for them if it must. Under a distribution strategy every
        call goes through the ``tf.function``.
        """
        one = self.steps.one_step_calls and limit == 1
        function = executor.execute_one if one else executor.execute
        traced = self._traced.get(function)
        if traced is not None:
            try:
                return self._call(traced, service, *args)
            except TypeError:
                del self._traced[function]
        outputs = self._call(function, service, *args)
        if is_default_strategy(self.strategy):
            self._traced[function] = function.get_concrete_function(*args)
        return outputs

    def _last_values(self) -> dict[str, Any]:
        if self.model is not None:
            return dict(sorted(self.model.get_metrics_result().items()))
        return self.means.add({}, 0.0)

    def finish(self) -> None:
        """End-of-training work before the hooks' ``end``."""
        model = self.model
        if model is not None and getattr(model, "optimizer", None) is not None:
            # as model.fit does at the end (EMA weights, for example)
            model.optimizer.finalize_variable_values(model.trainable_weights)

    def close(self) -> None:
        """Release what the run holds, after the hooks' ``end``."""
        self.iterator = self.pending = None
        self.val_iterator = self.val_pending = None
        self._traced = {}
        self.watches.close()


class Means:
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


def check_run_args(hook: Any, args: Any) -> None:
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
