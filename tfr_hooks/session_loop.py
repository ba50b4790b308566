"""SessionLoop: the engine in graph mode, one ``session.run`` per step with merged fetches.

Also :func:`hooked_session`, the drop-in for scripts that keep their own
``while``/``sess.run`` loop and only want hooks around it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.engine import StepResult, check_positive, check_steps, run_loop
from tfr_hooks.hooks import HookList, LoopState, check_hooks, graph_hooks
from tfr_hooks.metrics import RunningMeans
from tfr_hooks.queue_runners import QueueRunnerHook
from tfr_hooks.signals import with_signal_hook

__all__ = [
    "SessionLoop",
    "Validation",
    "HookedSession",
    "hooked_session",
    "run_with_hooks",
]

logger = logging.getLogger(__name__)

_v1 = tf.compat.v1


class Validation:
    """A second tensor-fed pipeline, run to exhaustion at the end of training epochs.

    Args:
        fetches: Name to scalar tensor computed on the validation batch (sharing the
            model's weights); their means appear in the epoch logs as ``val_<name>``.
        initializers: Ops that restart the validation data (an initializable iterator's
            initializer); run before each pass. Without them, give ``steps``.
        batch_size: The validation batch size (a scalar tensor or an int), to weigh a
            final partial batch; ``None`` weighs every step equally.
        steps: Stop each pass after this many steps; ``None`` runs until the data ends.
        freq: Run the pass after every ``freq``-th epoch, counted as ``model.fit``
            counts ``validation_freq`` (after epochs ``freq - 1``, ``2 * freq - 1``, ...).

    Examples:
        >>> val = Validation({"loss": val_loss}, initializers=[it.initializer])  # doctest: +SKIP
        >>> SessionLoop(train_op, {"loss": loss}, validation=val)  # doctest: +SKIP
    """

    def __init__(
        self,
        fetches: Mapping[str, Any],
        *,
        initializers: Sequence[Any] = (),
        batch_size: Any = None,
        steps: int | None = None,
        freq: int = 1,
    ) -> None:
        _check_fetches(fetches, "fetches")
        check_steps(steps, "steps")
        check_positive(freq, "freq")
        if not initializers and steps is None:
            raise ValueError(
                "A validation pipeline without `initializers` can only be run once; give "
                "`initializers` (an initializable iterator's initializer) or `steps`. "
                f"Received: initializers={initializers!r}, steps={steps!r}"
            )
        self.fetches = dict(fetches)
        self.initializers = list(initializers)
        self.batch_size = batch_size
        self.steps = steps
        self.freq = freq


class SessionLoop:
    """Train with your own train op in a ``tf.compat.v1.Session``, driving hooks.

    Each step is one ``session.run`` of the train op, the running means of ``fetches`` and
    whatever the hooks add in ``before_run``. An ``OutOfRangeError`` from the input ends
    the epoch: with ``initializers`` (a re-initializable source) the next epoch restarts
    the data; without them (a one-shot source such as a queue pipeline with
    ``num_epochs``) training ends after closing the epoch. With ``steps_per_epoch``,
    epochs are counted in steps. Queue runners in the graph are started and joined by a
    :class:`~tfr_hooks.QueueRunnerHook` added automatically.

    Args:
        train_op: The op (or tensor, or list of them) to run each step.
        fetches: Name to scalar tensor to average over each epoch (``loss``, ``acc``...).
        hooks: ``SessionRunHook`` instances (stock TensorFlow hooks or
            :class:`~tfr_hooks.Hook` subclasses), called in this order.
        steps_per_epoch: Steps per epoch, or ``None`` to let the data decide.
        initializers: Ops run at the start of each epoch to restart the data.
        batch_size: The batch size (a scalar tensor such as ``tf.shape(x)[0]``, or an
            int) to weigh the means and count examples; ``None`` weighs steps equally.
        validation: A :class:`Validation` pass run at the end of epochs.
        session_config: A ``tf.compat.v1.ConfigProto`` for the session the loop creates.
        run_timeout_secs: Fail a step that blocks for longer than this (for example on a
            queue nobody fills) with ``DeadlineExceededError``; ``None`` waits forever.
        handle_signals: Add a :class:`~tfr_hooks.StopOnSignal` (unless ``hooks`` has
            one): SIGINT/SIGTERM stop the run gracefully, a second one aborts it.

    Examples:
        >>> loop = SessionLoop(train_op, fetches={"loss": loss}, hooks=[my_hook])  # doctest: +SKIP
        >>> history = loop.run(epochs=3)  # doctest: +SKIP
        >>> history["loss"]  # one mean per epoch  # doctest: +SKIP
    """

    def __init__(
        self,
        train_op: Any,
        fetches: Mapping[str, Any] | None = None,
        hooks: Sequence[Any] | None = None,
        steps_per_epoch: int | None = None,
        *,
        initializers: Sequence[Any] = (),
        batch_size: Any = None,
        validation: Validation | None = None,
        session_config: Any = None,
        run_timeout_secs: float | None = None,
        handle_signals: bool = True,
    ) -> None:
        if train_op is None:
            raise TypeError("Expected `train_op` to be a tf.Operation or tf.Tensor. Received: None")
        fetches = {} if fetches is None else fetches
        _check_fetches(fetches, "fetches")
        check_steps(steps_per_epoch, "steps_per_epoch")
        user_hooks = check_hooks(hooks)
        if validation is not None and not isinstance(validation, Validation):
            raise TypeError(
                "Expected `validation` to be a tfr_hooks.Validation or None. "
                f"Received: validation={validation!r}"
            )
        if run_timeout_secs is not None and not run_timeout_secs > 0:
            raise ValueError(
                "Expected `run_timeout_secs` to be a positive number or None. "
                f"Received: run_timeout_secs={run_timeout_secs!r}"
            )
        self.graph = _graph_of(train_op)
        self.train_op = train_op
        self.steps_per_epoch = steps_per_epoch
        self.initializers = list(initializers)
        self.validation = validation
        self.session_config = session_config
        self.run_timeout_secs = run_timeout_secs
        with self.graph.as_default():
            self._means = RunningMeans(fetches, batch_size, name="tfr_hooks_train_means")
            self._batch_size = _as_tensor_or_none(batch_size)
            self._val_means = None
            self._val_batch_size = None
            if validation is not None:
                self._val_means = RunningMeans(
                    validation.fetches, validation.batch_size, name="tfr_hooks_val_means"
                )
                self._val_batch_size = _as_tensor_or_none(validation.batch_size)
            auto: list[Any] = []
            has_queues = _v1.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)
            if has_queues and not any(isinstance(h, QueueRunnerHook) for h in user_hooks):
                auto.append(QueueRunnerHook())
            auto.extend(graph_hooks(self.graph))
            _ensure_saver(user_hooks)
        user_hooks = with_signal_hook(user_hooks, handle_signals)
        self.hooks = HookList(auto + user_hooks)
        self.loop = LoopState()

    def run(
        self,
        epochs: int = 1,
        session: Any = None,
        *,
        initial_epoch: int = 0,
    ) -> dict[str, list[float]]:
        """Train for ``epochs`` epochs and return the history of epoch means.

        Args:
            epochs: Train until this epoch index (exclusive), like ``model.fit``.
            session: A ``tf.compat.v1.Session`` on the train op's graph to use (for
                example the ``tf_keras`` backend session); the loop then initializes only
                variables that are not yet initialized and leaves the session open.
                ``None`` creates a session, initializes every variable and closes it.
            initial_epoch: The epoch to start at (when resuming).

        Returns:
            A dict from each fetch name (and ``val_<name>``, and anything hooks add to the
            epoch logs) to its list of per-epoch values, like Keras' ``History.history``.
        """
        if session is not None and getattr(session, "graph", None) is not self.graph:
            raise ValueError(
                "Expected `session` to be a tf.compat.v1.Session on the train op's graph. "
                f"Received: session={session!r}"
            )
        runner = _SessionRunner(self, session)
        with self.graph.as_default():  # hooks look things up in the default graph
            return run_loop(
                runner,
                self.hooks,
                self.loop,
                epochs=epochs,
                initial_epoch=initial_epoch,
                steps_per_epoch=self.steps_per_epoch,
                validation_freq=self.validation.freq if self.validation else 1,
            )


class _SessionRunner:
    """The engine's runner for :class:`SessionLoop`."""

    def __init__(self, owner: SessionLoop, session: Any) -> None:
        self.owner = owner
        self.reinitializable = bool(owner.initializers)
        self.session = session
        self.owns_session = session is None
        self.coord: Any = None
        self.loop: LoopState | None = None
        self.train_fetches: dict[str, Any] = {"train_op": owner.train_op}
        self.train_fetches["logs"] = owner._means.update
        if owner._batch_size is not None:
            self.train_fetches["batch_size"] = owner._batch_size
        self.options = None
        self.fast_run: Callable[[], Any] | None = None
        self.on_results: Callable[[Any], None] | None = None
        if owner.run_timeout_secs is not None:
            self.options = _v1.RunOptions(timeout_in_ms=int(owner.run_timeout_secs * 1000))

    def start(self, loop: LoopState, hooks: HookList) -> None:
        owner = self.owner
        if self.session is None:
            self.session = _v1.Session(graph=owner.graph, config=owner.session_config)
        _initialize_uninitialized(self.session)
        self.coord = _v1.train.Coordinator()
        self.loop = loop
        loop.session = self.session
        # steps where no hook adds anything run through a prepared callable: it skips
        # session.run's parsing of the fetch structure, the loop's main cost per step
        prepared = self.session.make_callable(
            self.train_fetches, accept_options=self.options is not None
        )
        options = self.options
        self.fast_run = prepared if options is None else lambda: prepared(options=options)
        self.on_results = lambda r: _set_batch_logs(loop, r["logs"])
        hooks.after_create_session(self.session, self.coord)

    def start_epoch(self, epoch: int, restart_data: bool) -> None:
        ops = [self.owner._means.reset]
        if restart_data:
            ops.extend(self.owner.initializers)
        self.session.run(ops)

    def step(self, loop: LoopState, hooks: HookList) -> StepResult:
        try:
            results = run_with_hooks(
                self.session,
                hooks,
                self.train_fetches,
                loop,
                options=self.options,
                on_results=self.on_results,
                fast_run=self.fast_run,
            )
        except tf.errors.OutOfRangeError:
            return StepResult(0, 0, exhausted=True)
        examples = int(results.get("batch_size", 1))
        return StepResult(1, examples, loop.batch_logs)

    def evaluate(self, hooks: HookList) -> dict[str, float]:
        validation, means = self.owner.validation, self.owner._val_means
        if validation is None or means is None:
            return {}
        self.session.run([means.reset, *validation.initializers])
        hooks.validation_begin()
        logs: dict[str, float] = {}
        step = 0
        while validation.steps is None or step < validation.steps:
            hooks.validation_batch_begin(step)
            try:
                values = self.session.run(means.update, options=self.options)
            except tf.errors.OutOfRangeError:
                break
            logs = {k: float(v) for k, v in values.items()}
            hooks.validation_batch_end(step, logs)
            step += 1
        if step == 0:
            logger.warning("The validation data gave no batch; no val_ logs this epoch.")
        hooks.validation_end(logs)
        return logs

    def finish(self, hooks: HookList) -> BaseException | None:
        if self.coord is not None:
            self.coord.request_stop()
        error = hooks.end(self.session)
        if self.owns_session and self.session is not None:
            self.session.close()
        return error


def run_with_hooks(
    session: Any,
    hooks: HookList,
    fetches: Any,
    loop: LoopState,
    feed_dict: Mapping[Any, Any] | None = None,
    options: Any = None,
    run_metadata: Any = None,
    on_results: Callable[[Any], None] | None = None,
    fast_run: Callable[[], Any] | None = None,
) -> Any:
    """One ``session.run`` of ``fetches`` merged with what the hooks ask in ``before_run``.

    Calls ``on_results`` with the results for ``fetches`` before any ``after_run``, and
    turns ``run_context.request_stop()`` into ``loop.request_stop()``. When no hook asks
    for anything and nothing is fed, ``fast_run`` (a callable made by
    ``session.make_callable`` for ``fetches`` with ``options``) runs the step instead.

    Returns:
        The results for ``fetches``.

    Raises:
        ValueError: If two hooks, or a hook and the caller, feed the same tensor.
    """
    run_context = _v1.train.SessionRunContext(
        original_args=_v1.train.SessionRunArgs(fetches, feed_dict, options), session=session
    )
    hook_args = [hook.before_run(run_context) for hook in hooks]
    if fast_run is not None and not feed_dict and all(a is None for a in hook_args):
        caller_results = fast_run()
        hook_results: list[Any] = [None] * len(hook_args)
        merged_options = options if options is not None else _v1.RunOptions()
        run_metadata = run_metadata if run_metadata is not None else _v1.RunMetadata()
    else:
        caller_results, hook_results, merged_options, run_metadata = _merged_run(
            session, hooks, hook_args, fetches, feed_dict, options, run_metadata
        )
    if on_results is not None:
        on_results(caller_results)
    for hook, results in zip(hooks, hook_results, strict=True):
        hook.after_run(
            run_context,
            _v1.train.SessionRunValues(
                results=results, options=merged_options, run_metadata=run_metadata
            ),
        )
    if run_context.stop_requested:
        loop.request_stop("a hook called run_context.request_stop()")
    return caller_results


def _merged_run(
    session: Any,
    hooks: HookList,
    hook_args: list[Any],
    fetches: Any,
    feed_dict: Mapping[Any, Any] | None,
    options: Any,
    run_metadata: Any,
) -> tuple[Any, list[Any], Any, Any]:
    """Merge the hooks' fetches, feeds and options with the caller's into one run.

    Returns:
        The caller's results, each hook's results, the merged options, the metadata.
    """
    merged_fetches: dict[str, Any] = {"__caller": fetches}
    feeds = dict(feed_dict or {})
    merged_options = _v1.RunOptions()
    if options is not None:
        merged_options.MergeFrom(options)
    any_options = options is not None
    for i, args in enumerate(hook_args):
        if args is None:
            continue
        if args.fetches is not None:
            merged_fetches[f"hook_{i}"] = args.fetches
        for key, value in (args.feed_dict or {}).items():
            if key in feeds:
                raise ValueError(
                    f"Two feeds for the same tensor {key!r}: hook {type(hooks.hooks[i]).__name__} "
                    "feeds a tensor that is already fed. Expected each tensor fed once."
                )
            feeds[key] = value
        if args.options is not None:
            any_options = True
            _merge_run_options(merged_options, args.options)
    if any_options and run_metadata is None:
        run_metadata = _v1.RunMetadata()
    results = session.run(
        merged_fetches,
        feed_dict=feeds or None,
        options=merged_options if any_options else None,
        run_metadata=run_metadata if any_options else None,
    )
    hook_results = [results.get(f"hook_{i}") for i in range(len(hook_args))]
    return results["__caller"], hook_results, merged_options, run_metadata


def _set_batch_logs(loop: LoopState, values: Mapping[str, Any]) -> None:
    loop.batch_logs = {k: float(v) for k, v in values.items()}


def _merge_run_options(target: Any, other: Any) -> None:
    """Merge ``other`` into ``target`` the way ``MonitoredSession`` does."""
    target.trace_level = max(target.trace_level, other.trace_level)
    target.timeout_in_ms = max(target.timeout_in_ms, other.timeout_in_ms)
    target.inter_op_thread_pool = max(target.inter_op_thread_pool, other.inter_op_thread_pool)
    target.output_partition_graphs = target.output_partition_graphs or other.output_partition_graphs
    target.debug_options.debug_tensor_watch_opts.extend(other.debug_options.debug_tensor_watch_opts)
    target.report_tensor_allocations_upon_oom = (
        target.report_tensor_allocations_upon_oom or other.report_tensor_allocations_upon_oom
    )


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
        self.loop.session = session
        self.loop.epochs = 1
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
        results = run_with_hooks(
            self.session, self.hooks, fetches, self.loop, feed_dict, options, run_metadata
        )
        self.loop.global_step += 1
        self.loop.epoch_steps += 1
        return results

    def should_stop(self) -> bool:
        """Whether a hook asked to stop, or the input pipeline's threads stopped."""
        return self.loop.stop_requested


@contextlib.contextmanager
def hooked_session(
    hooks: Sequence[Any] | None = None,
    session: Any = None,
    *,
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
        hooks: ``SessionRunHook`` instances, called in this order.
        session: A session to use; it stays open. ``None`` creates one.
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
    owns = session is None
    if owns:
        session = _v1.Session(graph=graph, config=config)
    g = session.graph
    auto: list[Any] = []
    with g.as_default():
        if _v1.get_collection(_v1.GraphKeys.QUEUE_RUNNERS) and not any(
            isinstance(h, QueueRunnerHook) for h in user_hooks
        ):
            auto.append(QueueRunnerHook())
        auto.extend(graph_hooks(g))
        _ensure_saver(user_hooks)
    hook_list = HookList(auto + user_hooks)
    hooked = HookedSession(session, hook_list)
    hook_list.set_loop(hooked.loop)
    coord = _v1.train.Coordinator()
    error: BaseException | None = None
    try:
        with g.as_default():
            hook_list.begin()
        _initialize_uninitialized(session)
        hook_list.after_create_session(session, coord)
        yield hooked
    except tf.errors.OutOfRangeError as exc:
        # the input ran out; a dead queue thread's own error is raised by its hook's end
        logger.info("Input exhausted after %d steps: %s", hooked.loop.global_step, exc.message)
    except BaseException as exc:
        error = exc
    finally:
        coord.request_stop()
        end_error = hook_list.end(session)
        if owns:
            session.close()
    error = error or end_error
    if error is not None:
        better = hook_list.translate_error(error)
        if better is not error:
            raise better from error
        raise error


def _initialize_uninitialized(session: Any) -> None:
    """Initialize the graph's variables that are not yet initialized in ``session``.

    A new session gets every variable initialized; a session the user already worked
    in (restored from a checkpoint, or Keras' own) keeps the values it has.
    """
    graph = session.graph
    variables = graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)
    variables += graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES)
    if not variables:
        return
    report = graph.get_collection(_UNINITIALIZED_KEY)
    if not report or report[0][1] != len(variables):
        with graph.as_default():
            tensor = _v1.is_variable_initialized  # one small op per variable, made once
            flags = tf.stack([tensor(v) for v in variables])
        graph.clear_collection(_UNINITIALIZED_KEY)
        graph.add_to_collection(_UNINITIALIZED_KEY, (flags, len(variables)))
        report = graph.get_collection(_UNINITIALIZED_KEY)
    initialized = session.run(report[0][0])
    todo = [v.initializer for v, done in zip(variables, initialized, strict=True) if not done]
    if todo:
        session.run(todo)


_UNINITIALIZED_KEY = "tfr_hooks_initialized_flags"


def _ensure_saver(hooks: Sequence[Any]) -> None:
    """Give a ``CheckpointSaverHook`` the default saver ``MonitoredSession``'s scaffold makes.

    Stock checkpoint hooks built without a saver look for one in the ``SAVERS``
    collection; ``Scaffold`` puts a sharded saver there, so this does the same.
    """
    wants_saver = any(isinstance(h, _v1.train.CheckpointSaverHook) for h in hooks)
    if wants_saver and not _v1.get_collection(_v1.GraphKeys.SAVERS):
        saver = _v1.train.Saver(sharded=True, max_to_keep=5, save_relative_paths=True)
        _v1.add_to_collection(_v1.GraphKeys.SAVERS, saver)


def _check_fetches(fetches: object, name: str) -> None:
    if not isinstance(fetches, Mapping):
        raise TypeError(
            f"Expected `{name}` to be a dict from names to scalar tensors. "
            f"Received: {name}={fetches!r}"
        )
    for key, value in fetches.items():
        if not isinstance(key, str) or not key:
            raise TypeError(
                f"Expected the keys of `{name}` to be non-empty strings. Received: key {key!r}"
            )
        if not isinstance(value, (tf.Tensor, tf.Variable)) and not hasattr(value, "graph"):
            raise TypeError(
                f"Expected `{name}[{key!r}]` to be a tensor. Received: {name}[{key!r}]={value!r}"
            )


def _graph_of(train_op: Any) -> Any:
    items = train_op if isinstance(train_op, (list, tuple)) else [train_op]
    for item in items:
        graph = getattr(item, "graph", None)
        if graph is not None:
            return graph
    raise TypeError(
        "Expected `train_op` to be a graph-mode tf.Operation or tf.Tensor (or a list of "
        f"them); build it under a tf.Graph or with eager execution disabled. "
        f"Received: train_op={train_op!r}"
    )


def _as_tensor_or_none(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, int):
        return tf.constant(value, tf.int64)
    return value
