"""``class_weight`` as ``model.fit`` means it: the lookup, and both loops against fit.

The parity tests train Keras 3's own ``model.fit(..., class_weight=...)`` and
``FunctionLoop(..., class_weight=...)`` from the same initial weights on the same
unshuffled TFRecords (written by a plain ``tf.io.TFRecordWriter``), one step per call on
both sides, and compare the final weights and the epoch logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfr_hooks import FunctionLoop, SessionLoop, keras_training_graph, tfrecord
from tfr_hooks.class_weight import check_class_weight, class_weights, weigh_batch

N_TRAIN, N_VAL, BATCH, CLASSES = 90, 40, 16, 3  # 5 full batches and one of 10
EPOCHS = 3
CLASS_WEIGHT = {0: 1.0, 1: 3.0, 2: 6.0}


def _data(n: int, seed: int) -> dict[str, np.ndarray]:
    """Imbalanced 3-class data: ``x`` (4 floats), ``y``, its one-hot, a weight ``w``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = rng.choice(CLASSES, size=n, p=[0.7, 0.2, 0.1]).astype(np.int64)
    w = rng.uniform(0.2, 2.0, size=n).astype(np.float32)
    return {"x": x, "y": y, "onehot": np.eye(CLASSES, dtype=np.float32)[y], "w": w}


def _write(path: Path, data: dict[str, np.ndarray]) -> Path:
    """The records, by a plain ``tf.io.TFRecordWriter`` (no schema sidecar)."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(len(data["y"])):
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=data["x"][i])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[data["y"][i]])),
                "onehot": tf.train.Feature(float_list=tf.train.FloatList(value=data["onehot"][i])),
                "w": tf.train.Feature(float_list=tf.train.FloatList(value=[data["w"][i]])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return path


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("class_weight")
    return {
        "train": _write(root / "train.tfrecord", _data(N_TRAIN, 0)),
        "val": _write(root / "val.tfrecord", _data(N_VAL, 1)),
    }


FEATURES = {
    "x": tf.io.FixedLenFeature([4], tf.float32),
    "y": tf.io.FixedLenFeature([], tf.int64),
    "onehot": tf.io.FixedLenFeature([CLASSES], tf.float32),
    "w": tf.io.FixedLenFeature([], tf.float32),
}


def _fit_batches(path: Path, columns: tuple[str, ...], times: dict[int, float] | None = None):  # type: ignore[no-untyped-def]
    """Keras' side: the records parsed with plain tf.data, unshuffled.

    With ``times``, the last column is ``w * times[y]`` (fit refuses ``class_weight``
    together with a sample-weight column, so its reference gets the product).
    """

    def parse(records: Any) -> Any:
        example = tf.io.parse_example(records, FEATURES)
        values = [example[c] for c in columns]
        if times is not None:
            table = tf.constant([times[c] for c in range(CLASSES)])
            values[-1] = values[-1] * tf.gather(table, example["y"])
        return tuple(values)

    return tf.data.TFRecordDataset(str(path)).batch(BATCH).map(parse)


def _model(loss: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=loss,
        weighted_metrics=["accuracy"],
        steps_per_execution=1,
    )
    return model


CASES = {
    # name: (the loop's columns, fit's columns, fit's class_weight, fit's product, loss)
    "sparse": (("x", "y"), ("x", "y"), CLASS_WEIGHT, None, "sparse_categorical_crossentropy"),
    "one-hot": (("x", "onehot"), ("x", "onehot"), CLASS_WEIGHT, None, "categorical_crossentropy"),
    "with sample_weight": (
        ("x", "y", "w"),
        ("x", "y", "w"),
        None,
        CLASS_WEIGHT,
        "sparse_categorical_crossentropy",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "steps_per_execution"),
    [("sparse", 1), ("one-hot", 1), ("with sample_weight", 1), ("sparse", "auto")],
)
def test_same_weights_and_logs_as_model_fit(
    records: dict[str, Path], case: str, steps_per_execution: int | str
) -> None:
    loop_columns, fit_columns, fit_class_weight, product, loss = CASES[case]
    reference = _model(loss)
    initial = reference.get_weights()
    history = reference.fit(
        _fit_batches(records["train"], fit_columns, product),
        validation_data=_fit_batches(records["val"], fit_columns[:2]),
        class_weight=fit_class_weight,
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
    ).history

    model = _model(loss)
    model.set_weights(initial)
    loop = FunctionLoop(
        tfrecord.dataset(str(records["train"]), BATCH, as_tuple=loop_columns),
        model=model,
        class_weight=CLASS_WEIGHT,
        steps_per_execution=steps_per_execution,
        handle_signals=False,
    )
    ours = loop.run(
        epochs=EPOCHS,
        validation_data=tfrecord.dataset(str(records["val"]), BATCH, as_tuple=loop_columns[:2]),
    )

    for theirs, mine in zip(reference.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    # the weights mattered: an unweighted step ends elsewhere
    assert not np.allclose(model.get_weights()[-1], initial[-1], atol=1e-3)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):  # validation: unweighted
        assert ours[key] == pytest.approx(history[key], rel=1e-5, abs=1e-6), key


@pytest.mark.slow
def test_class_weight_changes_training_and_validation_stays_unweighted(
    records: dict[str, Path],
) -> None:
    def run(class_weight: dict[int, float] | None) -> tuple[keras.Model, dict[str, Any]]:
        model = _model("sparse_categorical_crossentropy")
        loop = FunctionLoop(
            tfrecord.dataset(str(records["train"]), BATCH, as_tuple=("x", "y")),
            model=model,
            class_weight=class_weight,
            steps_per_execution=2,
            handle_signals=False,
        )
        val = tfrecord.dataset(str(records["val"]), BATCH, as_tuple=("x", "y"))
        return model, loop.run(epochs=1, validation_data=val)

    weighted, history = run(CLASS_WEIGHT)
    plain, _ = run(None)
    assert not np.allclose(weighted.get_weights()[-1], plain.get_weights()[-1], atol=1e-3)
    val = _fit_batches(records["val"], ("x", "y"))
    unweighted = weighted.evaluate(val, verbose=0, return_dict=True)
    assert history["val_loss"][-1] == pytest.approx(unweighted["loss"], rel=1e-5)
    table = tf.constant([CLASS_WEIGHT[c] for c in range(CLASSES)])
    val_weighted = val.map(lambda x, y: (x, y, tf.gather(table, y)))
    as_if_weighted = weighted.evaluate(val_weighted, verbose=0, return_dict=True)
    assert history["val_loss"][-1] != pytest.approx(as_if_weighted["loss"], rel=1e-3)


WEIGHTED = ["accuracy", "sparse_categorical_crossentropy"]


def _graph_mode_history(
    records: dict[str, Path], initial: list[np.ndarray]
) -> tuple[dict[str, list[Any]], list[np.ndarray]]:
    """SessionLoop on a tensor-fed tf_keras copy of ``_model``, from ``initial`` weights.

    Trained with the ``w`` column and ``CLASS_WEIGHT``, validated with the ``w`` column.
    """
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        train = v1.data.make_initializable_iterator(_fit_batches(records["train"], ("x", "y", "w")))
        val = v1.data.make_initializable_iterator(_fit_batches(records["val"], ("x", "y", "w")))
        x, y, w = train.get_next()
        inputs = tf_keras.Input(tensor=x)
        layers = [
            tf_keras.layers.Dense(
                units,
                activation=activation,
                kernel_initializer=tf_keras.initializers.Constant(kernel),
                bias_initializer=tf_keras.initializers.Constant(bias),
            )
            for units, activation, kernel, bias in (
                (8, "relu", *initial[:2]),
                (CLASSES, "softmax", *initial[2:]),
            )
        ]
        model = tf_keras.Model(inputs, layers[1](layers[0](inputs)))
        training = keras_training_graph(
            model,
            y,
            loss="sparse_categorical_crossentropy",
            optimizer=tf_keras.optimizers.legacy.SGD(0.1),
            metrics=["accuracy"],
            weighted_metrics=WEIGHTED,
            sample_weight=w,
            class_weight=CLASS_WEIGHT,
        )
        vx, vy, vw = val.get_next()
        validation = training.validation(vx, vy, initializers=[val.initializer], sample_weight=vw)
        loop = SessionLoop(training, initializers=[train.initializer], handle_signals=False)
        with v1.Session() as session:
            history = loop.run(EPOCHS, validation_data=validation, session=session)
            weights = session.run(model.weights)
    return history, weights


@pytest.mark.slow
def test_graph_mode_weighted_metrics_are_fit_s_epoch_values(records: dict[str, Path]) -> None:
    # batches of 16 with a last one of 10 (train) and 8 (validation): a batch's size and
    # its weight are not proportional, so an epoch mean by size differs from fit's
    reference = _model("sparse_categorical_crossentropy")
    reference.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        weighted_metrics=WEIGHTED,
        steps_per_execution=1,
    )
    initial = reference.get_weights()
    expected = reference.fit(
        _fit_batches(records["train"], ("x", "y", "w"), CLASS_WEIGHT),
        validation_data=_fit_batches(records["val"], ("x", "y", "w")),
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
    ).history
    ours, weights = _graph_mode_history(records, initial)

    for theirs, mine in zip(reference.get_weights(), weights, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    assert set(expected) == {
        f"{prefix}{name}"
        for prefix in ("", "val_")
        for name in ("loss", "accuracy", "weighted_accuracy", *WEIGHTED[1:])
    }
    for key in expected:  # each epoch, training and validation
        assert ours[key] == pytest.approx(expected[key], rel=0, abs=1e-6), key
    # the weights matter: the weighted accuracy is not the plain one
    assert ours["weighted_accuracy"] != pytest.approx(ours["accuracy"], abs=1e-3)
    assert ours["val_weighted_accuracy"] != pytest.approx(ours["val_accuracy"], abs=1e-3)


def test_arguments_are_checked() -> None:
    data = tf.data.Dataset.from_tensor_slices((np.zeros((4, 4), np.float32), [0, 1, 2, 0]))
    data = data.batch(2)
    model = _model("sparse_categorical_crossentropy")
    with pytest.raises(TypeError, match=r"Expected `class_weight` to be None or a dict .*"):
        FunctionLoop(data, model=model, class_weight=[1.0, 3.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"not empty\. Received: class_weight=\{\}"):
        FunctionLoop(data, model=model, class_weight={})
    with pytest.raises(ValueError, match=r"the key '1' is not a class index"):
        FunctionLoop(data, model=model, class_weight={0: 1.0, "1": 2.0})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"the weight of class 1 is -2\.0"):
        FunctionLoop(data, model=model, class_weight={0: 1.0, 1: -2.0})

    def step_fn(batch: Any) -> dict[str, Any]:
        return {"n": tf.constant(0.0)}

    with pytest.raises(
        ValueError, match=r"`class_weight` to be None with `step_fn`.*Received: class_weight="
    ):
        FunctionLoop(data, step_fn=step_fn, class_weight=CLASS_WEIGHT)

    inputs = keras.Input((4,))
    two = keras.Model(inputs, [keras.layers.Dense(3)(inputs), keras.layers.Dense(1)(inputs)])
    two.compile(optimizer="sgd", loss=["sparse_categorical_crossentropy", "mse"])
    with pytest.raises(
        ValueError, match=r"None for a model with several outputs \(2.*Received: class_weight="
    ):
        FunctionLoop(data, model=two, class_weight=CLASS_WEIGHT)


@pytest.mark.slow
def test_a_class_missing_from_the_dict_stops_the_step_naming_it() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, [0, 1, 0, 2, 4, 0])).batch(3)
    cw = {0: 1.0, 1: 2.0}
    model = _model("sparse_categorical_crossentropy")
    one_step = _model("sparse_categorical_crossentropy")  # the same initial weights
    FunctionLoop(data, model=one_step, class_weight=cw, steps_per_epoch=1).run(epochs=1)
    loop = FunctionLoop(data, model=model, class_weight=cw, steps_per_execution=1)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"(?s)weight for the class of every training label.*"
        r"Received: class_weight=\{0: 1.0, 1: 2.0\}; classes without a weight:\] \[2 4\]",
    ):
        loop.run(epochs=1)
    # the first batch (classes 0, 1, 0) trained; the second changed no weight nor metric
    for mine, theirs in zip(model.get_weights(), one_step.get_weights(), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-7)
    results = {k: float(v) for k, v in model.get_metrics_result().items()}
    expected = {k: float(v) for k, v in one_step.get_metrics_result().items()}
    assert results == pytest.approx(expected, rel=1e-6)


def test_a_batch_without_labels_is_refused_for_class_weight() -> None:
    data = tf.data.Dataset.from_tensor_slices(np.zeros((4, 4), np.float32)).batch(2)
    model = _model("sparse_categorical_crossentropy")
    loop = FunctionLoop(data, model=model, class_weight=CLASS_WEIGHT, steps_per_execution=1)
    with pytest.raises(ValueError, match=r"\(x, y\) or \(x, y, sample_weight\) tuples"):
        loop.run(epochs=1)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([2, 0, 1], [6.0, 1.0, 3.0]),  # sparse
        ([[2], [0], [1]], [6.0, 1.0, 3.0]),  # (batch, 1)
        ([1.9, 0.2, 1.0], [6.0, 1.0, 3.0]),  # float classes, rounded as Keras does
        ([[0.1, 0.2, 0.7], [1, 0, 0], [0, 1, 0]], [6.0, 1.0, 3.0]),  # one-hot: argmax
    ],
)
def test_the_class_weight_of_each_label(labels: Any, expected: list[float]) -> None:
    np.testing.assert_allclose(class_weights(tf.constant(labels), CLASS_WEIGHT), expected)


def test_class_weight_multiplies_the_sample_weight() -> None:
    _, _, w = weigh_batch((tf.zeros((3, 4)), tf.constant([2, 0, 1]), [0.5, 2.0, 1.0]), CLASS_WEIGHT)
    np.testing.assert_allclose(w, [3.0, 2.0, 3.0])
    _, _, w = weigh_batch((tf.zeros((2, 4)), tf.constant([1, 0]), [[0.5], [2.0]]), CLASS_WEIGHT)
    np.testing.assert_allclose(w, [[1.5], [2.0]])  # a (batch, 1) sample weight keeps its shape


def test_a_class_without_weight_names_the_class() -> None:
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"(?s)without a weight:\W+1[ ,]+-1[ ,]+7"
    ):
        class_weights(tf.constant([0, 1, 1, -1, 7, 2]), {0: 1.0, 2: 2.0})


def test_check_class_weight_takes_numpy_scalars() -> None:
    assert check_class_weight({np.int64(0): np.float32(0.5), 1: 2}) == {0: 0.5, 1: 2.0}
    assert check_class_weight(None) is None
    with pytest.raises(ValueError, match=r"the key True is not a class index"):
        check_class_weight({True: 1.0})
    with pytest.raises(ValueError, match=r"the weight of class 0 is nan"):
        check_class_weight({0: float("nan")})
