"""Build a ``tf_keras`` model's training graph for :class:`~tfr_hooks.SessionLoop`.

``model.compile`` + ``model.fit`` cannot train a model whose input *is* a tensor from a
queue or an iterator; :func:`keras_training_graph` builds what ``fit`` would build, from
public ``tf_keras`` APIs only: the loss (plus the model's regularization losses), metric
tensors, the legacy optimizer's update ops plus the model's own update ops (BatchNorm's
moving averages), and the batch size. :meth:`KerasTrainingGraph.validation` builds the
matching :class:`~tfr_hooks.Validation` on a second call of the model, sharing weights.

Like ``fit``, training steps run with the Keras learning phase set to 1 (Dropout and
BatchNorm in training mode): a small hook in :attr:`KerasTrainingGraph.hooks` feeds it,
which ``SessionLoop(training, ...)`` runs by itself; validation runs in inference mode.

``sample_weight`` and ``class_weight`` weigh the training examples as ``fit`` does: the
loss is the sum of weight x per-example loss over the number of losses (the batch size;
``tf_keras``' ``SUM_OVER_BATCH_SIZE`` reduction), ``weighted_metrics`` are weighted means
and ``metrics`` stay unweighted. Over an epoch, a weighted metric is averaged by the
weight of each batch (the sum of its examples' weights), not by its size, so that the
epoch value is the weighted mean over all its examples, as Keras 3's ``fit`` gives.
Validation is unweighted unless given its own ``sample_weight`` (``fit``'s
``validation_data=(x, y, sample_weight)``); ``class_weight`` never applies to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from tfr_hooks.checks import expected
from tfr_hooks.class_weight import check_class_weight, class_weights, combined_weights
from tfr_hooks.graph.setup import TrainingGraph
from tfr_hooks.graph.validation import Validation
from tfr_hooks.hooks import Hook
from tfr_hooks.keras_callbacks import KerasCallbacks

__all__ = ["KerasTrainingGraph", "keras_training_graph"]

logger = logging.getLogger(__name__)

_ACCURACY = ("accuracy", "acc")


class _LearningPhaseHook(Hook):
    """Feed the Keras learning phase 1 to training steps, as ``fit`` does."""

    requires_session = True

    def __init__(self, learning_phase: Any) -> None:
        self.learning_phase = learning_phase

    def before_run(self, run_context: Any) -> Any:
        """Add the feed to the training step's ``session.run``."""
        return tf.compat.v1.train.SessionRunArgs(None, feed_dict={self.learning_phase: True})


def _depends_on(target: Any, op: Any) -> bool:
    """Whether running ``target`` runs ``op`` (through data or control inputs)."""
    seen: set[Any] = set()
    todo = [target if isinstance(target, tf.Operation) else target.op]
    while todo:
        current = todo.pop()
        if current is op:
            return True
        if current in seen:
            continue
        seen.add(current)
        todo.extend(t.op for t in current.inputs)
        todo.extend(current.control_inputs)
    return False


class KerasTrainingGraph(TrainingGraph):
    """What :func:`keras_training_graph` built; give it to ``SessionLoop`` as its train op.

    Attributes:
        train_op: Runs one optimizer step and the model's update ops.
        fetches: ``{"loss": ..., <metric name>: ...}`` scalar tensors for the loop's
            epoch means (``loss`` includes the regularization losses, as in ``fit``).
        batch_size: The batch size of the step, a scalar tensor.
        fetch_weights: The weight of each weighted metric's step in the epoch mean: the
            sum of the batch's example weights (the loop's default for the others is
            ``batch_size``).
        model: The model.
        optimizer: The legacy optimizer (also set as ``model.optimizer`` when the model
            had none, for callbacks that read or change the learning rate).
        hooks: Hooks the loop needs: the learning-phase feed, when the training step
            depends on the learning phase (Dropout, BatchNorm). ``SessionLoop(training)``
            runs them by itself; with ``hooked_session``, put them in its ``hooks``. A
            model that does not depend on it needs no feed, and its steps take the loop's
            prepared-callable path.

    Examples:
        >>> training = keras_training_graph(  # doctest: +SKIP
        ...     model, label, loss="sparse_categorical_crossentropy",
        ...     optimizer=tf_keras.optimizers.legacy.Adam(0.01), metrics=["accuracy"])
        >>> val = training.validation(val_image, val_label, initializers=[init])  # doctest: +SKIP
        >>> loop = SessionLoop(  # doctest: +SKIP
        ...     training, data=batches,
        ...     hooks=[training.keras_callbacks([checkpoint, early_stopping])])
        >>> loop.run(epochs=10, validation_data=val)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        train_op: Any,
        fetches: dict[str, Any],
        batch_size: Any,
        model: Any,
        optimizer: Any,
        loss_fn: Callable[..., Any],
        metric_fns: dict[str, Callable[..., Any]],
        hooks: list[Hook],
        weighted_metric_fns: dict[str, Callable[..., Any]] | None = None,
        fetch_weights: dict[str, Any] | None = None,
    ) -> None:
        self.train_op = train_op
        self.fetches = fetches
        self.fetch_weights = fetch_weights or {}
        self.batch_size = batch_size
        self.model = model
        self.optimizer = optimizer
        self.hooks = hooks
        self._loss_fn = loss_fn
        self._metric_fns = metric_fns
        self._weighted_metric_fns = weighted_metric_fns or {}
        self._has_validation = False

    def keras_callbacks(
        self, callbacks: Sequence[Any] | None, *, verbose: int | str = 0, add_history: bool = True
    ) -> KerasCallbacks:
        """A :class:`~tfr_hooks.KerasCallbacks` for this model with ``fit``'s full params.

        ``params["metrics"]`` and ``params["do_validation"]`` are known from the start:
        build the :meth:`validation` first if there is one.

        Args:
            callbacks: ``tf_keras`` callback instances.
            verbose: As for :class:`~tfr_hooks.KerasCallbacks`.
            add_history: As for :class:`~tfr_hooks.KerasCallbacks`.

        Returns:
            The hook to put in the loop's ``hooks``.
        """
        return KerasCallbacks(
            callbacks,
            self.model,
            verbose=verbose,
            add_history=add_history,
            metrics=list(self.fetches),
            do_validation=self._has_validation,
        )

    def validation(
        self,
        inputs: Any,
        labels: Any,
        *,
        initializers: Sequence[Any] = (),
        sample_weight: Any = None,
    ) -> Validation:
        """A :class:`~tfr_hooks.Validation` on ``model(inputs)`` (shared weights).

        The model runs in inference mode (``training=False``); the loss and metrics are
        the training ones, so the epoch logs get ``val_loss`` and ``val_<metric>``. Like
        ``fit``'s validation, ``class_weight`` does not apply to it; it is weighted only
        by its own ``sample_weight``, as ``fit(validation_data=(x, y, sample_weight))``.

        Args:
            inputs: The validation batch tensor(s) the model takes.
            labels: The validation label tensor.
            initializers: Ops that restart the validation data before each pass.
            sample_weight: A tensor of the validation batch with a weight per example,
                or ``None`` (unweighted): it weighs the loss and ``weighted_metrics``
                as ``keras_training_graph``'s ``sample_weight`` weighs training's.

        Returns:
            The validation pass to give ``SessionLoop.run(validation_data=...)`` (with
            its ``validation_steps`` and ``validation_freq``).
        """
        _check_tensor(labels, "labels")
        if sample_weight is not None:
            _check_tensor(sample_weight, "sample_weight")
        self._has_validation = True
        outputs = self.model(inputs, training=False)
        regularization = list(self.model.get_losses_for(None))
        regularization += list(self.model.get_losses_for(tf.nest.flatten(inputs)))
        weights = None if sample_weight is None else tf.cast(sample_weight, tf.float32)
        fetches, fetch_weights = _loss_and_metrics(
            self._loss_fn,
            self._metric_fns,
            labels,
            outputs,
            regularization,
            weights,
            self._weighted_metric_fns,
        )
        return Validation(
            fetches,
            initializers=initializers,
            batch_size=tf.shape(labels)[0],
            weights=fetch_weights,
        )


def keras_training_graph(
    model: Any,
    labels: Any,
    *,
    loss: str | Callable[..., Any],
    optimizer: Any,
    metrics: Sequence[str | Callable[..., Any]] = (),
    outputs: Any = None,
    sample_weight: Any = None,
    class_weight: Mapping[int, float] | None = None,
    weighted_metrics: Sequence[str | Callable[..., Any]] = (),
) -> KerasTrainingGraph:
    """Build the train op, loss, metrics and batch size of a tensor-fed ``tf_keras`` model.

    Call it in the graph that holds the model (graph mode, for example a model built on
    ``tf_keras.layers.Input(tensor=batch)``). ``optimizer.get_updates`` minimizes the
    loss plus the model's regularization losses over ``model.trainable_weights``; the
    model's update ops (``get_updates_for`` its inputs) run in the same step.

    Args:
        model: A single-output ``tf_keras`` model in graph mode.
        labels: The label tensor of the training batch.
        loss: A Keras loss: a name (``"sparse_categorical_crossentropy"``), a function
            ``fn(y_true, y_pred)`` or a ``tf_keras.losses.Loss`` instance.
        optimizer: A legacy optimizer, ``tf_keras.optimizers.legacy.SGD(...)``,
            ``...legacy.Adam(...)`` and friends (graph mode needs ``get_updates``).
        metrics: Keras metric names or functions: ``"accuracy"`` (resolved from the loss
            and shapes, as ``compile`` does), ``"sparse_categorical_accuracy"``,
            ``"mae"``, ``tf_keras.metrics.top_k_categorical_accuracy``... Each becomes a
            fetch named as given (a function by its ``__name__``).
        outputs: The model's output tensor for the training batch; by default
            ``model.outputs[0]``.
        sample_weight: A tensor of the training batch with a weight per example
            (shape ``(batch,)``), for example the third column of
            ``read_batches(..., as_tuple=("x", "y", "w"))``, as ``fit(sample_weight=...)``.
        class_weight: ``{class index: weight}``, as ``fit(class_weight=...)``: each
            example is weighted by its label's class (the label for sparse labels, the
            argmax for one-hot ones), times ``sample_weight`` when both are given. A
            label whose class is not in the dict fails the step with an
            ``InvalidArgumentError`` naming the class (``fit`` weighs it 1.0).
        weighted_metrics: Metrics weighted by the sample and class weights, as
            ``compile(weighted_metrics=...)``: each fetch is the batch's weighted mean,
            named as given (``weighted_<name>`` when ``metrics`` has that name too),
            and its epoch value the weighted mean over the epoch's examples (each
            batch counts for its weight, not its size). ``metrics`` stay unweighted,
            as in ``fit``.

    Returns:
        A :class:`KerasTrainingGraph`.

    Raises:
        TypeError: If an argument has the wrong type (a non-legacy optimizer, a stateful
            ``Metric`` object, a non-tf_keras model, a model with several outputs).
        ValueError: If a loss or metric name is unknown, the model is not in graph mode,
            or ``class_weight`` is not a dict from class index to a weight >= 0.

    Examples:
        >>> image, label = queue_batch(...)  # doctest: +SKIP
        >>> model = tf_keras.Model(inp := tf_keras.Input(tensor=image), head(inp))  # doctest: +SKIP
        >>> training = keras_training_graph(  # doctest: +SKIP
        ...     model, label, loss="sparse_categorical_crossentropy",
        ...     optimizer=tf_keras.optimizers.legacy.SGD(0.1), metrics=["accuracy"])
        >>> SessionLoop(training).run(epochs=5)  # doctest: +SKIP
    """
    outputs = _checked_outputs(model, labels, optimizer, outputs)
    if sample_weight is not None:
        _check_tensor(sample_weight, "sample_weight")
    class_weight = check_class_weight(class_weight)
    graph = outputs.graph
    with graph.as_default():
        loss_fn = _get_loss(loss)
        metric_fns = _get_metrics(metrics, loss_fn, labels, outputs)
        weighted_fns = _weighted_metrics(weighted_metrics, metric_fns, loss_fn, labels, outputs)
        weights = _example_weights(sample_weight, class_weight, labels)
        inputs = list(model.inputs or [])
        regularization = list(model.get_losses_for(None)) + list(model.get_losses_for(inputs))
        fetches, fetch_weights = _loss_and_metrics(
            loss_fn, metric_fns, labels, outputs, regularization, weights, weighted_fns
        )
        updates = optimizer.get_updates(fetches["loss"], model.trainable_weights)
        model_updates = list(model.get_updates_for(None)) + list(model.get_updates_for(inputs))
        train_op = tf.group(*updates, *model_updates, name="keras_train_op")
        if getattr(model, "optimizer", None) is None:
            model.optimizer = optimizer
        hooks: list[Hook] = []
        learning_phase = tf_keras.backend.learning_phase()
        if not isinstance(learning_phase, int) and _depends_on(train_op, learning_phase.op):
            hooks.append(_LearningPhaseHook(learning_phase))
        batch_size = tf.shape(labels)[0]
    return KerasTrainingGraph(
        train_op=train_op,
        fetches=fetches,
        batch_size=batch_size,
        model=model,
        optimizer=optimizer,
        loss_fn=loss_fn,
        metric_fns=metric_fns,
        hooks=hooks,
        weighted_metric_fns=weighted_fns,
        fetch_weights=fetch_weights,
    )


def _example_weights(
    sample_weight: Any, class_weight: Mapping[int, float] | None, labels: Any
) -> Any:
    """The training examples' weights (a float32 tensor), or ``None`` for unweighted."""
    if class_weight is None:
        if sample_weight is None:
            return None
        return tf.cast(sample_weight, tf.float32)
    return combined_weights(sample_weight, class_weights(labels, class_weight))


def _weighted_metrics(
    weighted_metrics: Sequence[Any],
    metric_fns: dict[str, Callable[..., Any]],
    loss_fn: Any,
    labels: Any,
    outputs: Any,
) -> dict[str, Callable[..., Any]]:
    """``weighted_metrics`` by fetch name: ``weighted_<name>`` when ``metrics`` has it."""
    found = _get_metrics(weighted_metrics, loss_fn, labels, outputs, "weighted_metrics")
    result = {}
    for name, fn in found.items():
        fetch = f"weighted_{name}" if name in metric_fns else name
        if fetch in metric_fns or fetch in result:
            raise ValueError(
                "Expected unique metric names across `metrics` and `weighted_metrics`. "
                f"Received: name={fetch!r}"
            )
        result[fetch] = fn
    return result


def _checked_outputs(model: Any, labels: Any, optimizer: Any, outputs: Any) -> Any:
    """Check the model, labels and optimizer; the model's output tensor, in graph mode."""
    if not isinstance(model, tf_keras.Model):
        raise TypeError(
            f"Expected `model` to be a tf_keras.Model. Received: model={model!r} "
            f"of type {type(model).__name__}"
        )
    _check_tensor(labels, "labels")
    if not isinstance(optimizer, tf_keras.optimizers.legacy.Optimizer):
        raise TypeError(
            "Expected `optimizer` to be a legacy tf_keras optimizer such as "
            "tf_keras.optimizers.legacy.SGD(0.01) or tf_keras.optimizers.legacy.Adam() "
            "(graph mode needs `get_updates`, which the new optimizers lack). "
            f"Received: optimizer={optimizer!r}"
        )
    if outputs is None:
        if len(model.outputs) != 1:
            raise TypeError(
                "Expected `model` to have a single output (or pass `outputs`). "
                f"Received: model={model!r} with {len(model.outputs)} outputs"
            )
        outputs = model.outputs[0]
    _check_tensor(outputs, "outputs")
    if getattr(outputs, "graph", None) is None or tf.executing_eagerly():
        raise ValueError(
            expected(
                "model",
                "a model in graph mode (build it and call keras_training_graph inside "
                "`with tf.Graph().as_default():`), not an eager one",
                model,
            )
        )
    return outputs


def _check_tensor(value: Any, name: str) -> None:
    if not isinstance(value, (tf.Tensor, tf.Variable)):
        raise TypeError(expected(name, "a tensor", value))


def _get_loss(loss: Any) -> Callable[..., Any]:
    if not (isinstance(loss, str) or callable(loss)):
        raise TypeError(
            "Expected `loss` to be a Keras loss name, a function (y_true, y_pred) or a "
            f"tf_keras.losses.Loss. Received: loss={loss!r}"
        )
    try:
        fn = tf_keras.losses.get(loss)
    except ValueError:
        fn = None
    if not callable(fn):
        raise ValueError(
            "Expected `loss` to be a Keras loss name such as 'sparse_categorical_crossentropy'. "
            f"Received: loss={loss!r}"
        )
    return fn


def _loss_name(loss_fn: Any) -> str:
    """Lower-case names of a loss function or ``Loss`` object (and its wrapped ``fn``)."""
    fn = getattr(loss_fn, "fn", loss_fn)  # LossFunctionWrapper keeps its function
    return f"{getattr(fn, '__name__', '')} {type(loss_fn).__name__}".lower()


def _get_metrics(
    metrics: Sequence[Any], loss_fn: Any, labels: Any, outputs: Any, arg: str = "metrics"
) -> dict[str, Callable[..., Any]]:
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, Sequence):
        raise TypeError(
            f"Expected `{arg}` to be a list of Keras metric names or functions. "
            f"Received: {arg}={metrics!r}"
        )
    result: dict[str, Callable[..., Any]] = {}
    for i, metric in enumerate(metrics):
        fn: Any
        if isinstance(metric, tf_keras.metrics.Metric):
            raise TypeError(
                f"Expected `{arg}[{i}]` to be a metric name or function (stateful "
                "tf_keras.metrics.Metric objects never reset between epochs here; pass "
                f"the name, e.g. 'sparse_categorical_accuracy'). Received: {arg}[{i}]="
                f"{metric!r}"
            )
        if isinstance(metric, str):
            name = metric
            if metric in _ACCURACY:
                fn = _accuracy_for(loss_fn, labels, outputs)
            else:
                try:
                    fn = tf_keras.metrics.get(metric)
                except ValueError:
                    fn = None
                if not callable(fn):
                    raise ValueError(
                        f"Expected `{arg}[{i}]` to be a Keras metric name such as "
                        f"'accuracy' or 'mae'. Received: {arg}[{i}]={metric!r}"
                    )
        elif callable(metric):
            fn, name = metric, str(getattr(metric, "__name__", f"metric_{i}"))
        else:
            raise TypeError(
                f"Expected `{arg}[{i}]` to be a metric name or function. "
                f"Received: {arg}[{i}]={metric!r}"
            )
        if name == "loss" or name in result:
            raise ValueError(
                f"Expected unique metric names other than 'loss'. Received: name={name!r}"
            )
        result[name] = fn
    return result


def _accuracy_for(loss_fn: Any, labels: Any, outputs: Any) -> Callable[..., Any]:
    """Pick the accuracy ``compile`` would pick for ``metrics=["accuracy"]``."""
    name = _loss_name(loss_fn)
    if "binary_crossentropy" in name or outputs.shape[-1] == 1:
        return tf_keras.metrics.binary_accuracy
    if "sparse_categorical" in name or "sparsecategorical" in name:
        return tf_keras.metrics.sparse_categorical_accuracy
    if "categorical" in name:
        return tf_keras.metrics.categorical_accuracy
    if labels.shape.rank is not None and labels.shape.rank < outputs.shape.rank:
        return tf_keras.metrics.sparse_categorical_accuracy
    return tf_keras.metrics.categorical_accuracy


def _loss_and_metrics(
    loss_fn: Callable[..., Any],
    metric_fns: dict[str, Callable[..., Any]],
    labels: Any,
    outputs: Any,
    regularization: list[Any],
    weights: Any = None,
    weighted_fns: dict[str, Callable[..., Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loss and metric fetches, and the weights of those that are weighted means.

    With ``weights``, weighted as ``fit`` weighs them: the loss is
    ``sum(weight * loss) / number of losses`` (``SUM_OVER_BATCH_SIZE``, a ``Loss``
    object's own reduction), averaged over an epoch by batch size as ``fit`` does;
    ``metric_fns`` are plain means and ``weighted_fns`` weighted means,
    ``sum(weight * value) / sum(weight)``, whose epoch mean weighs each batch by its
    ``sum(weight)`` (the second dict), as ``fit``'s metrics accumulate both sums.
    """
    if weights is None:
        loss = tf.reduce_mean(loss_fn(labels, outputs))
    elif isinstance(loss_fn, tf_keras.losses.Loss):
        loss = tf.reduce_mean(loss_fn(labels, outputs, sample_weight=weights))
    else:
        losses = loss_fn(labels, outputs)
        weighted = losses * _broadcast(weights, losses)
        loss = tf.reduce_sum(weighted) / tf.cast(tf.size(weighted), weighted.dtype)
    if regularization:
        loss = loss + tf.add_n(regularization)
    fetches = {"loss": loss}
    fetch_weights = {}
    for name, fn in metric_fns.items():
        fetches[name] = tf.reduce_mean(tf.cast(fn(labels, outputs), tf.float32))
    for name, fn in (weighted_fns or {}).items():
        values = tf.cast(fn(labels, outputs), tf.float32)
        if weights is None:
            fetches[name] = tf.reduce_mean(values)
            continue
        w = _broadcast(weights, values)
        fetch_weights[name] = tf.reduce_sum(w)
        fetches[name] = tf.math.divide_no_nan(tf.reduce_sum(values * w), fetch_weights[name])
    return fetches, fetch_weights


def _broadcast(weights: Any, values: Any) -> Any:
    """``weights`` in ``values``' dtype, broadcast to its shape as Keras' weighting does.

    A ``(batch, 1)`` weight of ``(batch,)`` values is squeezed; a ``(batch,)`` weight of
    ``(batch, ...)`` values gets trailing axes.
    """
    weights = tf.cast(weights, values.dtype)
    rank, values_rank = weights.shape.rank, values.shape.rank
    if rank is not None and values_rank is not None:
        if rank == values_rank + 1 and weights.shape[-1] == 1:
            weights = tf.squeeze(weights, axis=-1)
        for _ in range(values_rank - weights.shape.rank):
            weights = tf.expand_dims(weights, axis=-1)
    return tf.broadcast_to(weights, tf.shape(values))
