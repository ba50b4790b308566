"""FunctionLoop: the engine on TensorFlow 2, driven by a compiled multi-step ``tf.function``.

The loop checks its arguments and hands each run to the engine (:mod:`tfr_hooks.engine`)
with a runner (:mod:`tfr_hooks.tf2.runner`) that calls the compiled functions
(:mod:`tfr_hooks.tf2.compiled`): up to ``steps_per_execution`` steps a call, the batches
read inside the function, the epoch ending at the call that consumes its last batch.

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

import tensorflow as tf

from tfr_hooks.checks import check_bool, check_optional_positive_int, expected
from tfr_hooks.class_weight import check_class_weight
from tfr_hooks.engine import Passes, RunInput, check_run_args, run_loop
from tfr_hooks.entries import input_entries
from tfr_hooks.hooks import HookList, LoopState, capabilities_of, check_hooks
from tfr_hooks.input_report import InputFacts, facts_of_read
from tfr_hooks.service.watch import check_service_timeout
from tfr_hooks.signals import with_signal_hook
from tfr_hooks.task import is_multi_worker
from tfr_hooks.tf2 import distribute
from tfr_hooks.tf2.compiled import CompiledSteps
from tfr_hooks.tf2.runner import FunctionRunner
from tfr_hooks.tfrecord.pipelines.contract import (
    ReadFacts,
    Source,
    data_and_facts,
    position_of_source,
)
from tfr_hooks.tfrecord.pipelines.sharding import distributed_steps
from tfr_hooks.tuning import AUTO, AutoSteps, check_steps_per_execution

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
        data: The training batches (for a Keras model, ``(x, y)`` or
            ``(x, y, sample_weight)``): a :class:`~tfr_hooks.tfrecord.Source`
            (``tfrecord.source(...)``: the dataset with what its reader knows, the input
            contract), or any ``tf.data.Dataset`` (its cardinality and any tf.data
            service its graph reads through are what the loop knows); one pass is one
            epoch unless ``steps_per_epoch`` is given.
        model: A compiled Keras 3 ``keras.Model``; its ``train_step`` trains and its
            ``test_step`` validates. Create and compile it under ``strategy.scope()``
            when you give a strategy.
        step_fn: Instead of ``model``: ``step_fn(batch) -> {name: scalar tensor}``, one
            training step (traced by ``tf.function``, run in ``strategy.run``).
        validation_step_fn: With ``step_fn``: the same for a validation batch (needed for
            ``run(validation_data=...)``).
        hooks: ``tfr_hooks.Hook`` instances (or session-free ``SessionRunHook`` instances),
            called in this order.
        steps_per_execution: Steps run by one call of the compiled function, or
            ``"auto"`` (the default): the loop times its calls and chooses it, so that a
            call's overhead is at most 1% of its steps' time and a call lasts at most
            half a second; it stays at 1 while a hook needs every step (a hook with its
            own ``before_run``/``after_run`` that does not declare
            ``needs_every_step = False``, a Keras callback with batch methods of your
            own) and under a multi-worker strategy (see :mod:`tfr_hooks.tuning`).
            ``loop.steps_per_execution`` shows the value, and the history's
            ``input/steps_per_execution`` each epoch's. An integer fixes it, as
            ``model.fit``'s does.
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
        service_timeout: For data read through a tf.data service (named by a
            ``Source``'s facts, or found in the dataset's graph, whoever called
            ``distribute`` and whatever was applied after it): the seconds a call may
            wait for its batches. A dispatcher gone or no worker left ends the run
            within it with a ``ConnectionError`` naming the address; a call that waits
            this long while workers are alive (a killed worker's part of the epoch,
            which TensorFlow never ends) ends the epoch with a warning.
        class_weight: With ``model``: ``{class index: weight}``, as ``model.fit`` takes
            it. Each training example is weighted by its label's class (the label for
            sparse labels, the argmax for one-hot ones), times the batch's
            ``sample_weight`` when it has one (``model.fit`` refuses the two together).
            A label whose class is not in the dict fails the step with an
            ``InvalidArgumentError`` naming the class (``model.fit`` weighs it 1.0).
            Validation stays unweighted, as in ``model.fit``. Not with ``step_fn``
            (your step computes its own loss) nor with a model of several outputs.

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
        steps_per_execution: int | str = "auto",
        steps_per_epoch: int | None = None,
        strategy: Any = None,
        handle_signals: bool = True,
        measure_input: bool = True,
        service_timeout: float = 60.0,
        class_weight: Mapping[int, float] | None = None,
    ) -> None:
        given, (data, facts) = data, _data_of(data, "data")
        check_service_timeout(service_timeout)
        _check_steps(model, step_fn, validation_step_fn)
        class_weight = _check_class_weight(class_weight, model)
        check_steps_per_execution(steps_per_execution)
        check_optional_positive_int(steps_per_epoch, "steps_per_epoch")
        check_bool(measure_input, "measure_input")
        if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
            raise TypeError(expected("strategy", "a tf.distribute.Strategy or None", strategy))
        user_hooks = check_hooks(hooks)
        for i, hook in enumerate(user_hooks):
            _refuse_session_hook(hook, i)
        user_hooks = with_signal_hook(user_hooks, handle_signals)
        self.data = data
        #: what the reader knows of ``data`` (the input contract), or what its graph shows
        self.facts = facts
        #: where ``data``'s next pass starts, when it can start anywhere (else ``None``)
        self._position = position_of_source(given)
        self.model = model
        self.step_fn = step_fn
        self.validation_step_fn = validation_step_fn
        self.steps_per_execution = steps_per_execution
        self.steps_per_epoch = steps_per_epoch
        #: ``{class: weight}`` of the training examples (checked), or ``None``
        self.class_weight = class_weight
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        extra = []  # under a multi-worker strategy, name a lost worker
        if is_multi_worker(self.strategy):
            extra.append(distribute.LostWorkerHook(distribute.current_task(self.strategy)))
        #: ``steps_per_execution="auto"``: the tuners, kept across runs (else ``None``)
        self.tuning: AutoSteps | None = None
        if steps_per_execution == AUTO:
            held = None
            if is_multi_worker(self.strategy):  # the workers' calls must stay in step
                held = "a multi-worker strategy (every worker must run the same calls)"
            self.tuning = AutoSteps([*user_hooks, *extra], held=held)
        # the features' hooks: the tuner first (it sets each call's value before the
        # hooks see it), the read's history entries before the user's (a TensorBoard
        # hook writes those of a mixture's sources at the epoch's end)
        tuner = [] if self.tuning is None else [self.tuning]
        entries = input_entries(facts, self._position)
        self.hooks = HookList([*tuner, *entries, *user_hooks, *extra])
        self.loop = LoopState()
        self.loop.strategy = self.strategy
        # the compiled functions, built once per loop and kept across runs
        self._steps = CompiledSteps(
            self.strategy,
            model=model,
            step_fn=step_fn,
            validation_step_fn=validation_step_fn,
            measure_input=measure_input,
            # served data of known size: after a lost worker, an epoch ends at its size
            bounded=facts.served_examples() is not None,
            class_weight=class_weight,
            # every call one step: fixed at 1, or "auto" held at 1 by a hook or strategy
            one_step_calls=steps_per_execution == 1
            or (self.tuning is not None and not self.tuning.tuned),
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
            validation_data: A ``tf.data.Dataset`` (or a
                :class:`~tfr_hooks.tfrecord.Source`) of validation batches, run to its end
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
        val_facts = ReadFacts()
        if validation_data is not None:
            validation_data, val_facts = _data_of(validation_data, "validation_data")
            if self.model is None and self.validation_step_fn is None:
                raise ValueError(
                    "Expected `validation_step_fn` for `validation_data`: validation with "
                    "`step_fn` needs `validation_step_fn` (a function batch -> dict of "
                    "scalar tensors, without training). Received: validation_step_fn=None"
                )
        if self.model is not None:
            self.model.stop_training = False
        runner = FunctionRunner(
            self._steps,
            hooks=self.hooks.hooks,
            dataset=self.data,
            service=self.facts.service,
            validation_data=validation_data,
            validation_service=val_facts.service,
            service_timeout=self.service_timeout,
        )
        # a known length: Keras' params["steps"] get it up front; under a multi-worker
        # strategy, the steps a pass really makes (None when only running it tells)
        workers = 1
        if is_multi_worker(self.strategy):
            workers = distribute.current_task(self.strategy).num_workers
        known = self.facts.steps_on(workers)
        if known is None:
            known = distributed_steps(self.data, workers)
        return run_loop(
            runner,
            self.hooks,
            self.loop,
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=self.steps_per_epoch,
            steps_per_execution=self.tuning.value(self.tuning.train)
            if self.tuning
            else int(self.steps_per_execution),
            validation_freq=validation_freq,
            validation_steps=validation_steps,
            data=RunInput(
                steps=known if known else None,
                examples=self.facts.served_examples(),
                report=self._input_facts,
                position=self._position,
            ),
            passes=self._passes,
        )

    def _input_facts(self) -> InputFacts:
        """What the loop knows of its input, for the verdict's remedy (as SessionLoop)."""
        value = self.loop.steps_per_execution if self.tuning else int(self.steps_per_execution)
        held = None if self.tuning is None else self.tuning.held_by
        return facts_of_read(self.facts, steps_per_execution=value, steps_held_by=held)


def _data_of(data: object, name: str) -> tuple[Any, ReadFacts]:
    """The dataset and the facts of ``data`` (a :class:`Source` or a ``tf.data.Dataset``).

    Raises:
        TypeError: ``data`` is neither.
    """
    if not isinstance(data, (tf.data.Dataset, Source)):
        raise TypeError(
            f"Expected `{name}` to be a tf.data.Dataset of batches or a "
            "tfr_hooks.tfrecord.Source (for example tfr_hooks.tfrecord.source(...) or "
            f"tfrecord.dataset(...)). Received: {name}={data!r}"
        )
    return data_and_facts(data, why="training data" if name == "data" else "")


def _check_steps(model: Any, step_fn: Any, validation_step_fn: Any) -> None:
    """Check what trains: exactly one of ``model`` and ``step_fn``, and its validation.

    Raises:
        TypeError: A step function is not callable, or ``model`` not a Keras 3 model.
        ValueError: Both or neither of ``model`` and ``step_fn``, ``validation_step_fn``
            with ``model``, or ``model`` not compiled.
    """
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


def _check_class_weight(class_weight: object, model: Any) -> dict[int, float] | None:
    """The checked ``class_weight``: only with a model of a single output."""
    if class_weight is None:
        return None
    if model is None:
        raise ValueError(
            expected(
                "class_weight",
                "None with `step_fn` (your step computes its own loss: weigh it there, "
                "or give `model`)",
                class_weight,
            )
        )
    checked = check_class_weight(class_weight)
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):  # a subclassed or unbuilt model: not yet known
        outputs = None
    if outputs is not None and len(tf.nest.flatten(outputs)) > 1:
        raise ValueError(
            expected(
                "class_weight",
                f"None for a model with several outputs ({len(tf.nest.flatten(outputs))}: "
                "class_weight weighs the examples of a single output by its label; give "
                "the weights as a sample_weight column instead)",
                class_weight,
            )
        )
    return checked


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
