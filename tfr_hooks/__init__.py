"""tfr_hooks: session-hook training loops for Keras models fed straight from TFRecord tensors.

Public names are listed in ``_PUBLIC`` with the module that defines them and imported on
first use, so that ``import tfr_hooks`` (and the ``tfr-hooks`` command) can quiet
TensorFlow's start-up chatter before TensorFlow itself is imported.

Examples:
    >>> import tfr_hooks
    >>> loop = tfr_hooks.SessionLoop(train_op, fetches={"loss": loss})  # doctest: +SKIP
    >>> history = loop.run(epochs=3)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, imported eagerly for type checkers and IDEs
    from tfr_hooks import tfrecord
    from tfr_hooks.data_errors import DataErrorHook
    from tfr_hooks.graph.checkpoint import EpochCheckpoint
    from tfr_hooks.graph.hooked_session import hooked_session
    from tfr_hooks.graph.keras_graph import keras_training_graph
    from tfr_hooks.graph.queue_runners import QueueRunnerHook
    from tfr_hooks.graph.session_loop import SessionLoop
    from tfr_hooks.graph.validation import Validation
    from tfr_hooks.hooks import Hook, LoopState
    from tfr_hooks.keras_callbacks import KerasCallbacks
    from tfr_hooks.signals import StopOnSignal
    from tfr_hooks.tensorboard import TensorBoardLogger
    from tfr_hooks.tf2 import distribute
    from tfr_hooks.tf2.function_loop import FunctionLoop
    from tfr_hooks.tf2.preemption import Preempted, PreemptionCheckpoint

__version__ = "0.1.0"

# public name -> module that defines it (a module path alone for subpackages)
_PUBLIC: dict[str, str] = {
    "Hook": "tfr_hooks.hooks",
    "LoopState": "tfr_hooks.hooks",
    "SessionLoop": "tfr_hooks.graph.session_loop",
    "Validation": "tfr_hooks.graph.validation",
    "hooked_session": "tfr_hooks.graph.hooked_session",
    "QueueRunnerHook": "tfr_hooks.graph.queue_runners",
    "tfrecord": "tfr_hooks.tfrecord",
    "KerasCallbacks": "tfr_hooks.keras_callbacks",
    "keras_training_graph": "tfr_hooks.graph.keras_graph",
    "TensorBoardLogger": "tfr_hooks.tensorboard",
    "FunctionLoop": "tfr_hooks.tf2.function_loop",
    "StopOnSignal": "tfr_hooks.signals",
    "EpochCheckpoint": "tfr_hooks.graph.checkpoint",
    "PreemptionCheckpoint": "tfr_hooks.tf2.preemption",
    "Preempted": "tfr_hooks.tf2.preemption",
    "DataErrorHook": "tfr_hooks.data_errors",
    "distribute": "tfr_hooks.tf2.distribute",
}

# the public names that are modules, not names defined in one
_MODULES = {"tfrecord", "distribute"}

__all__ = [
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


def __getattr__(name: str) -> Any:
    module_name = _PUBLIC.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tfr_hooks' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if name in _MODULES else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
