"""The public names: each listed once, each importable from the top-level package."""

from __future__ import annotations

import pytest

import tfr_hooks


def test_every_public_name_resolves_and_is_listed_once() -> None:
    assert len(tfr_hooks.__all__) == len(set(tfr_hooks.__all__))
    assert set(tfr_hooks.__all__) == set(tfr_hooks._PUBLIC) | {"__version__"}
    for name in tfr_hooks._PUBLIC:
        value = getattr(tfr_hooks, name)
        assert value is not None
        if not name[0].isupper() or name == "tfrecord":
            continue
        assert value.__name__ == name  # a class of that name, not a stand-in


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        tfr_hooks.NoSuchThing  # noqa: B018


def test_the_top_level_surface_is_pinned() -> None:
    """One name per concept: the factories users call, not their classes too."""
    assert sorted(tfr_hooks.__all__) == sorted(
        [
            "Hook",
            "LoopState",
            "SessionLoop",
            "Validation",
            "hooked_session",
            "QueueRunnerHook",
            "tfrecord",
            "KerasCallbacks",
            "keras_training_graph",
            "TensorBoardLogger",
            "FunctionLoop",
            "StopOnSignal",
            "EpochCheckpoint",
            "PreemptionCheckpoint",
            "Preempted",
            "DataErrorHook",
            "distribute",
            "__version__",
        ]
    )
    # the classes behind the factories stay importable from their modules, for type hints
    from tfr_hooks.graph.hooked_session import HookedSession
    from tfr_hooks.graph.keras_graph import KerasTrainingGraph

    assert HookedSession.__name__ == "HookedSession"
    assert KerasTrainingGraph.__name__ == "KerasTrainingGraph"
    for name in ("HookedSession", "KerasTrainingGraph"):
        with pytest.raises(AttributeError):
            getattr(tfr_hooks, name)


def test_distribute_holds_what_a_multi_worker_user_needs() -> None:
    from tfr_hooks import distribute

    assert sorted(distribute.__all__) == [
        "LostWorkerHook",
        "TaskInfo",
        "WorkerLostError",
        "current_task",
    ]
    for name in distribute.__all__:
        assert getattr(distribute, name).__module__.startswith("tfr_hooks.")
    # no re-exports of the sharding policy's names, nor test helpers
    for name in ("loopback_cluster", "SHARED_SEED", "check_shard", "shard_dataset"):
        assert not hasattr(distribute, name), name


def test_tfrecord_surface_is_unchanged_by_the_sidecar_module() -> None:
    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.schema import sidecar

    assert tfrecord.SCHEMA_FILENAME == "schema.json"
    assert tfrecord.load_schema is sidecar.load_schema
    assert "Sidecar" not in tfrecord.__all__
