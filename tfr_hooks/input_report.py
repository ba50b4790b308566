"""Where a run's time goes: the share of step time spent waiting for the next batch.

Both loops measure, in every run, how long each step waited for its input (timestamps
taken inside the step's graph, so the cost is a few microseconds a step) and the wall
time of the epoch's steps. Per epoch this gives an :class:`InputStats`: the share of
step time spent waiting for input and the examples per second. Loops show it to hooks
as ``loop.input_stats`` (before the validation pass and ``epoch_end``), add it to the
run's history under :data:`WAIT_SHARE` and :data:`EXAMPLES_PER_SEC` (keys with a ``/``,
which no Keras metric name has), and :class:`~tfr_hooks.TensorBoardLogger` writes the
same keys as scalars of the ``train`` run (TensorBoard groups them under ``input``).

The share is classed as TensorFlow's profiler classes a step: **input-bound** above 20%,
**moderately input-bound** from 5% to 20%, **not input-bound** under 5%. Once per run
(after its first epoch) and whenever the class changes, the loop logs a verdict at INFO
level: the share, its class, and the change this package offers for the run (hold the
decoded data in memory, write packed shards, raise ``steps_per_execution``, when the data
does not fit in memory add CPU hosts with the tf.data service (docs/data_service.md), or:
the model is the bottleneck, input changes will not help). It never logs a warning.

What is measured, and what is not:

* The wait is the time a step could not start because its batch was not ready: in
  :class:`~tfr_hooks.SessionLoop`, from the start of the ``session.run`` to the end of the
  graph's input ops (``IteratorGetNext``, a queue's dequeue); in
  :class:`~tfr_hooks.FunctionLoop`, from the end of one step to the arrival of the next
  batch, inside the compiled function (the fetch may overlap the step; only what is left
  after the step counts). Restarting the data at the start of an epoch (the
  initializers, or a new iterator and its first batch) counts as waiting too.
* Step time is the epoch's wall time from the restart of the data to the end of its
  last step: hooks' time included, the validation pass not.
* The run's first execution (tracing, graph optimization, the pipeline's warm-up) is
  left out of the first epoch's figures when that epoch has more than one.
* Under ``tf.config.experimental.enable_op_determinism()`` TensorFlow refuses to run
  the timestamp ops ("Timestamp cannot be called when determinism is enabled"): neither
  loop measures the wait then (:func:`tfr_hooks.tf_private.op_determinism_enabled`
  tells), so a deterministic run gets no wait share and no verdict.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfr_hooks.calls import Call
    from tfr_hooks.tfrecord.pipelines.contract import ReadFacts
    from tfr_hooks.tfrecord.pipelines.decide import DataFacts
    from tfr_hooks.tfrecord.pipelines.options import PipelineKind

__all__ = [
    "WAIT_SHARE",
    "EXAMPLES_PER_SEC",
    "HISTORY_KEYS",
    "CORRUPT_RECORDS",
    "INPUT_BOUND",
    "MODERATELY_INPUT_BOUND",
    "NOT_INPUT_BOUND",
    "InputFacts",
    "InputStats",
    "InputReport",
    "EpochClock",
    "classify",
    "remedy",
    "verdict",
    "measure_files",
    "facts_of_read",
]

logger = logging.getLogger(__name__)

#: History key (and TensorBoard tag): the share of step time spent waiting for input.
WAIT_SHARE = "input/wait_share"
#: History key (and TensorBoard tag): training examples per second of step time.
EXAMPLES_PER_SEC = "input/examples_per_sec"
#: The keys a run's history gets for each measured epoch.
HISTORY_KEYS = (WAIT_SHARE, EXAMPLES_PER_SEC)
#: History key: the damaged records the reader skips (``max_corrupt_records`` above 0),
#: the same for every epoch of a run (the reader found them when it was built).
CORRUPT_RECORDS = "input/corrupt_records"

#: The profiler's classes, by the share of step time waiting for input.
INPUT_BOUND = "input-bound"
MODERATELY_INPUT_BOUND = "moderately input-bound"
NOT_INPUT_BOUND = "not input-bound"
_HIGH, _LOW = 0.20, 0.05

#: A step shorter than this is dominated by the per-call overhead of the loop.
SHORT_STEP_SECS = 0.002


def classify(share: float) -> str:
    """The profiler's class of a share of step time spent waiting for input.

    Args:
        share: The share, from 0 to 1.

    Returns:
        :data:`INPUT_BOUND` above 0.20, :data:`MODERATELY_INPUT_BOUND` from 0.05 to 0.20,
        :data:`NOT_INPUT_BOUND` under 0.05.
    """
    if share > _HIGH:
        return INPUT_BOUND
    if share >= _LOW:
        return MODERATELY_INPUT_BOUND
    return NOT_INPUT_BOUND


@dataclass(frozen=True)
class InputStats:
    """One epoch's input measurement.

    Attributes:
        epoch: The epoch, counted from 0.
        steps: The steps measured.
        examples: The examples those steps consumed.
        wait_secs: Seconds the steps spent waiting for their input.
        step_secs: Wall seconds of the measured steps (hooks included).
    """

    epoch: int
    steps: int
    examples: int
    wait_secs: float
    step_secs: float

    @property
    def wait_share(self) -> float:
        """The share of step time spent waiting for input, from 0 to 1."""
        if self.step_secs <= 0:
            return 0.0
        return min(1.0, max(0.0, self.wait_secs / self.step_secs))

    @property
    def examples_per_sec(self) -> float:
        """Training examples per second of step time."""
        return self.examples / self.step_secs if self.step_secs > 0 else 0.0

    @property
    def secs_per_step(self) -> float:
        """Mean wall seconds of a step."""
        return self.step_secs / self.steps if self.steps else 0.0

    @property
    def bound(self) -> str:
        """The profiler's class of :attr:`wait_share` (see :func:`classify`)."""
        return classify(self.wait_share)

    def history(self) -> dict[str, float]:
        """The values the run's history gets for this epoch, by :data:`HISTORY_KEYS`."""
        return {WAIT_SHARE: self.wait_share, EXAMPLES_PER_SEC: self.examples_per_sec}


@dataclass(frozen=True)
class InputFacts:
    """What a loop knows about its input, to choose the remedy of a verdict.

    The reader's facts plus what was measured of its files; ``None`` means unknown (a
    ``tf.data.Dataset`` given to ``FunctionLoop`` says nothing about its files).

    Attributes:
        read: What the reader knows (:class:`~tfr_hooks.tfrecord.ReadFacts`: the
            pipeline kind, the examples a record, the damaged records skipped), or
            ``None``.
        measured: What was measured of the files
            (:class:`~tfr_hooks.tfrecord.pipelines.decide.DataFacts`: the bytes the decoded data
            would take, the memory budget, the mean bytes of a record), or ``None``.
        steps_per_execution: The loop's ``steps_per_execution``; ``None`` for a loop
            without it (``SessionLoop`` runs one step per ``session.run``).
        steps_held_by: Why ``steps_per_execution="auto"`` stays at 1 (a hook that needs
            every step), or ``None`` when nothing holds it.
    """

    read: ReadFacts | None = None
    measured: DataFacts | None = None
    steps_per_execution: int | None = None
    steps_held_by: str | None = None

    @property
    def kind(self) -> PipelineKind | None:
        """The :class:`~tfr_hooks.tfrecord.PipelineKind` read, or ``None``."""
        return None if self.read is None else self.read.kind

    @property
    def corrupt_records(self) -> int | None:
        """The damaged records the reader skips, or ``None`` when it did not look."""
        return None if self.read is None else self.read.corrupt_count


def facts_of_read(
    facts: ReadFacts, *, steps_per_execution: int | None = None, steps_held_by: str | None = None
) -> InputFacts:
    """The :class:`InputFacts` of what a reader knows (its input contract).

    Both loops call it on their data's :class:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts`
    (``Batches.facts``, a ``Source``'s facts), so that the same files give the same facts
    in graph mode and in TF2. A plain dataset's facts name no files: nothing is measured
    then.

    Args:
        facts: What the reader knows.
        steps_per_execution: The loop's ``steps_per_execution``; ``None`` for a loop
            without it.
        steps_held_by: Why ``steps_per_execution="auto"`` stays at 1, if it does.
    """
    measured = None
    if facts.kind is not None and facts.schema is not None:
        measured = measure_files(facts)
    return InputFacts(facts, measured, steps_per_execution, steps_held_by)


def measure_files(facts: ReadFacts) -> DataFacts:
    """What the files of a read measure: decoded bytes, memory budget, bytes a record.

    Args:
        facts: What the reader knows: its files, their schema (the features parsed), the
            examples of one pass (if known) and the examples stored a record.
    """
    from tfr_hooks.tfrecord.errors import TFRecordError
    from tfr_hooks.tfrecord.pipelines.decide import DataFacts
    from tfr_hooks.tfrecord.pipelines.memory import estimate

    files, schema, num_examples = facts.files, facts.schema, facts.examples
    examples_per_record = facts.examples_per_record
    file_bytes = 0
    for path in files:
        try:
            file_bytes += os.path.getsize(path)
        except OSError:  # a remote path: sizes unknown
            file_bytes = -1
            break
    decoded = record = None
    if num_examples:
        lengths: dict[str, float] = {}
        if examples_per_record == 1 and file_bytes >= 0:  # frames and varying lengths
            try:
                lengths = estimate.mean_lengths(files, None, schema)
            except TFRecordError as error:  # the reader reports it; the sizes stay rough
                logger.debug("Lengths not sampled: %s", error)
        decoded = estimate.decoded_nbytes(schema, num_examples, max(file_bytes, 0), lengths)
        records = max(1, num_examples // max(1, examples_per_record))
        record = file_bytes / records if file_bytes >= 0 else None
    return DataFacts(
        decoded_nbytes=decoded,
        memory_budget=estimate.default_memory_budget(),
        record_nbytes=record,
        examples_per_record=examples_per_record,
    )


#: The remedy's words for the tf.data service, when the data does not fit in memory.
_SERVICE_HINT = (
    "; or add CPU to the input with the tf.data service: start "
    "`tfr-hooks data-service dispatcher --port PORT` on one host and "
    "`tfr-hooks data-service worker --dispatcher HOST:PORT` on each CPU host, then read "
    'with tfrecord.dataset(..., service="grpc://HOST:PORT") (see docs/data_service.md)'
)


def remedy(stats: InputStats, facts: InputFacts) -> str:
    """The change this package offers for a run measured as ``stats``.

    The pipeline to move to is :func:`~tfr_hooks.tfrecord.pipelines.decide.decide`'s choice for
    ``facts`` (the same the readers' ``in_memory="auto"`` and ``tfr-hooks measure`` make).
    When the data is read from files and its decoded size does not fit the memory
    budget, the remedy also names the tf.data service and how to start it
    (see docs/data_service.md).

    Args:
        stats: The epoch's measurement.
        facts: What the loop knows about its input.

    Returns:
        One sentence.
    """
    short = stats.secs_per_step < SHORT_STEP_SECS
    spe_hint = ""
    if facts.steps_per_execution == 1 and short:
        spe_hint = f"; steps are short ({stats.secs_per_step * 1000:.2f} ms)" + (
            f" and steps_per_execution='auto' stays at 1 because {facts.steps_held_by}: "
            "declare needs_every_step = False on a hook that works per call (reading "
            "loop.call_steps), or set steps_per_execution to an integer"
            if facts.steps_held_by
            else ", so raise steps_per_execution (e.g. to 32) to pay the per-call overhead "
            "less often"
        )
    if stats.bound == NOT_INPUT_BOUND:
        return "The model is the bottleneck: input changes will not help" + spe_hint + "."
    kind = facts.kind
    if kind is None:
        return (
            "If the decoded data fits in memory, read the files with in_memory='auto' "
            "(tfrecord.dataset or tfrecord.read_batches); if it does not and its records are "
            "small, write packed shards (tfr-hooks convert --examples-per-record 64); "
            "otherwise move per-example work from map_fn to batch_map_fn" + spe_hint + "."
        )
    from tfr_hooks.tfrecord.pipelines.decide import decide
    from tfr_hooks.tfrecord.pipelines.options import PipelineKind

    data = _data_facts(facts)
    chosen = decide(data)
    from_files = not kind.in_memory  # parsed from the files every epoch
    service = _SERVICE_HINT if from_files and data.too_big else ""
    if from_files and chosen.kind is PipelineKind.MEMORY_DECODED:
        return (
            f"{chosen.reason[0].upper()}{chosen.reason[1:]}: read it with in_memory=True "
            "(or 'auto') to decode it once and gather batches from memory" + spe_hint + "."
        )
    single = data.examples_per_record == 1  # files of one example a record
    if from_files and single and chosen.kind is PipelineKind.PACKED:
        return (
            f"{chosen.reason[0].upper()}{chosen.reason[1:]}: write packed shards (tfr-hooks "
            "convert DIR OUT --examples-per-record 64) to parse many examples per record"
            + service
            + spe_hint
            + "."
        )
    return (
        "The input itself is slow: move per-example work from map_fn to batch_map_fn "
        "(vectorized), or read more files at once (num_parallel_reads)" + service + spe_hint + "."
    )


def _data_facts(facts: InputFacts) -> DataFacts:
    """What was measured of the input.

    As :func:`~tfr_hooks.tfrecord.pipelines.decide.decide` takes it.
    """
    from tfr_hooks.tfrecord.pipelines.decide import DataFacts

    measured = facts.measured or DataFacts()
    kind = facts.kind
    if kind is not None and kind.packed and measured.examples_per_record < 2:
        measured = dataclasses.replace(measured, examples_per_record=2)
    return measured


def verdict(stats: InputStats, facts: InputFacts) -> str:
    """The log line of a verdict: the share, its class and the remedy."""
    spe = ""
    if facts.steps_per_execution is not None:
        spe = f" (steps_per_execution={facts.steps_per_execution})"
    return (
        f"Epoch {stats.epoch}: {stats.wait_share:.0%} of step time waiting for input "
        f"({stats.bound}; the profiler's classes: over 20% input-bound, 5-20% moderately, "
        f"under 5% not), {stats.examples_per_sec:,.0f} examples/s over {stats.steps} "
        f"steps{spe}. {remedy(stats, facts)}{_corrupt_note(facts)}"
    )


def _corrupt_note(facts: InputFacts) -> str:
    """The verdict's words on the damaged records skipped, when the reader looked."""
    if facts.corrupt_records is None:
        return ""
    return f" Damaged records skipped (max_corrupt_records): {facts.corrupt_records}" + (
        " (each logged with its file and index when the reader was built)."
        if facts.corrupt_records
        else "."
    )


class InputReport:
    """Logs the verdict of a run: after its first measured epoch, and when the class changes.

    Args:
        facts: What the loop knows about its input, or a function returning it (called
            once, when the first verdict is logged).
    """

    def __init__(self, facts: InputFacts | Callable[[], InputFacts] | None = None) -> None:
        self._facts = facts
        self._last: str | None = None

    def facts(self) -> InputFacts:
        """What the loop knows about its input (computed once)."""
        if callable(self._facts):
            try:
                self._facts = self._facts()
            except Exception:  # a remedy must never end a run
                logger.debug("Could not learn the input's facts", exc_info=True)
                self._facts = InputFacts()
        return self._facts if isinstance(self._facts, InputFacts) else InputFacts()

    def epoch_end(self, stats: InputStats) -> bool:
        """Log the verdict of ``stats`` if it is the run's first or its class changed.

        Returns:
            Whether a verdict was logged.
        """
        if stats.bound == self._last:
            return False
        self._last = stats.bound
        logger.info("%s", verdict(stats, self.facts()))
        return True


class EpochClock:
    """Adds up an epoch's steps, examples, input wait and wall time (for the engine).

    Args:
        clock: The wall clock, in seconds.
        skip_first: Leave the first execution out when more follow (the run's first
            epoch: tracing and warm-up).
    """

    def __init__(self, clock: Callable[[], float], *, skip_first: bool) -> None:
        self._clock = clock
        self._start = clock()
        self._skip = skip_first
        self._all = [0, 0, 0.0]  # steps, examples, wait
        self._after = [0, 0, 0.0]
        self._first_end: float | None = None
        self._end = self._start
        self._restart = 0.0
        self.measured = False

    def restarted(self) -> None:
        """The data was restarted: the time since the clock started was spent on input."""
        self._restart = self._clock() - self._start

    def step(self, steps: int, examples: int, wait: float | None) -> None:
        """Add one execution of ``steps`` steps; ``wait=None`` when it was not measured."""
        self._end = self._clock()
        if wait is None or not steps:
            return
        self.measured = True
        for totals in (self._all, self._after) if self._first_end is not None else (self._all,):
            totals[0] += steps
            totals[1] += examples
            totals[2] += wait
        if self._first_end is None:
            self._first_end = self._end

    def observe_call(self, call: Call) -> None:
        """Add a training call (a call observer, see :mod:`tfr_hooks.calls`)."""
        if not call.validation:
            self.step(call.steps, call.examples, call.input_wait)

    def stats(self, epoch: int) -> InputStats | None:
        """The epoch's :class:`InputStats`, or ``None`` if no step's wait was measured."""
        if not self.measured:
            return None
        start, (steps, examples, wait) = self._start, self._all
        wait += self._restart
        if self._skip and self._after[0] and self._first_end is not None:
            start, (steps, examples, wait) = self._first_end, self._after
        return InputStats(epoch, int(steps), int(examples), float(wait), self._end - start)
