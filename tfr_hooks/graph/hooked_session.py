"""hooked_session: hooks around a script's own ``while``/``sess.run`` loop.

For scripts that keep their loop and only want what hooks bring (checkpoints, logging,
queue threads started and joined, Ctrl-C handled). The run begins and is torn down
through the engine, as its own loops are (:func:`tfr_hooks.engine.begin_run`,
:func:`~tfr_hooks.engine.start_session`, :func:`~tfr_hooks.engine.end_run`): the ``end``
of every hook that began even when one raises (see :mod:`tfr_hooks.hooks` for a run that
fails before its session is ready), the first error raised and the later ones logged.

(The module is not named ``hooked_session``: importing it would then replace the
function ``tfr_hooks.hooked_session`` by the module of that name.)
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.engine import begin_run, end_run, run_hooked_step, start_session
from tfr_hooks.graph.hooked_run import merged_run
from tfr_hooks.graph.setup import check_data, initialize_uninitialized, input_hooks
from tfr_hooks.hooks import HookList, LoopState, check_hooks
from tfr_hooks.signals import with_signal_hook

__all__ = ["HookedSession", "hooked_session"]

logger = logging.getLogger(__name__)

_v1 = tf.compat.v1


class HookedSession:
    """A session-like object whose ``run`` fires hooks; made by :func:`hooked_session`.

    Attributes:
        session: The wrapped ``tf.compat.v1.Session``.
        loop: The loop state shown to :class:`~tfr_hooks.Hook` subclasses.
    """

    def __init__(self, session: Any, hooks: HookList) -> None:
        self.session = session
        self.hooks = hooks
        self.loop = LoopState()
        self.loop.reset(epochs=1)
        self.loop.session = session
        self.graph = session.graph

    def run(
        self,
        fetches: Any,
        feed_dict: Mapping[Any, Any] | None = None,
        options: Any = None,
        run_metadata: Any = None,
    ) -> Any:
        """Like ``Session.run``, with every hook's ``before_run``/``after_run`` around it.

        An ``OutOfRangeError`` from the input propagates (end your loop on it, or let
        the ``with hooked_session(...)`` block end quietly on it).
        """
        step = functools.partial(
            merged_run,
            self.session,
            self.hooks.hooks,
            fetches=fetches,
            feed_dict=feed_dict,
            options=options,
            run_metadata=run_metadata,
        )
        original_args = _v1.train.SessionRunArgs(fetches, feed_dict, options)
        result = run_hooked_step(self.hooks, self.loop, original_args, self.session, step)
        self.loop.global_step += 1
        self.loop.epoch_steps += 1
        return result.results

    def should_stop(self) -> bool:
        """Whether a hook asked to stop (or a signal arrived)."""
        return self.loop.stop_requested


@contextlib.contextmanager
def hooked_session(
    hooks: Sequence[Any] | None = None,
    session: Any = None,
    *,
    data: Any = None,
    graph: Any = None,
    config: Any = None,
    handle_signals: bool = True,
) -> Iterator[HookedSession]:
    """Add hooks to an existing ``while``/``sess.run`` training script.

    Creates (or wraps) a session, initializes uninitialized variables, starts the graph's
    queue runners, and yields a :class:`HookedSession`. On exit, whatever the reason, it
    calls every hook's ``end``, stops and joins the queue threads and closes the session
    it created. An ``OutOfRangeError`` (the input ran out) ends the block quietly.

    Args:
        hooks: ``SessionRunHook`` instances, called in this order (for a
            ``KerasTrainingGraph``'s train op, put its ``hooks`` first).
        session: A session to use; it stays open. ``None`` creates one.
        data: The :class:`~tfr_hooks.tfrecord.Batches` the script reads, so that its
            read errors name the file (its initializers are yours to run).
        graph: The graph for a new session (default: the default graph).
        config: A ``tf.compat.v1.ConfigProto`` for a new session.
        handle_signals: Add a :class:`~tfr_hooks.StopOnSignal`: the first SIGINT or
            SIGTERM makes ``should_stop()`` true, a second one aborts.

    Yields:
        The hooked session: call ``run`` as before and loop ``while not sess.should_stop()``.

    Examples:
        >>> with hooked_session(hooks=[StopAtStepHook(last_step=100)]) as sess:  # doctest: +SKIP
        ...     while not sess.should_stop():
        ...         sess.run(train_op)
    """
    user_hooks = with_signal_hook(check_hooks(hooks), handle_signals)
    data = check_data(data)
    owns = session is None
    if owns:
        session = _v1.Session(graph=graph, config=config)
    g = session.graph
    hook_list = HookList(input_hooks(g, user_hooks, data) + user_hooks)
    hooked = HookedSession(session, hook_list)
    coord = _v1.train.Coordinator()  # the run's one coordinator
    error: BaseException | None = None
    started = False  # whether the session is ready for the hooks (as the engine's)
    try:
        with g.as_default():  # the engine fires every event, as for its own loops
            begin_run(hook_list, hooked.loop)
        initialize_uninitialized(session)
        started = True
        start_session(hook_list, hooked.loop, session, coord)
        yield hooked
    except tf.errors.OutOfRangeError as exc:
        # the input ran out; a dead queue thread's own error is raised by its hook's end
        logger.info("Input exhausted after %d steps: %s", hooked.loop.global_step, exc.message)
    except BaseException as exc:
        error = exc

    def close() -> None:
        coord.request_stop()
        if owns:
            session.close()

    end_run(hook_list, hooked.loop, session, error, started=started, after=close)
