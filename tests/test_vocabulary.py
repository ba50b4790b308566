"""One vocabulary: a concept has one name, one meaning and one default everywhere.

A user moving from ``read_batches`` to ``dataset``, or from ``SessionLoop`` to
``FunctionLoop``, changes the function's name and nothing else; these signature checks
keep it so.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

import tfr_hooks
from tfr_hooks import tfrecord

#: the names users' scripts use, each an option of every reader (issue 44)
READER_OPTIONS = (
    "schema",
    "split",
    "shuffle_buffer",
    "shuffle",
    "seed",
    "num_epochs",
    "drop_remainder",
    "map_fn",
    "batch_map_fn",
    "as_tuple",
    "in_memory",
    "pad_to",
    "bucket_boundaries",
    "bucket_by",
    "service",
    "max_corrupt_records",
)
#: the knobs most reads never touch: fields of ReadConfig, no longer reader keywords
READ_CONFIG_FIELDS = (
    "num_parallel_reads",
    "deterministic",
    "prefetch",
    "autotune",
    "memory_budget",
    "compression",
    "decode",
    "padding_values",
    "shard",
    "capacity",
    "name",
    "bucket_pool",
)
#: each reader's own parameters beyond files, batch_size and the shared options
READERS = {
    tfrecord.dataset: (),
    tfrecord.source: (),
    tfrecord.read_batches: ("pipeline",),
}
#: what a user sees of a reader at most: its parameters plus the shared options (18;
#: read_batches also has pipeline, 19), so that the positions issue's shuffle fits in 20;
#: issue 54's weights= (its spelling is the contract) makes 21 until the deprecated
#: shuffle_buffer goes
MOST_PARAMETERS = 21
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


def test_the_readers_share_one_declaration_of_their_options() -> None:
    from tfr_hooks.tfrecord.pipelines.options import ReadArgs, Unpack

    for reader, own in READERS.items():
        parameters = _parameters(reader)
        names = list(parameters)
        assert names[:2] == ["files", "batch_size"], reader.__name__
        options = parameters[names[-1]]
        assert options.kind is inspect.Parameter.VAR_KEYWORD, reader.__name__
        # the one declaration, under its own name in the reader's module
        assert options.annotation == "Unpack[ReadArgs]", reader.__name__
        assert reader.__globals__["ReadArgs"] is ReadArgs, reader.__name__
        assert reader.__globals__["Unpack"] is Unpack, reader.__name__
        assert tuple(names[2:-1]) == own, f"{reader.__name__} grew its own {names[2:-1]}"
        seen = len(names) - 1 + len(ReadArgs.__annotations__)
        assert seen <= MOST_PARAMETERS, f"{reader.__name__}: {seen} parameters"
    assert set(READER_OPTIONS) < set(ReadArgs.__annotations__)


def test_each_option_is_documented_once_with_one_default() -> None:
    from tfr_hooks.tfrecord.pipelines.options import ReadArgs, ReadConfig, ReadOptions

    for name in ReadArgs.__annotations__:
        assert f"{name}:" in (ReadArgs.__doc__ or ""), name
    fields = {f.name: f for f in dataclasses.fields(ReadConfig)}
    assert tuple(fields) == READ_CONFIG_FIELDS
    for name in fields:
        assert f"{name}:" in (ReadConfig.__doc__ or ""), name
    defaults = ReadOptions(batch_size=1)
    assert (defaults.shuffle_buffer, defaults.num_epochs, defaults.drop_remainder) == (0, 1, False)
    assert (defaults.in_memory, defaults.service, defaults.max_corrupt_records) == (False, None, 0)
    for reader in READERS:  # the docstring points at the one declaration
        assert "ReadArgs" in (reader.__doc__ or ""), reader.__name__


@pytest.mark.parametrize("reader", list(READERS), ids=lambda r: r.__name__)
def test_a_read_config_knob_given_to_a_reader_names_its_new_spelling(reader, tmp_path) -> None:
    import tensorflow as tf

    for name in READ_CONFIG_FIELDS:
        with (
            tf.Graph().as_default(),
            pytest.raises(TypeError, match=rf"read_config=ReadConfig\({name}="),
        ):
            reader(str(tmp_path), 8, **{name: None})


@pytest.mark.parametrize("gone", ["min_after_dequeue", "allow_smaller_final_batch", "num_threads"])
def test_read_batches_has_no_second_name_for_a_concept(gone: str) -> None:
    from tfr_hooks.tfrecord.pipelines.options import ReadArgs

    for reader in READERS:
        assert gone not in _parameters(reader)
    assert gone not in ReadArgs.__annotations__


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
