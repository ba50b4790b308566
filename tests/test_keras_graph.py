"""keras_training_graph: what model.compile would build, for a tensor-fed tf_keras model."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tfr_hooks
from helpers import TRAIN, VAL, batches, metrics

v1 = tf.compat.v1
SGD = tf_keras.optimizers.legacy.SGD


def tensor_fed(head_layers: list[tf_keras.layers.Layer], data=TRAIN):  # type: ignore[no-untyped-def]
    it = v1.data.make_initializable_iterator(batches(data))
    x, y = it.get_next()
    inputs = tf_keras.layers.Input(tensor=x)
    out = inputs
    for layer in head_layers:
        out = layer(out)
    return tf_keras.Model(inputs, out), y, it.initializer


def test_arguments_are_checked(graph: tf.Graph) -> None:
    model, y, _ = tensor_fed([tf_keras.layers.Dense(2, activation="softmax")])
    loss = "sparse_categorical_crossentropy"
    with pytest.raises(TypeError, match=r"legacy tf_keras optimizer .*Received: optimizer="):
        tfr_hooks.keras_training_graph(model, y, loss=loss, optimizer=tf_keras.optimizers.SGD())
    with pytest.raises(TypeError, match=r"stateful .*metrics\[0\]="):
        tfr_hooks.keras_training_graph(
            model, y, loss=loss, optimizer=SGD(), metrics=[tf_keras.metrics.Accuracy()]
        )
    with pytest.raises(ValueError, match=r"metrics\[1\]='nope'"):
        tfr_hooks.keras_training_graph(
            model, y, loss=loss, optimizer=SGD(), metrics=["mae", "nope"]
        )
    with pytest.raises(ValueError, match="Expected `loss` to be a Keras loss name"):
        tfr_hooks.keras_training_graph(model, y, loss="nope", optimizer=SGD())
    with pytest.raises(TypeError, match="Expected `labels` to be a tensor"):
        tfr_hooks.keras_training_graph(model, [1, 0], loss=loss, optimizer=SGD())


def test_loss_includes_regularization_and_metrics_match_numpy(graph: tf.Graph) -> None:
    dense = tf_keras.layers.Dense(2, activation="softmax", kernel_regularizer="l2")
    model, y, init = tensor_fed([dense])
    training = tfr_hooks.keras_training_graph(
        model,
        y,
        loss="sparse_categorical_crossentropy",
        optimizer=SGD(0.1),
        metrics=[
            "accuracy",
            "sparse_categorical_accuracy",
            tf_keras.metrics.sparse_top_k_categorical_accuracy,
        ],
    )
    assert list(training.fetches) == [
        "loss", "accuracy", "sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy"
    ]  # fmt: skip
    assert model.optimizer is training.optimizer  # for LR callbacks
    with v1.Session() as session:
        session.run([v1.global_variables_initializer(), init])
        kernel, bias = session.run(dense.weights)
        values = session.run(training.fetches)
    x, labels = TRAIN[0][:24], TRAIN[1][:24]
    logits = x @ kernel + bias
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    data_loss = -np.log(probs[np.arange(24), labels]).mean()
    assert values["loss"] == pytest.approx(data_loss + 0.01 * (kernel**2).sum(), rel=1e-5)
    accuracy = (probs.argmax(1) == labels).mean()
    assert values["accuracy"] == values["sparse_categorical_accuracy"] == pytest.approx(accuracy)
    assert values["sparse_top_k_categorical_accuracy"] == 1.0  # 2 classes, top 5


def test_accuracy_follows_the_loss_like_compile(graph: tf.Graph) -> None:
    model, y, init = tensor_fed([tf_keras.layers.Dense(1, activation="sigmoid")])
    labels = tf.cast(tf.reshape(y, (-1, 1)), tf.float32)
    training = tfr_hooks.keras_training_graph(
        model, labels, loss="binary_crossentropy", optimizer=SGD(), metrics=["acc"]
    )
    with v1.Session() as session:
        session.run([v1.global_variables_initializer(), init])
        probs, acc = session.run([model.outputs[0], training.fetches["acc"]])
    assert acc == pytest.approx(((probs[:, 0] > 0.5) == TRAIN[1][:24]).mean())


@pytest.mark.slow
def test_update_ops_run_in_training_mode_and_validation_shares_weights(graph: tf.Graph) -> None:
    bn = tf_keras.layers.BatchNormalization()
    model, y, init = tensor_fed(
        [
            tf_keras.layers.Dense(3),
            bn,
            tf_keras.layers.Dropout(0.5),
            tf_keras.layers.Dense(2, activation="softmax"),
        ]
    )
    training = tfr_hooks.keras_training_graph(
        model, y, loss="sparse_categorical_crossentropy", optimizer=SGD(0.1), metrics=["accuracy"]
    )
    val_it = v1.data.make_initializable_iterator(batches(VAL))
    vx, vy = val_it.get_next()
    validation = training.validation(vx, vy, initializers=[val_it.initializer])
    loop = tfr_hooks.SessionLoop(training, initializers=[init])
    with v1.Session() as session:
        history = loop.run(2, validation_data=validation, session=session)
        moving_mean = session.run(bn.moving_mean)
    assert set(metrics(history)) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    # BatchNorm's moving averages moved: its update ops ran, in training mode (the
    # learning phase is fed 1 to training steps, as fit does)
    assert np.abs(moving_mean).max() > 1e-3
    assert [type(h).__name__ for h in training.hooks] == ["_LearningPhaseHook"]


def test_no_learning_phase_feed_for_a_model_that_does_not_use_it(graph: tf.Graph) -> None:
    model, y, _ = tensor_fed([tf_keras.layers.Dense(2, activation="softmax")])
    training = tfr_hooks.keras_training_graph(
        model, y, loss="sparse_categorical_crossentropy", optimizer=SGD(0.1)
    )
    # nothing to feed, so the loop's steps can take its prepared-callable path
    assert training.hooks == []


WEIGHTS = np.random.default_rng(3).uniform(0.2, 2.0, size=len(TRAIN[1])).astype(np.float32)
CLASS_WEIGHT = {0: 1.0, 1: 4.0}


@pytest.mark.parametrize("weighting", ["sample_weight", "class_weight", "both"])
def test_first_step_loss_is_the_weighted_mean_and_the_step_descends_it(
    graph: tf.Graph, weighting: str
) -> None:
    it = v1.data.make_initializable_iterator(batches((*TRAIN, WEIGHTS)))  # type: ignore[arg-type]
    x, y, w = it.get_next()
    inputs = tf_keras.layers.Input(tensor=x)
    dense = tf_keras.layers.Dense(2, activation="softmax")
    model = tf_keras.Model(inputs, dense(inputs))
    training = tfr_hooks.keras_training_graph(
        model,
        y,
        loss="sparse_categorical_crossentropy",
        optimizer=SGD(0.5),
        metrics=["accuracy"],
        weighted_metrics=["accuracy", "sparse_categorical_crossentropy"],
        sample_weight=None if weighting == "class_weight" else w,
        class_weight=None if weighting == "sample_weight" else CLASS_WEIGHT,
    )
    assert list(training.fetches) == [
        "loss", "accuracy", "weighted_accuracy", "sparse_categorical_crossentropy"
    ]  # fmt: skip
    with v1.Session() as session:
        session.run([v1.global_variables_initializer(), it.initializer])
        kernel, bias = session.run(dense.weights)
        _, values = session.run([training.train_op, training.fetches])
        new_kernel = session.run(dense.kernel)

    xs, labels = TRAIN[0][:24], TRAIN[1][:24]
    weights = np.ones(24, np.float32)
    if weighting != "class_weight":
        weights = weights * WEIGHTS[:24]
    if weighting != "sample_weight":
        weights = weights * np.array([CLASS_WEIGHT[int(c)] for c in labels], np.float32)
    logits = xs @ kernel + bias
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    losses = -np.log(probs[np.arange(24), labels])
    # tf_keras' fit: the sum of weight x loss over the batch size (SUM_OVER_BATCH_SIZE)
    assert values["loss"] == pytest.approx((weights * losses).sum() / 24, rel=1e-5)
    assert values["loss"] != pytest.approx(losses.mean(), rel=1e-3)
    # metrics stay unweighted and weighted_metrics are weighted means, as in fit
    correct = (probs.argmax(1) == labels).astype(np.float32)
    assert values["accuracy"] == pytest.approx(correct.mean())
    assert values["weighted_accuracy"] == pytest.approx((weights * correct).sum() / weights.sum())
    weighted_mean = (weights * losses).sum() / weights.sum()
    assert values["sparse_categorical_crossentropy"] == pytest.approx(weighted_mean, rel=1e-5)
    # the step descends the weighted loss: d/dlogits = weight x (p - onehot) / batch
    grad = xs.T @ (weights[:, None] * (probs - np.eye(2)[labels]) / 24)
    np.testing.assert_allclose(new_kernel, kernel - 0.5 * grad, rtol=1e-4, atol=1e-6)


def test_validation_stays_unweighted(graph: tf.Graph) -> None:
    model, y, init = tensor_fed([tf_keras.layers.Dense(2, activation="softmax")])
    training = tfr_hooks.keras_training_graph(
        model,
        y,
        loss="sparse_categorical_crossentropy",
        optimizer=SGD(0.1),
        weighted_metrics=["accuracy"],
        class_weight=CLASS_WEIGHT,
    )
    vx = tf.constant(VAL[0][:24])
    vy = tf.constant(VAL[1][:24])
    validation = training.validation(vx, vy)
    with v1.Session() as session:
        session.run([v1.global_variables_initializer(), init])
        kernel, bias = session.run(model.weights)
        values = session.run(validation.fetches)
    logits = VAL[0][:24] @ kernel + bias
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = VAL[1][:24]
    assert values["loss"] == pytest.approx(-np.log(probs[np.arange(24), labels]).mean(), rel=1e-5)
    assert values["accuracy"] == pytest.approx((probs.argmax(1) == labels).mean())


def test_epoch_value_of_a_weighted_metric_weighs_each_batch_by_its_weight(
    graph: tf.Graph,
) -> None:
    # 90 examples: batches of 24, 24, 24 and 18, whose weights are not proportional to
    # their sizes; a learning rate of 0 keeps the model, so the epoch value is the
    # weighted mean over all examples (fit's), not a mean of batch means by batch size
    n = 90
    data = (TRAIN[0][:n], TRAIN[1][:n], WEIGHTS[:n])
    it = v1.data.make_initializable_iterator(batches(data))  # type: ignore[arg-type]
    x, y, w = it.get_next()
    val_weights = WEIGHTS[::-1][: len(VAL[1])].copy()
    val_it = v1.data.make_initializable_iterator(batches((*VAL, val_weights)))  # type: ignore[arg-type]
    vx, vy, vw = val_it.get_next()
    inputs = tf_keras.layers.Input(tensor=x)
    dense = tf_keras.layers.Dense(2, activation="softmax")
    model = tf_keras.Model(inputs, dense(inputs))
    training = tfr_hooks.keras_training_graph(
        model,
        y,
        loss="sparse_categorical_crossentropy",
        optimizer=SGD(0.0),
        weighted_metrics=["accuracy"],
        sample_weight=w,
        class_weight=CLASS_WEIGHT,
    )
    validation = training.validation(vx, vy, initializers=[val_it.initializer], sample_weight=vw)
    loop = tfr_hooks.SessionLoop(training, initializers=[it.initializer], handle_signals=False)
    with v1.Session() as session:
        history = loop.run(1, validation_data=validation, session=session)
        kernel, bias = session.run(dense.weights)

    def weighted_accuracy(xs: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> float:
        correct = ((xs @ kernel + bias).argmax(1) == labels).astype(np.float64)
        return float((weights * correct).sum() / weights.sum())

    class_weights = np.array([CLASS_WEIGHT[int(c)] for c in data[1]])
    expected = weighted_accuracy(data[0], data[1], data[2] * class_weights)
    assert history["accuracy"] == [pytest.approx(expected, abs=1e-6)]
    expected = weighted_accuracy(*VAL, val_weights)
    assert history["val_accuracy"] == [pytest.approx(expected, abs=1e-6)]


def test_loss_objects_and_one_hot_labels_are_weighted_too(graph: tf.Graph) -> None:
    model, y, init = tensor_fed([tf_keras.layers.Dense(2, activation="softmax")])
    one_hot = tf.one_hot(y, 2)
    training = tfr_hooks.keras_training_graph(
        model,
        one_hot,
        loss=tf_keras.losses.CategoricalCrossentropy(),
        optimizer=SGD(0.1),
        class_weight=CLASS_WEIGHT,
    )
    with v1.Session() as session:
        session.run([v1.global_variables_initializer(), init])
        kernel, bias = session.run(model.weights)
        loss = session.run(training.fetches["loss"])
    xs, labels = TRAIN[0][:24], TRAIN[1][:24]
    logits = xs @ kernel + bias
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    weights = np.array([CLASS_WEIGHT[int(c)] for c in labels])
    expected = (weights * -np.log(probs[np.arange(24), labels])).sum() / 24
    assert loss == pytest.approx(expected, rel=1e-5)


def test_weighting_arguments_are_checked(graph: tf.Graph) -> None:
    model, y, init = tensor_fed([tf_keras.layers.Dense(2, activation="softmax")])
    loss = "sparse_categorical_crossentropy"
    with pytest.raises(TypeError, match=r"Expected `sample_weight` to be a tensor"):
        tfr_hooks.keras_training_graph(
            model, y, loss=loss, optimizer=SGD(), sample_weight=[1.0] * 24
        )
    with pytest.raises(TypeError, match=r"Expected `class_weight` to be None or a dict"):
        tfr_hooks.keras_training_graph(model, y, loss=loss, optimizer=SGD(), class_weight=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"the weight of class 1 is 'x'"):
        tfr_hooks.keras_training_graph(
            model,
            y,
            loss=loss,
            optimizer=SGD(),
            class_weight={0: 1.0, 1: "x"},  # type: ignore[dict-item]
        )
    with pytest.raises(ValueError, match=r"Received: weighted_metrics\[0\]='nope'"):
        tfr_hooks.keras_training_graph(
            model, y, loss=loss, optimizer=SGD(), weighted_metrics=["nope"]
        )
    # a class missing from the dict stops the step, naming it
    training = tfr_hooks.keras_training_graph(
        model, y, loss=loss, optimizer=SGD(), class_weight={0: 1.0}
    )
    with v1.Session() as session:
        session.run([v1.global_variables_initializer(), init])
        before = session.run(model.weights)
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"without a weight:\] \[1\]"):
            session.run(training.train_op)
        for old, new in zip(before, session.run(model.weights), strict=True):
            np.testing.assert_array_equal(old, new)
