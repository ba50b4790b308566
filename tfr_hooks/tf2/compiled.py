"""FunctionLoop's compiled functions: up to ``steps_per_execution`` steps in one call.

The batches never leave the graph: the dataset's iterator is read inside the compiled
function, which runs up to ``steps_per_execution`` steps in an in-graph ``tf.while_loop``
and looks one batch ahead with ``iterator.get_next_as_optional()``. So the execution that
consumes the last (possibly partial) batch of an epoch already knows the data ran out.

A step is either a compiled Keras 3 model's public ``train_step``/``test_step`` or a
user's ``step_fn(batch) -> {name: scalar tensor}`` (whose values the runner averages,
weighted by the batch size). Under a ``tf.distribute`` strategy each step runs in
``strategy.run`` and the values are reduced. With a ``class_weight``, each training batch
gets its examples' class weights (see :mod:`tfr_hooks.class_weight`) before the model's
step, outside any XLA compilation of the step; validation batches stay unweighted.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from tfr_hooks.class_weight import weigh_batch
from tfr_hooks.tf2 import distribute
from tfr_hooks.tf_private import is_default_strategy, op_determinism_enabled

__all__ = ["CompiledSteps", "Executor", "is_default_strategy", "batch_size_of", "UNBOUNDED"]

logger = logging.getLogger(__name__)

#: ``remaining`` of a call that may take any number of examples
UNBOUNDED = 2**62


class CompiledSteps:
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
        class_weight: Mapping[int, float] | None = None,
        one_step_calls: bool = False,
    ) -> None:
        self.strategy = strategy
        self.model = model
        #: whether every call runs one step (``steps_per_execution=1``, or ``"auto"``
        #: held at 1): the calls then run :attr:`Executor.execute_one`
        self.one_step_calls = one_step_calls
        #: ``{class: weight}`` for the training batches of ``model`` (checked), or None
        self.class_weight = class_weight
        #: whether the training steps time their wait for input
        self.measure_input = measure_input
        #: whether the training steps stop fetching at a number of examples (see _execute)
        self.bounded = bounded
        self.step_fn = step_fn
        self.validation_step_fn = validation_step_fn
        self.executors: dict[bool, Executor] = {}
        #: whether the model's state was created (or needs no creating) already
        self.built = False

    def executor(self, training: bool) -> Executor:
        """The compiled function for training steps, or for validation steps."""
        if training not in self.executors:
            fn: Any
            if self.model is not None:
                fn = self.model.train_step if training else self.model.test_step
            else:
                fn = self.step_fn if training else self.validation_step_fn
            # validation steps are not measured: only training input is reported;
            # class weights weigh training batches only, as in model.fit
            self.executors[training] = Executor(
                fn,
                self.strategy,
                self.model,
                measure_input=training and self.measure_input,
                bounded=training and self.bounded,
                class_weight=self.class_weight if training else None,
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


class Executor:
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

    With ``class_weight`` (a Keras step), each batch becomes ``(x, y, sample_weight)``
    with its examples' class weights before the step, in ``strategy.run`` of the
    uncompiled function: an XLA-compiled step would skip the check of the classes.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        strategy: Any,
        model: Any = None,
        *,
        measure_input: bool = True,
        bounded: bool = False,
        class_weight: Mapping[int, float] | None = None,
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
            _own(_one_step(fn, strategy, keras_step)),
            autograph=not keras_step,
            reduce_retracing=True,
            jit_compile=jit,
        )
        prepare = None
        if class_weight is not None:
            prepare = _weigh(strategy, class_weight)
        execute = _execute(one_step_fn, strategy, model, measures_wait, bounded, prepare)
        self.execute = tf.function(_own(execute), autograph=False, reduce_retracing=True)
        single = _execute(one_step_fn, strategy, model, measures_wait, bounded, prepare, True)
        #: ``execute`` for a loop whose calls run one step each: no ``tf.while_loop`` in
        #: the graph (``limit`` is taken and ignored), as ``fit`` runs
        #: ``steps_per_execution=1``. Only such a loop calls it: a loop whose value
        #: moves would trace and optimize a second function in the middle of its run.
        self.execute_one = tf.function(_own(single), autograph=False, reduce_retracing=True)
        self.first = tf.function(_own(_first), autograph=False)
        self.skip = tf.function(_own(_skip(strategy)), autograph=False)


def _one_step(fn: Callable[[Any], Any], strategy: Any, keras_step: bool) -> Callable[[Any], Any]:
    """``one_step(batch) -> (logs, size)``: ``fn`` on a batch in ``strategy.run``.

    ``size`` is the batch's examples (of every replica). With a Keras step, ``logs`` are
    the first replica's results; with a user step, ``(sums, weight)``: the outputs
    weighted by the batch size, summed over the replicas, and that weight.
    """

    def replica_step(batch: Any) -> Any:
        outputs = fn(batch)
        size = batch_size_of(batch)
        if keras_step:
            return outputs, size
        outputs = _check_outputs(outputs)
        weight = tf.cast(size, tf.float64)
        # a worker out of data gets an empty batch (mean NaN): it adds nothing
        return {
            k: tf.where(weight > 0, tf.cast(v, tf.float64) * weight, tf.zeros((), tf.float64))
            for k, v in outputs.items()
        }, size

    single = is_default_strategy(strategy)  # no replicas: no reduction ops per step

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


def _weigh(strategy: Any, class_weight: Mapping[int, float]) -> Callable[[Any], Any]:
    """``weigh(batch) -> (x, y, sample_weight)``: each replica's batch, class-weighted."""

    def replica_weigh(batch: Any) -> Any:
        return weigh_batch(batch, class_weight)

    def weigh(batch: Any) -> Any:
        return strategy.run(replica_weigh, args=(batch,))

    return weigh


def _execute(
    one_step_fn: Callable[[Any], Any],
    strategy: Any,
    model: Any,
    measures_wait: bool,
    bounded: bool = False,
    prepare: Callable[[Any], Any] | None = None,
    one: bool = False,
) -> Callable[[Any, Any, Any, Any], Any]:
    """``execute(iterator, pending, limit, remaining)`` of :class:`Executor`.

    ``prepare(batch)``, when given, makes each batch what the step takes. With ``one``,
    the call runs one step whatever ``limit`` says, without a ``tf.while_loop``: the
    loop's control flow (an enter, merge, switch and exit a loop variable, and its
    condition) runs even when it makes no iteration, a cost of every call that a call
    of one step need not pay.
    """
    keras_step = model is not None

    def batch_of(pending: Any) -> Any:
        batch = pending.get_value()
        return batch if prepare is None else prepare(batch)

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
        logs, size = one_step_fn(batch_of(pending))
        examples = tf.cast(size, tf.int64)
        pending, wait = waited(size, fetcher(iterator, examples, remaining))
        steps = tf.constant(1, tf.int64)

        def cond(steps: Any, examples: Any, logs: Any, pending: Any, wait: Any) -> Any:
            return tf.logical_and(steps < limit, pending.has_value())

        def body(steps: Any, examples: Any, logs: Any, pending: Any, wait: Any) -> Any:
            new_logs, size = one_step_fn(batch_of(pending))
            examples += tf.cast(size, tf.int64)
            pending, new_wait = waited(size, fetcher(iterator, examples, remaining))
            return steps + 1, examples, accumulate(logs, new_logs), pending, wait + new_wait

        if not one:  # the further steps, up to ``limit``
            steps, examples, logs, pending, wait = tf.while_loop(
                cond, body, (steps, examples, logs, pending, wait)
            )
        if keras_step and not is_default_strategy(strategy):  # global logs
            logs = distribute.global_metric_results(model)
        return steps, examples, logs, pending, pending.has_value(), wait

    return execute


def _own(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a callable of this loop's own, for ``tf.function``.

    TensorFlow's warning that "N out of the last M calls to ... triggered tf.function
    retracing" counts the traces of every ``tf.function`` of one Python function's code
    together (TensorFlow 2.21 keys it by ``__code__``, closures included). Each loop
    traces its functions anew (a new loop, a new dataset) and calls ``first`` once an
    epoch: the 5th short loop of a process would warn of a retracing that is none. A
    ``functools.partial`` has no ``__code__``: TensorFlow counts each by itself, so a
    real retracing within a loop still warns.
    """
    return functools.partial(fn)


def _first(iterator: Any) -> Any:
    """``first(iterator) -> (pending, more)`` of :class:`Executor`."""
    pending = iterator.get_next_as_optional()
    return pending, pending.has_value()


def _skip(strategy: Any) -> Callable[[Any, Any, Any], Any]:
    """``skip(iterator, pending, count) -> (skipped, examples, pending, more)``.

    It drops ``pending`` and the batches after it, up to ``count`` in all, in the graph
    (no step runs); under a multi-worker strategy every worker drops the same number, as
    ``get_next_as_optional`` agrees on whether any has data left.
    """
    single = is_default_strategy(strategy)

    def skip(iterator: Any, pending: Any, count: Any) -> Any:
        def cond(skipped: Any, examples: Any, pending: Any) -> Any:
            return tf.logical_and(skipped < count, pending.has_value())

        def body(skipped: Any, examples: Any, pending: Any) -> Any:
            size = strategy.run(batch_size_of, args=(pending.get_value(),))
            if not single:  # the examples of every replica of every worker
                size = strategy.reduce(tf.distribute.ReduceOp.SUM, size, axis=None)
            examples += tf.cast(size, tf.int64)
            return skipped + 1, examples, iterator.get_next_as_optional()

        zero = tf.constant(0, tf.int64)
        skipped, examples, pending = tf.while_loop(cond, body, (zero, zero, pending))
        return skipped, examples, pending, pending.has_value()

    return skip


def _time_after(tensor: Any) -> Any:
    """``tf.timestamp()`` (seconds, float64) once ``tensor`` is computed."""
    with tf.control_dependencies([tensor]):
        return tf.timestamp()


def batch_size_of(batch: Any) -> Any:
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
