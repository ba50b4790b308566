"""``steps_per_execution="auto"``: how many steps a loop's call runs, chosen from measured calls.

A call of :class:`~tfr_hooks.FunctionLoop`'s compiled function runs up to
``steps_per_execution`` steps; hooks see each call once. Every call costs a fixed
*overhead* ``o`` (the hooks' ``before_run``/``after_run``, the engine's Python, the call
of the ``tf.function`` itself) on top of the steps' time ``k * s``. The engine times
every call (hooks included) and hands it to the loop's :class:`AutoSteps` hook (a call
observer, :mod:`tfr_hooks.calls`), whose :class:`StepsTuner` fits ``t(k) = o + k * s``
and picks, among the powers of two up to :data:`MAX_STEPS`:

* the smallest ``k`` whose overhead is at most :data:`OVERHEAD_SHARE` (1%) of the
  steps' time (``o <= 0.01 * k * s``);
* but never one whose call would last longer than :data:`CALL_SECS` (half a second):
  hooks, progress bars, stop requests and signals are then answered at least twice a
  second. A step slower than that runs one at a time.

How it gets there: it starts at 1, and climbs (2x, then at most 4x at a time, never past the
half-second bound as the calls so far predict it) once :data:`SAMPLES` calls of the
current value were timed, fitting ``o`` and ``s`` on the medians of every value tried;
it settles at the first value the fit does not ask to leave (a first epoch of a few
hundred steps is enough). The first call of a run (tracing) is not measured.

Settled, it keeps watching: when the median of the last :data:`SAMPLES` calls is more
than twice, or less than half, what the fit predicts (the step's cost changed: another
phase of the model, a slower input, a loaded machine), it refits ``s`` from them and
moves to the value the rule gives; a single call longer than twice :data:`CALL_SECS`
brings it down at once, with none of the calls timed before kept (they saw another
cost); the watch then keeps it there if the cost stays, or brings it back up when it
was a pause (with no overhead fitted yet, the climb starts afresh from the most steps
the bound allows). The factor-2 band keeps it still under ordinary noise. A value
held at 1 because the first calls were too slow to try 2 (a loaded machine at the start)
climbs again once the calls leave room for more steps.

When the calls do not fit the model (a value's calls cost more a step than a smaller
value's, by more than a quarter): they are timed again, at most twice a run (a pause
while they were timed); after that, or when the fit finds no overhead at all, the value
settles on the one timed whose calls cost least a step. On a loaded machine a longer
call is preempted more, so its steps do cost more, and the fit alone would climb too far
or fall to 1. That value stays until its calls become twice as slow or fast, when the
climb starts again from it.
Validation calls have a tuner of their own (their steps cost less).

The tuner is a state machine: its :class:`Phase` is ``CLIMBING``, then one of three
settled phases, ``FITTED`` (watched against the fit), ``HELD`` (the first calls too slow
to try more) or ``CHEAPEST`` (the model does not fit); each phase has one method that
decides where the next calls go, and a far-too-long call starts over from any of them.

``"auto"`` is :class:`~tfr_hooks.FunctionLoop`'s default. What holds it at 1: a hook
that needs every step (:attr:`~tfr_hooks.Hook.needs_every_step`: declared ``True``, or
left at ``None`` by a hook with its own ``before_run``/``after_run``; a
:class:`~tfr_hooks.KerasCallbacks` holding a callback whose batch methods come from
your code rather than Keras'; a plain ``SessionRunHook`` with its own
``before_run``/``after_run``), and a multi-worker strategy (every worker must run the
same calls, and the durations differ between them). The loop logs once which one.

The chosen value is ``loop.steps_per_execution`` for hooks, and each epoch's value is in
the history under :data:`HISTORY_KEY`.
"""

from __future__ import annotations

import enum
import logging
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tfr_hooks.checks import check_positive_int, expected
from tfr_hooks.hooks import Hook, capabilities_of

if TYPE_CHECKING:
    from tfr_hooks.calls import Call

__all__ = [
    "AUTO",
    "HISTORY_KEY",
    "OVERHEAD_SHARE",
    "CALL_SECS",
    "MAX_STEPS",
    "SAMPLES",
    "AutoSteps",
    "Phase",
    "StepsTuner",
    "check_steps_per_execution",
    "choose",
    "fit",
]

logger = logging.getLogger(__name__)

#: The value of ``steps_per_execution`` that asks the loop to choose it.
AUTO = "auto"
#: The history key of each epoch's ``steps_per_execution`` (the value at its end).
HISTORY_KEY = "input/steps_per_execution"
#: The largest share of a call's steps' time its overhead may take.
OVERHEAD_SHARE = 0.01
#: The longest call the rule chooses, in seconds (hooks run at least twice a second).
CALL_SECS = 0.5
#: The largest value chosen.
MAX_STEPS = 1024
#: Calls timed at a value before deciding (their median is taken).
SAMPLES = 3
#: How much faster or slower than predicted settled calls must be to move the value.
_BAND = 2.0
#: The most the value grows in one move.
_GROWTH = 4
#: How much more a step may cost in a call of more steps before those calls are timed
#: again (the model says it costs less: such calls saw a pause, not the step's cost).
_SLACK = 1.25
#: How many times a run times calls again for that reason, at the most.
_RETRIES = 2


def check_steps_per_execution(value: object, name: str = "steps_per_execution") -> int | str:
    """Return ``value`` if it is a positive int or ``"auto"``.

    Raises:
        ValueError: For another value.
    """
    if isinstance(value, str):
        if value != AUTO:
            raise ValueError(expected(name, "a positive integer or 'auto'", value))
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(expected(name, "a positive integer or 'auto'", value))
    return check_positive_int(value, name)


def _power_of_two_at_most(value: float) -> int:
    k = 1
    while k * 2 <= value:
        k *= 2
    return k


def choose(
    overhead: float,
    step_secs: float,
    *,
    share: float = OVERHEAD_SHARE,
    call_secs: float = CALL_SECS,
    maximum: int = MAX_STEPS,
) -> int:
    """The value the rule gives for a per-call ``overhead`` and a step's ``step_secs``.

    The smallest power of two ``k`` with ``overhead <= share * k * step_secs``, at most
    the largest whose call (``overhead + k * step_secs``) fits in ``call_secs``, within
    ``[1, maximum]``.
    """
    overhead, step_secs = max(overhead, 0.0), max(step_secs, 1e-9)
    k = 1
    while k < maximum and overhead > share * k * step_secs:
        k *= 2
    cap = _power_of_two_at_most(max(1.0, (call_secs - overhead) / step_secs))
    return max(1, min(k, cap, maximum))


def fit(times: dict[int, float]) -> tuple[float, float] | None:
    """``(overhead, step_secs)`` of ``t(k) = o + k * s`` fitted to call times by steps.

    A least-squares fit weighted by ``1 / t**2`` (the noise of a timing is relative to
    it); ``None`` with fewer than two step counts. ``o`` is at least 0 and ``s`` positive.
    """
    if len(times) < 2:
        return None
    weights = {k: 1.0 / max(t, 1e-12) ** 2 for k, t in times.items()}
    total = sum(weights.values())
    mean_k = sum(w * k for k, w in weights.items()) / total
    mean_t = sum(w * times[k] for k, w in weights.items()) / total
    var = sum(w * (k - mean_k) ** 2 for k, w in weights.items())
    cov = sum(w * (k - mean_k) * (times[k] - mean_t) for k, w in weights.items())
    slope = cov / var if var > 0 else 0.0
    if slope <= 0:  # the steps cost nothing measurable next to the call
        slope = min(t / k for k, t in times.items()) * 1e-3
    return max(0.0, mean_t - slope * mean_k), slope


class Phase(enum.Enum):
    """Where a :class:`StepsTuner` is; each phase has one method that leaves it.

    ``CLIMBING`` → (:meth:`StepsTuner._climb`) ``CLIMBING`` (a larger value, or the same
    timed again), ``FITTED``, ``HELD`` or ``CHEAPEST``. From a settled phase, the
    watch of the last :data:`SAMPLES` calls: ``FITTED`` → (:meth:`StepsTuner._watch_fit`)
    ``FITTED`` at the value the refitted cost gives; ``HELD`` →
    (:meth:`StepsTuner._watch_held`) ``CLIMBING`` once the calls leave room for more
    steps; ``CHEAPEST`` → (:meth:`StepsTuner._watch_cheapest`) ``CLIMBING`` once its
    calls are twice as slow or fast. From any phase, a far-too-long call
    (:meth:`StepsTuner._start_over`) → ``FITTED`` with an overhead fitted, else
    ``CLIMBING``.
    """

    #: Timing values on the way up (2x, then at most 4x at a time).
    CLIMBING = "climbing"
    #: Settled where the fit of ``t(k) = o + k * s`` puts it; watched against the fit.
    FITTED = "fitted"
    #: Settled with no fit: the first calls were too slow to try more steps.
    HELD = "held"
    #: Settled on the value timed whose calls cost least a step (the model does not fit).
    CHEAPEST = "cheapest"


class StepsTuner:
    """Chooses a loop's ``steps_per_execution`` from the durations of its calls.

    Pure: it sees only ``(steps, limit, seconds)`` of each call (see the module's rule),
    and is a state machine: its :class:`Phase` (:attr:`phase`) says which method the next
    decision calls. Besides the phase it keeps the calls timed at each value, the
    retries left, and the most steps an epoch lets a call run.

    Args:
        share: :data:`OVERHEAD_SHARE`.
        call_secs: :data:`CALL_SECS`.
        maximum: :data:`MAX_STEPS`.
        samples: :data:`SAMPLES`.
    """

    def __init__(
        self,
        *,
        share: float = OVERHEAD_SHARE,
        call_secs: float = CALL_SECS,
        maximum: int = MAX_STEPS,
        samples: int = SAMPLES,
    ) -> None:
        self.share, self.call_secs, self.maximum, self.samples = share, call_secs, maximum, samples
        #: The value the next call runs with.
        self.value = 1
        #: The :class:`Phase`: what the next decision does.
        self.phase = Phase.CLIMBING
        #: ``(overhead, step_secs)`` as last fitted, or ``None``.
        self.model: tuple[float, float] | None = None
        self._times: dict[int, deque[float]] = {}
        self._fresh = 0  # calls at ``value`` since it was set or last checked
        self._skip = True  # the next call is a run's first (tracing): not timed
        self._clamped: list[int] = []  # the limits of the last calls cut to less than value
        self._ceiling = maximum  # the most steps a call was let run (a short epoch)
        self._retries = 0  # calls timed again this run, having seen a pause
        self._cheapest: float | None = None  # CHEAPEST: its calls' median once there

    @property
    def settled(self) -> bool:
        """Whether the climb is over (the value moves only when the cost changes)."""
        return self.phase is not Phase.CLIMBING

    def restart(self) -> None:
        """A new run: its first call (which may trace) is not measured."""
        self._skip = True
        self._clamped, self._ceiling = [], self.maximum
        self._retries = 0

    def observe(self, steps: int, limit: int, secs: float) -> int:
        """Take the duration of a call of ``steps`` steps run with ``limit``; return the value.

        Calls cut short (the epoch's or the data's end) are kept for the fit only.
        """
        if self._skip or steps <= 0:
            self._skip = False
            return self.value
        if self.value > 1 and secs > 2 * self.call_secs:  # far too long: down at once
            return self._start_over(steps, secs)
        self._times.setdefault(steps, deque(maxlen=self.samples)).append(secs)
        if limit < self.value:
            return self._clamp(limit)
        self._clamped = []
        if steps != self.value:
            return self.value
        self._fresh += 1
        if self._fresh < self.samples:
            return self.value
        if self.phase is Phase.CLIMBING:
            self._fresh = 0
            return self._climb()
        # settled: the last calls' median, at every call
        return _WATCHES[self.phase](self)

    # --- transitions, one per phase, and the far-too-long call from any -------------------

    def _start_over(self, steps: int, secs: float) -> int:
        """Any phase, a call far longer than the bound: down at once, from its cost.

        The step's cost changed, or the machine paused: every call timed so far saw
        another cost, so none is kept (a climb that used them would bring back a value
        whose calls break the bound). With an overhead fitted (``FITTED``), the value is
        the rule's for this call's cost a step, and the watch compares the next calls with
        it: the value stays if the cost stays, and goes back up at once if it was a pause.
        With none fitted yet (``CLIMBING``), the climb starts afresh from the most steps
        the bound allows at that cost.
        """
        step_secs = secs / steps
        self._times = {}
        self._cheapest = None
        self._clamped = []
        if self.model is not None:
            self.model = (self.model[0], step_secs)
            self.phase = Phase.FITTED
            value = choose(*self.model, **self._bounds())
        else:
            self.phase = Phase.CLIMBING
            value = min(self._most_steps(step_secs), self.maximum, self._ceiling)
        moved = self._move(value, "a slow call")
        self._fresh = 0
        return moved

    def _climb(self) -> int:
        """``CLIMBING``, :data:`SAMPLES` calls of the value timed: up, or settle."""
        medians = self._medians()
        now = medians[self.value]
        below = max((k for k in medians if k < self.value), default=None)
        if below is not None and now / self.value > _SLACK * medians[below] / below:
            # more steps a call cost more a step, which t(k) = o + k * s cannot give: a
            # pause while they were timed (time them again), or a loaded machine
            if self._retries < _RETRIES:
                self._retries += 1
                del self._times[self.value]
                return self.value
            return self._settle_on_cheapest(medians)
        self.model = fit(medians)
        if self.model is not None and self.model[0] <= 0.0:  # no overhead: not that model
            return self._settle_on_cheapest(medians)
        # one value timed so far: try twice as many
        target = self.value * 2 if self.model is None else choose(*self.model, **self._bounds())
        if target <= self.value:
            self.phase = Phase.FITTED
            return self._move(target, "settled")
        # never past the bound as the calls so far predict it (no overhead assumed)
        cap = self._most_steps(now / self.value)
        grown = min(target, self.value * _GROWTH, cap, self.maximum, self._ceiling)
        if grown <= self.value:  # the bound or the epoch leaves no room
            self.phase = Phase.HELD if self.model is None else Phase.FITTED
            return self.value
        return self._move(grown, "")

    def _settle_on_cheapest(self, medians: dict[int, float]) -> int:
        """``CLIMBING`` → ``CHEAPEST``: the value timed whose calls cost least a step.

        On a loaded machine a longer call costs more a step (it is preempted more), so the
        fit of ``t(k) = o + k * s`` would climb too far, or find no overhead and fall to 1.
        The value then stays until its calls become twice as slow or fast
        (:meth:`_watch_cheapest`), when the climb starts again from it.
        """
        best = min(medians, key=lambda k: medians[k] / k)
        self.model = None
        self.phase = Phase.CHEAPEST
        self._cheapest = None if best != self.value else medians[best]
        return self._move(best, "settled on the calls that cost least a step")

    def _watch_cheapest(self) -> int:
        """``CHEAPEST``: climb again from the value once its calls are twice as slow or fast."""
        now = statistics.median(self._times[self.value])
        if self._cheapest is None:  # its first calls since the move
            self._cheapest = now
        elif not self._cheapest / _BAND <= now <= self._cheapest * _BAND:
            logger.info("steps_per_execution='auto': the cost changed; timing afresh")
            self._times = {self.value: self._times[self.value]}
            self._cheapest = None
            self.phase = Phase.CLIMBING
            self._fresh = 0
            return self._climb()
        return self.value

    def _watch_held(self) -> int:
        """``HELD``: climb again once the calls leave room for more steps.

        Settled on the first calls alone, too slow then to try twice the steps (a loaded
        machine at the start, a slow first read).
        """
        now = statistics.median(self._times[self.value])
        if self._most_steps(now / self.value) > self.value:
            self.phase = Phase.CLIMBING
            return self._climb()
        return self.value

    def _watch_fit(self) -> int:
        """``FITTED``: calls twice as slow or fast as the fit says refit the step's cost."""
        assert self.model is not None  # FITTED always has one
        overhead, step_secs = self.model
        now = statistics.median(self._times[self.value])
        predicted = overhead + self.value * step_secs
        if predicted / _BAND <= now <= predicted * _BAND:
            return self.value
        step_secs = max(now - overhead, now * 1e-3) / self.value
        self.model = (overhead, step_secs)
        return self._move(choose(overhead, step_secs, **self._bounds()), "the cost changed")

    # --- what the transitions share --------------------------------------------------------

    def _clamp(self, limit: int) -> int:
        """A call the loop let run fewer steps than the value (the epoch's end).

        When :data:`SAMPLES` calls in a row were cut so, an epoch is shorter than the
        value: the longest of them becomes the value and the most it may be in this run.
        """
        self._clamped.append(limit)
        if len(self._clamped) < self.samples:
            return self.value
        self._ceiling = max(self._clamped)
        self._clamped = []
        return self._move(min(self.value, self._ceiling), "")

    def _most_steps(self, step_secs: float) -> int:
        """The most steps (a power of two) a call may run within the bound, no overhead."""
        return _power_of_two_at_most(max(1.0, self.call_secs / step_secs))

    def _bounds(self) -> dict[str, Any]:
        maximum = min(self.maximum, self._ceiling)
        return {"share": self.share, "call_secs": self.call_secs, "maximum": maximum}

    def _medians(self) -> dict[int, float]:
        return {k: statistics.median(t) for k, t in self._times.items() if t}

    def _move(self, value: int, why: str) -> int:
        if value != self.value:
            if why:
                logger.info("steps_per_execution='auto': %d -> %d (%s)", self.value, value, why)
            self._times.pop(value, None)  # measured afresh
            self._fresh = 0
        self.value = value
        return value


#: What a settled phase does with the median of the last calls.
_WATCHES: dict[Phase, Callable[[StepsTuner], int]] = {
    Phase.FITTED: StepsTuner._watch_fit,
    Phase.HELD: StepsTuner._watch_held,
    Phase.CHEAPEST: StepsTuner._watch_cheapest,
}


class AutoSteps(Hook):
    """A loop's ``steps_per_execution="auto"``: a tuner for training calls, one for validation.

    A hook the loop installs first and keeps across its runs. It observes every call the
    engine times (:mod:`tfr_hooks.calls`) and sets ``loop.steps_per_execution`` for the
    next one; validation calls get the validation tuner's value from
    ``validation_begin`` to ``validation_end``; at ``epoch_end`` the epoch's value joins
    the history under :data:`HISTORY_KEY`. When a hook needs every step (or ``held``
    says why it must stay at 1), both stay at 1 and the first run logs why, once.

    Args:
        hooks: The loop's hooks.
        held: Another reason to stay at 1 (a multi-worker strategy), or ``None``.
    """

    needs_every_step = False

    def __init__(self, hooks: Sequence[Any], *, held: str | None = None) -> None:
        self.train = StepsTuner()
        self.validation = StepsTuner()
        holders = [
            f"hooks[{i}]={hook!r}"
            for i, hook in enumerate(hooks)
            if capabilities_of(hook).needs_every_step
        ]
        #: Why the value stays at 1, or ``None`` when it is tuned.
        self.held_by = held or (f"{', '.join(holders)} needs every step" if holders else None)
        self._told = False
        self._train_value = 1  # the training value, kept during a validation pass

    @property
    def tuned(self) -> bool:
        """Whether the value is chosen from the calls (nothing holds it at 1)."""
        return self.held_by is None

    def start_run(self) -> None:
        """A run starts: its first calls are not measured; say once what holds the value."""
        self.train.restart()
        self.validation.restart()
        if self.held_by is not None and not self._told:
            self._told = True
            logger.info("steps_per_execution='auto' stays at 1: %s.", self.held_by)

    def value(self, tuner: StepsTuner) -> int:
        """The value ``tuner``'s calls run with: 1 while something holds it."""
        return tuner.value if self.tuned else 1

    def observe(self, tuner: StepsTuner, steps: int, limit: int, secs: float) -> int:
        """:meth:`StepsTuner.observe` unless the value is held; return the value."""
        return tuner.observe(steps, limit, secs) if self.tuned else 1

    # --- the hook: what the engine's events do to ``loop.steps_per_execution`` ---

    def begin(self) -> None:
        """A run starts at the training tuner's value (its first call is not measured)."""
        self.start_run()
        self.loop.steps_per_execution = self.value(self.train)

    def observe_call(self, call: Call) -> None:
        """Time one call (a call observer): the next call's value, from this one's time."""
        tuner = self.validation if call.validation else self.train
        self.loop.steps_per_execution = self.observe(tuner, call.steps, call.limit, call.secs)

    def validation_begin(self) -> None:
        """Validation calls run with the validation tuner's value."""
        self._train_value = self.loop.steps_per_execution
        self.loop.steps_per_execution = self.value(self.validation)

    def validation_end(self, logs: dict[str, float]) -> None:
        """The training value is back."""
        self.loop.steps_per_execution = self._train_value

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """The epoch's value joins the history under :data:`HISTORY_KEY`."""
        self.loop.history_entries[HISTORY_KEY] = float(self.loop.steps_per_execution)
