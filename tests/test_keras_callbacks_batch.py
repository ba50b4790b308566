"""KerasCallbacks at a training batch: only callbacks that act on a batch get a call.

``fit`` at ``steps_per_execution=1`` runs the callbacks after every step; the hook keeps
that cost down by leaving out callbacks whose batch methods are Keras' no-ops (the
benchmark's "time in callbacks <= fit's + 1 point"). The calls are counted with a
profile function on the Keras base class's code (no mock, no clock).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tensorflow as tf

from helpers import TRAIN, keras_classifier
from tfr_hooks import FunctionLoop, KerasCallbacks

STEPS = 4  # TRAIN holds 96 examples: 4 batches of 24


@contextmanager
def counting(*functions: Any) -> Iterator[dict[str, int]]:
    """Count the calls of ``functions`` (plain Python functions) in this thread."""
    codes = {function.__code__: function.__qualname__ for function in functions}
    counts = dict.fromkeys(codes.values(), 0)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes:
            counts[codes[frame.f_code]] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield counts
    finally:
        sys.setprofile(previous)


def _run(callbacks: list[Any], model: Any) -> None:
    data = tf.data.Dataset.from_tensor_slices(TRAIN).batch(24)
    loop = FunctionLoop(data, model=model, hooks=[KerasCallbacks(callbacks, model)])
    loop.run(epochs=2)


def test_callbacks_without_batch_methods_get_no_call_per_step() -> None:
    import keras

    base = keras.callbacks.Callback

    class EpochsOnly(base):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
            self.epochs = getattr(self, "epochs", 0) + 1

    model = keras_classifier()
    epochs_only = EpochsOnly()
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=10)  # epoch methods only
    with counting(
        base.on_train_batch_begin,
        base.on_train_batch_end,
        base.on_batch_begin,
        base.on_batch_end,
    ) as counts:
        _run([epochs_only, stop], model)  # with the History the hook adds
    assert epochs_only.epochs == 2
    assert counts == dict.fromkeys(counts, 0)  # no Keras no-op ran at a batch


def test_batch_overrides_still_get_every_step_with_fit_logs() -> None:
    import keras

    class Legacy(keras.callbacks.Callback):  # type: ignore[misc]
        """The old names: reached through the base class's on_train_batch_*."""

        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, int, dict[str, float]]] = []

        def on_batch_begin(self, batch: int, logs: dict[str, float] | None = None) -> None:
            self.calls.append(("begin", batch, dict(logs or {})))

        def on_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
            self.calls.append(("end", batch, dict(logs or {})))

    ends: list[tuple[int, dict[str, float]]] = []
    lam = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: ends.append((batch, dict(logs)))
    )
    ours, fits = Legacy(), Legacy()
    _run([ours, lam], keras_classifier())
    data = tf.data.Dataset.from_tensor_slices(TRAIN).batch(24)
    keras_classifier().fit(data, epochs=2, verbose=0, callbacks=[fits], shuffle=False)
    assert [(kind, batch) for kind, batch, _ in ours.calls] == [
        (kind, batch) for kind, batch, _ in fits.calls
    ]
    assert len(ours.calls) == 2 * 2 * STEPS
    for (kind, _, got), (_, _, want) in zip(ours.calls, fits.calls, strict=True):
        assert sorted(got) == sorted(want), kind
        assert all(isinstance(value, float) for value in got.values())
    assert [batch for batch, _ in ends] == list(range(STEPS)) * 2
    assert [logs for _, logs in ends] == [logs for kind, _, logs in ours.calls if kind == "end"]
    assert all(sorted(logs) == ["accuracy", "loss"] for _, logs in ends)
