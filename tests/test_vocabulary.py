"""One vocabulary: a concept has one name, one meaning and one default everywhere.

A user moving from ``read_batches`` to ``dataset``, or from ``SessionLoop`` to
``FunctionLoop``, changes the function's name and nothing else; these signature checks
keep it so.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import tfr_hooks
from tfr_hooks import tfrecord

READER_ARGUMENTS = (
    "shuffle_buffer",
    "seed",
    "drop_remainder",
    "num_parallel_reads",
    "num_epochs",
    "in_memory",
    "memory_budget",
    "schema",
    "as_tuple",
    "compression",
    "decode",
    "map_fn",
    "batch_map_fn",
    "service",
)
LOOP_ARGUMENTS = (
    "data",
    "hooks",
    "steps_per_epoch",
    "handle_signals",
    "measure_input",
    "service_timeout",
)
RUN_ARGUMENTS = (
    "epochs",
    "validation_data",
    "validation_steps",
    "validation_freq",
    "initial_epoch",
)
#: names a directory argument of a public hook must not have
OTHER_DIRECTORY_NAMES = {"logdir", "directory", "checkpoint_dir", "dir", "output_dir"}


def _parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def _same(left: Callable[..., Any], right: Callable[..., Any], names: tuple[str, ...]) -> None:
    """``names`` are parameters of both, of the same kind and default."""
    ours, theirs = _parameters(left), _parameters(right)
    for name in names:
        assert name in ours, f"{left.__qualname__} has no parameter {name!r}"
        assert name in theirs, f"{right.__qualname__} has no parameter {name!r}"
        a, b = ours[name], theirs[name]
        assert a.default == b.default, (
            f"{name}: default {a.default!r} in {left.__qualname__}, "
            f"{b.default!r} in {right.__qualname__}"
        )
        assert a.kind == b.kind, (
            f"{name}: {a.kind.description} in {left.__qualname__}, "
            f"{b.kind.description} in {right.__qualname__}"
        )


def test_the_readers_share_names_and_defaults() -> None:
    _same(tfrecord.dataset, tfrecord.read_batches, READER_ARGUMENTS)
    assert _parameters(tfrecord.read_batches)["shuffle_buffer"].default == 0
    assert _parameters(tfrecord.read_batches)["num_epochs"].default == 1
    assert _parameters(tfrecord.read_batches)["drop_remainder"].default is False


@pytest.mark.parametrize(
    "gone", ["shuffle", "min_after_dequeue", "allow_smaller_final_batch", "num_threads"]
)
def test_read_batches_has_no_second_name_for_a_concept(gone: str) -> None:
    assert gone not in _parameters(tfrecord.read_batches)
    assert gone not in _parameters(tfrecord.dataset)


def test_the_loops_share_names_and_defaults() -> None:
    shared = tuple(name for name in LOOP_ARGUMENTS if name != "data")
    _same(tfr_hooks.SessionLoop.__init__, tfr_hooks.FunctionLoop.__init__, shared)
    for loop in (tfr_hooks.SessionLoop, tfr_hooks.FunctionLoop):
        parameters = _parameters(loop.__init__)
        for name in shared:
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, (loop, name)
    # the input: FunctionLoop's first argument (its train step reads it); SessionLoop's
    # train op already reads its tensors, so there ``data`` is an optional keyword
    function_loop = _parameters(tfr_hooks.FunctionLoop.__init__)
    assert list(function_loop)[1] == "data"
    assert function_loop["data"].default is inspect.Parameter.empty
    session_loop = _parameters(tfr_hooks.SessionLoop.__init__)
    assert list(session_loop)[1:3] == ["train_op", "fetches"]
    assert session_loop["data"].kind is inspect.Parameter.KEYWORD_ONLY
    assert session_loop["data"].default is None


def test_the_loops_run_alike() -> None:
    _same(tfr_hooks.SessionLoop.run, tfr_hooks.FunctionLoop.run, RUN_ARGUMENTS)
    for loop in (tfr_hooks.SessionLoop, tfr_hooks.FunctionLoop):
        parameters = _parameters(loop.run)
        assert list(parameters)[:2] == ["self", "epochs"]
        for name in RUN_ARGUMENTS[1:]:
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, (loop, name)
    assert "validation" not in _parameters(tfr_hooks.SessionLoop.__init__)


def test_validation_leaves_how_often_and_how_long_to_run() -> None:
    validation = _parameters(tfr_hooks.Validation.__init__)
    assert "steps" not in validation and "freq" not in validation
    from tfr_hooks.graph.keras_graph import KerasTrainingGraph

    method = _parameters(KerasTrainingGraph.validation)
    assert "steps" not in method and "freq" not in method


def _public_hooks_and_loops() -> list[type]:
    """The public hooks (``Hook`` subclasses) and the two loops."""
    found: list[type] = [tfr_hooks.SessionLoop, tfr_hooks.FunctionLoop]
    for name in tfr_hooks.__all__:
        value = getattr(tfr_hooks, name)
        if inspect.isclass(value) and issubclass(value, tfr_hooks.Hook):
            found.append(value)
    return found


def test_every_directory_argument_is_log_dir() -> None:
    checked = []
    for cls in _public_hooks_and_loops():
        for name, parameter in _parameters(cls.__init__).items():
            annotation = str(parameter.annotation)
            if name in OTHER_DIRECTORY_NAMES or "PathLike" in annotation:
                checked.append((cls.__name__, name))
                assert name == "log_dir", f"{cls.__name__}({name}=...): call it log_dir"
    for cls in (
        tfr_hooks.EpochCheckpoint,
        tfr_hooks.TensorBoardLogger,
        tfr_hooks.PreemptionCheckpoint,
        tfr_hooks.SessionLoop,
    ):
        assert "log_dir" in _parameters(cls.__init__), cls
    assert checked  # the scan saw the directory arguments
