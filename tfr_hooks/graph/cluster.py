"""Graph mode on a ``tf.compat.v1.train.Server`` cluster: who initializes, who writes.

Between-graph replication as ``tf.compat.v1.train.MonitoredTrainingSession`` runs it:
every worker builds its own graph (its variables placed on the ``ps`` tasks by
``tf.compat.v1.train.replica_device_setter``) and opens a session on its own server.

* The chief creates its session with ``SessionManager.prepare_session``: it restores the
  global variables from the latest checkpoint of ``log_dir``, or initializes them.
* Every other worker waits with ``SessionManager.wait_for_session`` until the chief has
  initialized the global variables, and never initializes them itself.
* Every worker initializes its own local variables (the loop's running means, the epoch
  counters of queue inputs) and tables.
* Only the chief writes the shared files: :func:`drop_writers` removes the checkpoint
  and summary hooks from a non-chief's list.

:class:`~tfr_hooks.SessionLoop` uses this module when given a ``master``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.hooks import capabilities_of
from tfr_hooks.tf_private import saver_hook_checkpoint_dir

__all__ = [
    "DEFAULT_WAIT_FOR_CHIEF_SECS",
    "ClusterSession",
    "checkpoint_dir_of",
    "drop_writers",
    "is_writer",
    "loop_device",
    "worker_device",
    "warn_local_variables_on_ps",
]

logger = logging.getLogger(__name__)

_v1 = tf.compat.v1

#: How long a non-chief waits for the chief by default: ``MonitoredTrainingSession``'s.
DEFAULT_WAIT_FOR_CHIEF_SECS = 7200.0

# seconds between a waiting worker's checks (MonitoredTrainingSession waits 30)
_POLL_SECS = 1.0


def is_writer(hook: Any) -> bool:
    """Whether ``hook`` writes the run's shared files (checkpoints or events).

    A :class:`~tfr_hooks.Hook` that declares ``chief_only = True`` (the package's
    :class:`~tfr_hooks.TensorBoardLogger` and :class:`~tfr_hooks.EpochCheckpoint`), and
    the stock ``CheckpointSaverHook`` and ``SummarySaverHook``
    (see :func:`tfr_hooks.hooks.capabilities_of`).
    """
    return capabilities_of(hook).chief_only


def drop_writers(hooks: Sequence[Any], is_chief: bool) -> list[Any]:
    """``hooks`` without the writing hooks (see :func:`is_writer`) unless on the chief.

    Two workers writing one checkpoint or events directory corrupt it, so a non-chief
    worker leaves the writing to the chief. Logs the dropped hooks once, at INFO.

    Args:
        hooks: The hooks the user gave.
        is_chief: Whether this worker is the chief.

    Returns:
        The hooks to run on this worker, in their order.
    """
    if is_chief:
        return list(hooks)
    kept = [h for h in hooks if not is_writer(h)]
    dropped = [type(h).__name__ for h in hooks if is_writer(h)]
    if dropped:
        logger.info(
            "Not the chief: dropped the hooks writing shared files, left to the chief: %s",
            ", ".join(dropped),
        )
    return kept


def checkpoint_dir_of(hooks: Sequence[Any]) -> str | None:
    """The ``checkpoint_dir`` of the first stock ``CheckpointSaverHook`` in ``hooks``."""
    for hook in hooks:
        if isinstance(hook, _v1.train.CheckpointSaverHook):
            directory = saver_hook_checkpoint_dir(hook)
            if directory:
                return directory
    return None


def worker_device(graph: Any) -> str:
    """The device an op that is not a variable gets here: the worker's, under a setter.

    Under ``replica_device_setter(worker_device=...)`` that is ``worker_device``, under
    ``tf.device(d)`` it is ``d``, outside any device scope ``""`` (the session's own
    task). Found by making one ``NoOp`` in ``graph``. (The train op is no guide: with a
    ``global_step``, ``minimize`` returns its increment, colocated with it on a ps.)
    """
    with graph.as_default():
        return str(tf.no_op(name="tfr_hooks_device_probe").device)


@contextlib.contextmanager
def loop_device(graph: Any, device: str) -> Iterator[None]:
    """Place the ops created in this context on ``device``, ignoring enclosing scopes.

    The loop's own variables (running means) are local to each worker: built under a
    ``replica_device_setter`` scope they would land on a ``ps`` task and be shared by
    every worker that names them alike. Pinned to :func:`worker_device`, they stay on
    the worker.

    Args:
        graph: The graph the ops are created in.
        device: A device string, ``""`` for none (the session's own task).
    """
    with graph.device(None):  # drop the enclosing device functions (replica_device_setter)
        if device:
            with graph.device(device):
                yield
        else:
            yield


def warn_local_variables_on_ps(graph: Any) -> None:
    """Log a warning naming local variables placed on a ``ps`` job.

    ``replica_device_setter`` puts every variable on the ``ps`` tasks, local ones too
    (the epoch counter of a queue input with ``num_epochs``): all workers then share
    them by name, and each worker's local initialization resets the others'.
    """
    on_ps = [
        v.op.name
        for v in graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES)
        if tf.DeviceSpec.from_string(v.device or "").job == "ps"
    ]
    if on_ps:
        logger.warning(
            "Local variables placed on the ps job are shared by all workers: %s. Build "
            "them (the input pipeline) under tf.device(<this worker's device>) or outside "
            "the replica_device_setter scope.",
            ", ".join(on_ps),
        )


class ClusterSession:
    """Creates one worker's session on a cluster, as ``MonitoredTrainingSession`` does.

    The chief restores or initializes the global variables
    (``SessionManager.prepare_session``); other workers wait for it
    (``SessionManager.wait_for_session``). Both then initialize their local variables
    and tables, and the session is ready once every variable is initialized.

    Args:
        graph: The worker's graph.
        master: The session target (``server.target``, ``"grpc://host:port"``).
        is_chief: Whether this worker is the chief.
        config: A ``tf.compat.v1.ConfigProto`` for the session, or ``None``.
        checkpoint_dir: Where the chief restores from, or ``None`` not to restore.
        wait_secs: How long a non-chief waits for the chief to initialize.

    Examples:
        >>> creator = ClusterSession(graph, server.target, True)  # doctest: +SKIP
        >>> session = creator.create()  # doctest: +SKIP
    """

    def __init__(
        self,
        graph: Any,
        master: str,
        is_chief: bool,
        config: Any = None,
        checkpoint_dir: str | None = None,
        wait_secs: float = DEFAULT_WAIT_FOR_CHIEF_SECS,
    ) -> None:
        self.graph = graph
        self.master = master
        self.is_chief = is_chief
        self.config = config
        self.checkpoint_dir = checkpoint_dir
        self.wait_secs = wait_secs
        self._ops: dict[str, Any] = {}
        self._variable_count = -1

    def create(self) -> Any:
        """Return a session in which every variable of the graph is initialized.

        Raises:
            tf.errors.DeadlineExceededError: If a non-chief waited ``wait_secs`` and the
                chief had not initialized the global variables.
        """
        ops = self._readiness_ops()
        manager = _v1.train.SessionManager(
            local_init_op=ops["local_init"],
            ready_op=ops["ready"],
            ready_for_local_init_op=ops["ready_for_local_init"],
            graph=self.graph,
            recovery_wait_secs=min(_POLL_SECS, self.wait_secs),
        )
        if self.is_chief:
            saver = None
            if self.checkpoint_dir is not None:
                savers = self.graph.get_collection(_v1.GraphKeys.SAVERS)
                saver = savers[0] if savers else None
                latest = tf.train.latest_checkpoint(self.checkpoint_dir)
                logger.info(
                    "Chief: %s the global variables",
                    f"restoring {latest} into" if latest else "initializing",
                )
            return manager.prepare_session(
                self.master,
                init_op=ops["init"],
                saver=saver,
                checkpoint_dir=self.checkpoint_dir,
                config=self.config,
            )
        logger.info(
            "Waiting up to %g s for the chief to initialize on %s", self.wait_secs, self.master
        )
        try:
            return manager.wait_for_session(
                self.master, config=self.config, max_wait_secs=self.wait_secs
            )
        except tf.errors.DeadlineExceededError as error:
            raise tf.errors.DeadlineExceededError(
                None,
                None,
                f"This non-chief worker waited {self.wait_secs:g} s (wait_for_chief_secs) on "
                f"master={self.master!r} and the chief had not initialized the global "
                "variables. Start the chief (is_chief=True) on the same cluster, or wait "
                "longer.",
            ) from error

    def _readiness_ops(self) -> dict[str, Any]:
        """The ``Scaffold``'s default init and readiness ops, made again if variables came."""
        graph = self.graph
        count = len(graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)) + len(
            graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES)
        )
        if count != self._variable_count:
            # outside any enclosing device scope: the placer puts each check beside its
            # variable, as for a Scaffold made outside the replica_device_setter block
            with graph.as_default(), loop_device(graph, ""):
                global_variables = _v1.global_variables()
                ready = _v1.report_uninitialized_variables(name="tfr_hooks_ready")
                ready_for_local_init = _v1.report_uninitialized_variables(
                    global_variables, name="tfr_hooks_ready_for_local_init"
                )
                for report in (ready, ready_for_local_init):  # unused if the wait fails
                    getattr(report, "mark_used", lambda: None)()
                self._ops = {
                    "init": _v1.variables_initializer(global_variables, name="tfr_hooks_init"),
                    "ready": ready,
                    "ready_for_local_init": ready_for_local_init,
                    "local_init": tf.group(
                        _v1.local_variables_initializer(),
                        _v1.tables_initializer(),
                        name="tfr_hooks_local_init",
                    ),
                }
            self._variable_count = count
        return self._ops
