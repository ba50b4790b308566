"""The hook protocol: TensorFlow's ``SessionRunHook`` plus epoch and validation events.

Every loop in this package drives its hooks through one lifecycle, fired by
:mod:`tfr_hooks.engine` alone::

    begin -> after_create_session(session, coord) ->
      [ epoch_begin(epoch) ->
          ( before_run(run_context) -> step -> after_run(run_context, run_values) )*
        -> [ validation_begin -> (validation_batch_begin -> validation_batch_end)* ->
             validation_end ]
        -> epoch_end(epoch, logs) ]*
    -> end(session)   # always, for every hook that began, even when one of them raises

``before_run``/``after_run`` keep the exact meaning they have in
``tf.compat.v1.train.MonitoredSession``, so TensorFlow's stock hooks run unchanged.
The epoch and validation events only reach subclasses of :class:`Hook`.

Which hooks get ``end`` when a run fails early: ``end`` is for hooks that have something
to end, so a hook whose ``begin`` raised, and the hooks after it (which never began), get
none. Once the loop's session exists (created and initialized, just before
``after_create_session``), every hook that began gets ``end(session)``, whatever fails
later. If the run fails before that (in a ``begin``, or creating the session), only the
hooks that can end without a session get ``end(None)``: :class:`Hook` subclasses that do
not set ``requires_session`` (so that, say, :class:`~tfr_hooks.StopOnSignal` gives the
signals back); other ``SessionRunHook`` instances (TensorFlow's own), which
``MonitoredSession`` never ends without a session, get none. Only the error that ended
the run is reported, not a hook's ``end`` failing for want of what never began.

What a loop asks a hook about is declared on :class:`Hook`, with its default:
``requires_session``, ``needs_model_state``, ``owns_signals``, ``chief_only`` and
``needs_every_step``. Loops
read them through :func:`capabilities_of`, which gives a stock ``SessionRunHook`` (not a
:class:`Hook`) the answers that fit it.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.input_report import InputStats

__all__ = [
    "Hook",
    "HookCapabilities",
    "HookList",
    "LoopState",
    "call_all",
    "capabilities_of",
    "check_hooks",
]

logger = logging.getLogger(__name__)

SessionRunHook = tf.compat.v1.train.SessionRunHook
SessionRunArgs = tf.compat.v1.train.SessionRunArgs
SessionRunContext = tf.compat.v1.train.SessionRunContext
SessionRunValues = tf.compat.v1.train.SessionRunValues


class LoopState:
    """What a running loop shows its hooks, and the one thing they may do to it: stop it.

    The loop owns this object; a :class:`Hook` sees it as ``self.loop`` from ``begin`` on.

    Attributes:
        epochs: The epoch count asked for (``run(epochs=...)``).
        initial_epoch: The first epoch of this run (non-zero when resuming). A hook may
            raise it in ``begin`` or ``after_create_session`` (for example after restoring
            a backup); the loop starts there.
        initial_step: Steps of ``initial_epoch`` already run before this run (a run
            resumed from a mid-epoch checkpoint, such as a
            :class:`~tfr_hooks.PreemptionCheckpoint`'s); 0 otherwise. A hook may set it
            where it may move ``initial_epoch`` (or in the first ``epoch_begin``); the
            first epoch then counts from it and runs only the steps left: up to
            ``steps_per_epoch`` when one is configured, else (on a runner that can skip
            batches, such as :class:`~tfr_hooks.FunctionLoop`'s) it skips that many
            batches of the epoch's data and runs to its end.
        initial_workers: The workers of the run that saved the mid-epoch position this
            run resumes at (``initial_step``), when the checkpoint says
            (:class:`~tfr_hooks.PreemptionCheckpoint` records it); ``None`` otherwise.
            A data position of one global sequence resumes on any worker count; other
            data replays, and the loop logs that a count that changed moves examples.
        initial_input: The input state saved with the position this run resumes at
            (a mixture's stretches of weights, as bytes), when the checkpoint holds one
            (:class:`~tfr_hooks.PreemptionCheckpoint` and
            :class:`~tfr_hooks.EpochCheckpoint` save it); ``None`` otherwise. A hook
            sets it where it sets ``initial_step``; the loop hands it to the input's
            seek, which goes on from it (at the reader's weights, when they changed).
        input_state: The state of the training input to save beside a position (see
            ``initial_input``), set by the loop when the run's first epoch starts
            (``None``: the input needs nothing but the position).
        epoch: The current epoch, counted from 0.
        global_step: Steps run since ``run`` started (this run only).
        epoch_steps: Steps run so far in the current epoch.
        epoch_examples: Examples seen so far in the current epoch (when the loop knows
            batch sizes; otherwise equal to ``epoch_steps``).
        steps_per_epoch: Steps per epoch: the one configured, or, when the data decides,
            the number learned when the first epoch ran out of data (``None`` before).
        steps_per_execution: Steps run by one call of the step (1 in graph mode).
        call_steps: Steps the call that just ran made, set before its ``after_run``:
            ``steps_per_execution``, or fewer when the epoch or the data ended first (1 in
            graph mode). A hook that counts steps in ``after_run`` adds it.
        batch_logs: The logs of the last step: running means of the fetched values over
            the current epoch, as Python floats.
        session: The ``tf.compat.v1.Session`` of a graph-mode loop, else ``None``.
        stop_requested: Whether a stop was requested; the loop ends after the current step.
        stop_reason: Why, as given to :meth:`request_stop`.
        error: The exception that is ending the run, set before the hooks' ``end`` is
            called (``None`` when the run ends normally), so that ``end`` can tell a
            failed run from a finished one.
        input_cancels: The ``cancel`` methods of the run's hooks that own blocking input
            (:class:`~tfr_hooks.QueueRunnerHook`), then the loop runner's, which ends
            the read of the step under way; see :meth:`cancel_input`.
        input_stats: The current epoch's input measurement
            (:class:`~tfr_hooks.input_report.InputStats`: ``wait_share``, the share of
            step time spent waiting for the next batch, its class ``bound`` by the
            profiler's thresholds, ``examples_per_sec``), set when its last step has
            run (before the validation pass and ``epoch_end``); ``None`` before that,
            or when the loop does not measure its input.
        history_entries: Entries the current epoch adds to the run's history beside its
            logs (keys with a ``/``, such as ``input/steps_per_execution``): a feature's
            own hook writes them in ``epoch_end`` (see :mod:`tfr_hooks.entries`); the
            logs hooks get never hold them. Emptied at each epoch's start.
        is_chief: Whether this process writes the run's files, when the loop was told
            (``SessionLoop(master=..., is_chief=...)``); ``None`` lets a hook decide from
            the strategy or ``TF_CONFIG``. Kept across runs.
        strategy: The ``tf.distribute.Strategy`` a :class:`~tfr_hooks.FunctionLoop`
            trains under (``None`` in graph mode), for hooks that need it without a
            model (:class:`~tfr_hooks.PreemptionCheckpoint` with ``objects``). Kept
            across runs.
        resumes_mid_epoch: Whether a run that starts with ``initial_step`` set continues
            that epoch's data exactly at its next batch (the loop replays the earlier
            passes of a seeded shuffle and skips the batches already trained on), so a
            checkpoint hook may record a position inside an epoch. A
            :class:`~tfr_hooks.SessionLoop` sets it when its ``data`` is a
            ``read_batches(pipeline="dataset")`` pipeline (streamed, packed or in memory)
            and the data decides the epochs (no ``steps_per_epoch``); ``False`` otherwise
            (a queue pipeline's order is not reproducible). Kept across runs.
    """

    def __init__(self) -> None:
        self.reset()
        self.is_chief: bool | None = None
        self.strategy: Any = None
        self.resumes_mid_epoch = False

    def reset(
        self,
        *,
        epochs: int = 0,
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        steps_per_execution: int = 1,
    ) -> None:
        """Start afresh for a new run (the loop calls it before ``begin``)."""
        self.epochs = epochs
        self.initial_epoch = initial_epoch
        self.initial_step = 0
        self.initial_workers: int | None = None
        self.initial_input: bytes | None = None
        self.input_state: bytes | None = None
        self.epoch = initial_epoch
        self.global_step = 0
        self.epoch_steps = 0
        self.epoch_examples = 0
        self.steps_per_epoch = steps_per_epoch
        self.steps_per_execution = steps_per_execution
        self.call_steps = 0
        self.batch_logs: dict[str, Any] = {}
        self.session: Any = None
        self.stop_requested = False
        self.stop_reason = ""
        self.error: BaseException | None = None
        self.input_cancels: tuple[Callable[[], bool], ...] = ()
        self.input_stats: InputStats | None = None
        self.history_entries: dict[str, Any] = {}

    def cancel_input(self) -> bool:
        """Unblock a step waiting on input, from any thread (a signal watcher's).

        Tries each of :attr:`input_cancels` in turn, until one had something to cancel:
        first the hooks that own blocking input (closing the input queues, so that the
        blocked step ends as if the data had run out), then the loop's runner, which
        ends the read of the step under way (the step then fails).

        Returns:
            Whether anything was cancelled.
        """
        for cancel in self.input_cancels:
            try:
                if cancel():
                    return True
            except Exception:  # another thread's cleanup must not die on one hook
                logger.exception("Cancelling the input failed")
        return False

    def request_stop(self, reason: str = "") -> None:
        """Ask the loop to stop after the current step; the epoch is still closed.

        Args:
            reason: Why, for the log.
        """
        if not self.stop_requested:
            logger.info("Stop requested%s", f": {reason}" if reason else "")
            self.stop_requested = True
            self.stop_reason = reason


class Hook(SessionRunHook):  # type: ignore[misc,valid-type]
    """Base class for hooks: a ``SessionRunHook`` with epoch and validation events.

    All methods are no-ops; override the ones you need. A hook may add fetches, feeds and
    run options to the training step by returning ``tf.compat.v1.train.SessionRunArgs``
    from ``before_run``, exactly as with ``MonitoredSession``. To stop training, call
    ``run_context.request_stop()`` in ``after_run`` or ``self.loop.request_stop()``
    anywhere.

    As in ``MonitoredSession``, the step that finds the input exhausted (the
    ``OutOfRangeError`` that ends an epoch) has had its ``before_run`` call but gets no
    ``after_run``.

    Each hook should reset its state in ``begin`` so one instance can serve several runs.

    Examples:
        >>> class PrintEpochLoss(Hook):
        ...     def epoch_end(self, epoch, logs):
        ...         print(epoch, logs["loss"])
    """

    #: Whether the hook needs a ``tf.compat.v1.Session`` (graph mode). A loop without a
    #: session refuses such hooks at construction with a clear error, and a run that
    #: fails before its session exists does not call their ``end`` (other hooks that
    #: began get ``end(None)``).
    requires_session: bool = False
    #: Whether the hook saves or restores the model's variables from
    #: ``after_create_session`` on: :class:`~tfr_hooks.FunctionLoop` then creates the
    #: model's state (optimizer and metric variables) before that event.
    needs_model_state: bool = False
    #: The signals the hook handles itself: the loop's :class:`~tfr_hooks.StopOnSignal`
    #: leaves them to it (:class:`~tfr_hooks.PreemptionCheckpoint` owns SIGTERM).
    owns_signals: tuple[signal.Signals, ...] = ()
    #: Whether the hook writes the run's shared files (checkpoints, events), so that only
    #: the chief runs it: a loop told it is not the chief
    #: (``SessionLoop(master=..., is_chief=False)``) drops it from its hooks.
    chief_only: bool = False
    #: Whether the hook needs its ``before_run``/``after_run`` around every single step
    #: (it counts calls as steps): a :class:`~tfr_hooks.FunctionLoop` with
    #: ``steps_per_execution="auto"`` (the default) then keeps running one step a call
    #: (see :mod:`tfr_hooks.tuning`). ``None`` (the default) means: it does when its class
    #: has a ``before_run`` or ``after_run`` of its own, which may count calls as steps.
    #: Set ``False`` on a hook whose ``before_run``/``after_run`` work per call (reading
    #: ``self.loop.call_steps``), ``True`` to hold one step a call whatever it overrides.
    #: A fixed ``steps_per_execution`` is the user's choice and is left as it is.
    needs_every_step: bool | None = None

    #: The state of the loop that runs the hook, as :meth:`set_loop` gave it; ``None``
    #: until a loop attaches the hook (a hook called directly, or never run). Read it as
    #: :attr:`loop` in code that runs inside a loop, as :attr:`attached_loop` otherwise.
    _loop: LoopState | None = None

    @property
    def loop(self) -> LoopState:
        """The state of the loop that runs the hook (:class:`LoopState`), from ``begin`` on.

        Raises:
            RuntimeError: If no loop has attached the hook yet (:attr:`attached_loop` is
                ``None``).
        """
        if self._loop is None:
            raise RuntimeError(
                f"Expected {type(self).__name__} to be run by a loop, which gives it "
                "`self.loop` before `begin` (or `hook.set_loop(LoopState())` before "
                "calling it directly). Received: no loop attached"
            )
        return self._loop

    @loop.setter
    def loop(self, loop: LoopState) -> None:
        self._loop = loop

    @property
    def attached_loop(self) -> LoopState | None:
        """The state of the loop that runs the hook, or ``None`` while no loop does."""
        return self._loop

    def set_loop(self, loop: LoopState) -> None:
        """Give the hook the state of the loop that runs it (called before ``begin``)."""
        self.loop = loop

    def epoch_begin(self, epoch: int) -> None:
        """Called at the start of each epoch, before its first step."""

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Called at the end of each epoch.

        Args:
            epoch: The epoch that ended, counted from 0.
            logs: Means over the epoch of the fetched values, and ``val_<name>`` means of
                the validation pass when one ran. Hooks earlier in the list may add keys;
                later hooks see them.
        """

    def validation_begin(self) -> None:
        """Called before the validation pass at the end of an epoch."""

    def validation_batch_begin(self, step: int) -> None:
        """Called before each validation step."""

    def validation_batch_end(self, step: int, logs: dict[str, float]) -> None:
        """Called after each validation step with the running means so far."""

    def validation_end(self, logs: dict[str, float]) -> None:
        """Called after the validation pass with its means (names without ``val_``)."""

    def cancel(self) -> bool:
        """Unblock a step waiting on something this hook owns (an input queue).

        Called from another thread (:class:`~tfr_hooks.StopOnSignal`'s watcher) when a
        signal finds the main thread blocked. Override it in a hook that owns blocking
        input; the loop lists such hooks in ``loop.input_cancels``.

        Returns:
            Whether there was anything to cancel.
        """
        return False

    def translate_error(self, error: BaseException) -> BaseException | None:
        """Offer a clearer exception for an error that ended the run.

        Loops call this on each hook when a step, or a hook, raised. The first hook that
        returns an exception wins; it is raised ``from`` the original error.

        Args:
            error: The exception that ended the run.

        Returns:
            A replacement exception, or ``None`` to leave the error as it is.
        """
        return None


@dataclass(frozen=True)
class HookCapabilities:
    """What a loop asks a hook about; see the attributes of :class:`Hook`."""

    requires_session: bool = False
    needs_model_state: bool = False
    owns_signals: tuple[signal.Signals, ...] = ()
    chief_only: bool = False
    needs_every_step: bool = False


_CHIEF_ONLY_STOCK = (
    tf.compat.v1.train.CheckpointSaverHook,
    tf.compat.v1.train.SummarySaverHook,
)


def capabilities_of(hook: Any) -> HookCapabilities:
    """The capabilities a loop asks ``hook`` about, as :class:`Hook` declares them.

    A :class:`Hook` answers with its class attributes. Any other ``SessionRunHook``
    (TensorFlow's stock hooks, or a user's) gets the answers that fit it: it needs a
    session when it comes from TensorFlow (it fetches tensors or runs ops), and it is
    chief-only when it is a stock ``CheckpointSaverHook`` or ``SummarySaverHook``, and it
    needs every step when it has its own ``before_run`` or ``after_run`` (it knows nothing
    of calls that run several steps). So does a :class:`Hook` that leaves
    ``needs_every_step`` at ``None`` and has its own ``before_run`` or ``after_run``.
    """
    if isinstance(hook, Hook):
        every_step = hook.needs_every_step
        return HookCapabilities(
            requires_session=bool(hook.requires_session),
            needs_model_state=bool(hook.needs_model_state),
            owns_signals=tuple(hook.owns_signals),
            chief_only=bool(hook.chief_only),
            needs_every_step=_has_step_methods(hook) if every_step is None else bool(every_step),
        )
    return HookCapabilities(
        requires_session=type(hook).__module__.startswith("tensorflow."),
        chief_only=isinstance(hook, _CHIEF_ONLY_STOCK),
        needs_every_step=_has_step_methods(hook),
    )


def _has_step_methods(hook: Any) -> bool:
    """Whether ``hook``'s class has a ``before_run`` or ``after_run`` of its own."""
    return any(
        getattr(type(hook), name) is not getattr(SessionRunHook, name)
        for name in ("before_run", "after_run")
    )


def check_hooks(hooks: Iterable[Any] | None, *, argument: str = "hooks") -> list[Any]:
    """Validate a user's hook list.

    Args:
        hooks: ``SessionRunHook`` instances (``tfr_hooks.Hook`` included), or ``None``.
        argument: The argument name to put in the error message.

    Returns:
        The hooks as a list.

    Raises:
        TypeError: If ``hooks`` is not an iterable of ``SessionRunHook`` instances.
    """
    if hooks is None:
        return []
    if isinstance(hooks, (SessionRunHook, str, bytes)) or not isinstance(hooks, Iterable):
        raise TypeError(
            expected(argument, "a list of tf.compat.v1.train.SessionRunHook instances", hooks)
        )
    result = list(hooks)
    for i, hook in enumerate(result):
        if not isinstance(hook, SessionRunHook):
            what = "a tf.compat.v1.train.SessionRunHook (for example a tfr_hooks.Hook)"
            message = expected(f"{argument}[{i}]", what, hook)
            raise TypeError(f"{message} of type {type(hook).__name__}")
    return result


class HookList:
    """Calls a list of hooks in order; epoch events reach only :class:`Hook` subclasses.

    Args:
        hooks: The hooks, in the order they are called.
    """

    def __init__(self, hooks: Sequence[Any]) -> None:
        self.hooks: list[Any] = list(hooks)
        self._ours: list[Hook] = [h for h in self.hooks if isinstance(h, Hook)]
        #: The hooks whose ``begin`` returned in the current (or last) run, in order.
        self.begun: list[Any] = []

    def __iter__(self) -> Any:
        return iter(self.hooks)

    def __len__(self) -> int:
        return len(self.hooks)

    def set_loop(self, loop: LoopState) -> None:
        """Attach the loop state to every :class:`Hook`, with their input cancels."""
        for hook in self._ours:
            hook.set_loop(loop)
        # a hook that overrides Hook.cancel owns input a signal may need to unblock
        loop.input_cancels = tuple(
            h.cancel for h in self._ours if type(h).cancel is not Hook.cancel
        )

    def begin(self) -> None:
        """Call ``begin`` on every hook; those whose ``begin`` returned are ``begun``."""
        self.begun = []
        for hook in self.hooks:
            hook.begin()
            self.begun.append(hook)

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Call ``after_create_session`` on every hook."""
        for hook in self.hooks:
            hook.after_create_session(session, coord)

    def before_run(self, run_context: Any) -> list[Any]:
        """Call ``before_run`` on every hook; return what each asked for (or ``None``)."""
        return [hook.before_run(run_context) for hook in self.hooks]

    def after_run(
        self,
        run_context: Any,
        hook_results: Sequence[Any] | None = None,
        options: Any = None,
        run_metadata: Any = None,
    ) -> None:
        """Call ``after_run`` on every hook with the results of what it asked for.

        Args:
            run_context: The context ``before_run`` got.
            hook_results: Each hook's fetched results (``None`` for all when absent).
            options: The ``RunOptions`` the step ran with.
            run_metadata: The step's ``RunMetadata``.
        """
        options = options if options is not None else tf.compat.v1.RunOptions()
        run_metadata = run_metadata if run_metadata is not None else tf.compat.v1.RunMetadata()
        results = hook_results if hook_results is not None else [None] * len(self.hooks)
        for hook, result in zip(self.hooks, results, strict=True):
            hook.after_run(
                run_context,
                SessionRunValues(results=result, options=options, run_metadata=run_metadata),
            )

    def epoch_begin(self, epoch: int) -> None:
        """Call ``epoch_begin`` on every :class:`Hook`."""
        for hook in self._ours:
            hook.epoch_begin(epoch)

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Call ``epoch_end`` on every :class:`Hook`, sharing one ``logs`` dict."""
        for hook in self._ours:
            hook.epoch_end(epoch, logs)

    def validation_begin(self) -> None:
        """Call ``validation_begin`` on every :class:`Hook`."""
        for hook in self._ours:
            hook.validation_begin()

    def validation_batch_begin(self, step: int) -> None:
        """Call ``validation_batch_begin`` on every :class:`Hook`."""
        for hook in self._ours:
            hook.validation_batch_begin(step)

    def validation_batch_end(self, step: int, logs: dict[str, float]) -> None:
        """Call ``validation_batch_end`` on every :class:`Hook`."""
        for hook in self._ours:
            hook.validation_batch_end(step, logs)

    def validation_end(self, logs: dict[str, float]) -> None:
        """Call ``validation_end`` on every :class:`Hook`."""
        for hook in self._ours:
            hook.validation_end(logs)

    def translate_error(self, error: BaseException) -> BaseException:
        """Return the first clearer exception a :class:`Hook` offers for ``error``."""
        for hook in self._ours:
            try:
                better = hook.translate_error(error)
            except Exception:  # a broken translator must not hide the real error
                logger.exception("%s.translate_error failed", type(hook).__name__)
                continue
            if better is not None and better is not error:
                better.__cause__ = error
                return better
        return error


def call_all(calls: Iterable[Callable[[], object]]) -> BaseException | None:
    """Run every call even if some raise; return the first exception, log the rest."""
    first: BaseException | None = None
    for call in calls:
        try:
            call()
        except BaseException as exc:
            if first is None:
                first = exc
            else:
                logger.error("Error during cleanup, after an earlier one", exc_info=exc)
    return first
