"""A SessionLoop step's scalars fetched as one tensor (tfr_hooks.graph.packed_fetches)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from tfr_hooks.graph.packed_fetches import PackedFetches

v1 = tf.compat.v1


def test_one_fetch_runs_the_train_op_once_and_gives_each_value_as_the_dict_would() -> None:
    with tf.Graph().as_default():
        steps = tf.Variable(0, dtype=tf.int64)
        train_op = steps.assign_add(1).op
        # values that do not need the train op: only the pack makes it run
        loss = tf.constant(0.1, tf.float32) * tf.constant(2.0, tf.float32)
        scalars = {
            "logs": {"loss": loss, "accuracy": tf.constant(1 / 3, tf.float32)},
            "batch_size": tf.constant(2**40 + 1, tf.int64),  # exact in float64
            "input_wait": tf.constant(1e-7, tf.float64),
            "absent": None,
        }
        packed = PackedFetches(scalars, [train_op])
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            run = session.make_callable(packed.tensor)
            first, second = packed.unpack(run()), packed.unpack(run())
            timed = packed.unpack(session.run(packed.tensor, options=v1.RunOptions()))
            assert session.run(steps) == 3  # the train op ran once a step
    # every value a Python float equal to what session.run of the dict gives
    assert second == {
        "logs": {
            "loss": float(np.float32(0.1) * np.float32(2)),
            "accuracy": float(np.float32(1 / 3)),
        },
        "batch_size": float(2**40 + 1),
        "input_wait": 1e-7,
    }
    assert first == second == timed
    assert all(type(v) is float for v in [*second["logs"].values(), second["input_wait"]])


def test_a_value_not_known_to_be_a_scalar_is_not_packed() -> None:
    with tf.Graph().as_default():
        vector = v1.placeholder_with_default(tf.zeros([2]), [None])
        assert PackedFetches({"logs": {"v": vector}}, []).tensor is None
        assert PackedFetches({"batch_size": None}, []).tensor is None


class AsksEveryOtherStep(tfr_hooks.Hook):
    """Asks for the global step on odd steps: those steps fetch the structure, not the pack."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.steps = 0

    def before_run(self, run_context: Any) -> Any:
        self.steps += 1
        if self.steps % 2:
            return v1.train.SessionRunArgs(v1.train.get_global_step())
        return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.seen.append(run_values.results)


@pytest.mark.parametrize("asks", [False, True], ids=["packed", "mixed"])
def test_session_loop_means_are_the_same_whether_or_not_a_hook_asks_for_fetches(
    asks: bool,
) -> None:
    # 10 batches of 3 and one of 2 (32 examples): the last batch's weight counts
    values = np.arange(32, dtype=np.float32) / 7
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        it = v1.data.make_initializable_iterator(
            tf.data.Dataset.from_tensor_slices(values).batch(3)
        )
        batch = it.get_next()
        train_op = step.assign_add(
            tf.minimum(tf.size(batch, out_type=tf.int64), 1)
        ).op  # on a batch
        hooks = [AsksEveryOtherStep()] if asks else []
        loop = tfr_hooks.SessionLoop(
            train_op,
            fetches={"x": tf.reduce_mean(batch)},
            batch_size=tf.shape(batch)[0],
            initializers=[it.initializer],
            hooks=hooks,
        )
        with v1.Session() as session:
            history = loop.run(epochs=2, session=session)
            assert session.run(step) == 22  # the train op ran once a step
    expected = float(np.float32(np.float64(values).mean()))
    assert history["x"] == pytest.approx([expected, expected], rel=1e-6)
    assert loop.loop.epoch_examples == 32 and loop.loop.epoch_steps == 11
    if asks:
        # its fetch on the steps it asked, nothing on the others
        assert [r is None for r in hooks[0].seen[:4]] == [False, True, False, True]
