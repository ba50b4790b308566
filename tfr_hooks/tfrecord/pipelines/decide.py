"""Which pipeline to use: one pure decision over declared sizes and measured rates.

Three consumers ask the same question and must give the same answer for the same facts:
the readers' automatic choice (``in_memory="auto"``,
:func:`~tfr_hooks.tfrecord.pipelines.pipeline.choose_kind`), the input report's remedy
(:func:`~tfr_hooks.input_report.remedy`) and ``tfr-hooks measure``'s recommendation
(:func:`~tfr_hooks.measure.recommend`). Each states what it knows as a :class:`DataFacts`
and :func:`decide` returns a :class:`Decision`: a
:class:`~tfr_hooks.tfrecord.pipelines.options.PipelineKind` and the reason, in words. Each consumer
then says it in its own voice (a log line, a remedy, a recommendation with a command).

The rule, by the sizes (:func:`decide` without measured rates):

1. The decoded data (``map_fn``'s output when there is one) fits the memory budget:
   :attr:`~PipelineKind.MEMORY_DECODED` (decode once, gather batches from memory).
2. Else the parsed records fit it: :attr:`~PipelineKind.MEMORY_ENCODED` (hold them, run
   ``map_fn`` on every batch).
3. Else the files hold several examples a record, or their records are small (under
   :data:`SMALL_RECORD_BYTES` on average): :attr:`~PipelineKind.PACKED` (parse many
   examples a record; for files of one example a record, this is the advice to write
   packed shards: a reader streams the files it has).
4. Else :attr:`~PipelineKind.STREAMED`.

With measured rates, the fastest measured pipeline wins among those the data allows
(in memory only when the decoded data fits); when streaming is the fastest and packed
shards were not timed, rule 3 still applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tfr_hooks.tfrecord.pipelines.options import PipelineKind

__all__ = ["SMALL_RECORD_BYTES", "DataFacts", "Decision", "decide", "size_text"]

#: A mean stored record smaller than this gains from packing several examples per record.
SMALL_RECORD_BYTES = 1024


@dataclass(frozen=True)
class DataFacts:
    """What a consumer knows about the data, in plain numbers (``None``: unknown).

    Attributes:
        decoded_nbytes: Bytes the decoded data takes in memory (``map_fn``'s output when
            there is one, else the parsed records); ``None`` when unknown, or when
            ``map_fn``'s output is not of one fixed shape (it cannot be held).
        encoded_nbytes: Bytes the parsed records take in memory when ``map_fn`` decodes
            them further (then ``map_fn`` runs on every batch); ``None`` when unknown or
            when there is no ``map_fn`` (the decoded data is the parsed records).
        memory_budget: Bytes the data may take in memory.
        record_nbytes: Mean bytes of a stored record.
        examples_per_record: Examples stored per record (more than 1: packed shards).
        rates: Measured examples per second by kind; a kind maps to ``None`` when it was
            tried but could not be timed, and is absent when it was not tried.
        service_rate: Measured examples per second of the streamed pipeline through a
            tf.data service, or ``None``.
    """

    decoded_nbytes: int | None = None
    encoded_nbytes: int | None = None
    memory_budget: int | None = None
    record_nbytes: float | None = None
    examples_per_record: int = 1
    rates: Mapping[PipelineKind, float | None] = field(default_factory=dict)
    service_rate: float | None = None

    @property
    def fits(self) -> bool:
        """Whether the decoded data is known to fit the memory budget."""
        return _within(self.decoded_nbytes, self.memory_budget)

    @property
    def too_big(self) -> bool:
        """Whether the decoded data is known not to fit the memory budget."""
        known = self.decoded_nbytes is not None and self.memory_budget is not None
        return known and not self.fits

    @property
    def small_records(self) -> bool:
        """Whether the stored records are known to be small (see :data:`SMALL_RECORD_BYTES`)."""
        return self.record_nbytes is not None and self.record_nbytes < SMALL_RECORD_BYTES


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` chose.

    Attributes:
        kind: The pipeline to use.
        reason: Why, in words (a clause, no final full stop).
        service: Whether to read it through the tf.data service (measured fastest).
        measured: Whether measured rates decided (else the sizes did).
    """

    kind: PipelineKind
    reason: str
    service: bool = False
    measured: bool = False


def decide(facts: DataFacts) -> Decision:
    """The pipeline to use for ``facts`` (the rule is in this module's docstring).

    Args:
        facts: What is known about the data.

    Returns:
        The :class:`Decision`.

    Examples:
        >>> decide(DataFacts(decoded_nbytes=4000, memory_budget=10**6)).kind
        <PipelineKind.MEMORY_DECODED: 'memory_decoded'>
        >>> decide(DataFacts(decoded_nbytes=10**9, memory_budget=10**6,
        ...                  record_nbytes=200.0)).kind
        <PipelineKind.PACKED: 'packed'>
    """
    timed = {kind: rate for kind, rate in facts.rates.items() if rate}
    if not facts.fits:  # in memory counts only when the data fits
        timed = {kind: rate for kind, rate in timed.items() if not kind.in_memory}
    if not timed and not facts.service_rate:
        return _by_size(facts)
    best = max(timed, key=lambda kind: timed[kind] or 0.0, default=None)
    if best is None or (facts.service_rate or 0.0) > (timed[best] or 0.0):
        return Decision(PipelineKind.STREAMED, "it reads fastest", service=True, measured=True)
    untimed = PipelineKind.PACKED not in timed and facts.examples_per_record == 1
    if best is PipelineKind.STREAMED and untimed and facts.small_records:
        return Decision(  # rule 3: packed shards were not timed, the small records decide
            PipelineKind.PACKED,
            f"the records are small ({facts.record_nbytes:.0f} bytes on average) and "
            "packed shards were not timed",
        )
    return Decision(best, "it reads fastest", measured=True)


def _by_size(facts: DataFacts) -> Decision:
    """The decision by the sizes alone (rules 1 to 4)."""
    budget = size_text(facts.memory_budget or 0)
    if facts.fits:
        return Decision(
            PipelineKind.MEMORY_DECODED,
            f"the decoded data ({size_text(facts.decoded_nbytes or 0)}) fits the memory "
            f"budget ({budget})",
        )
    if _within(facts.encoded_nbytes, facts.memory_budget):
        return Decision(
            PipelineKind.MEMORY_ENCODED,
            f"the decoded data does not fit the memory budget ({budget}) but the parsed "
            f"records ({size_text(facts.encoded_nbytes or 0)}) do",
        )
    if facts.examples_per_record > 1:
        return Decision(
            PipelineKind.PACKED,
            f"the files are packed shards ({facts.examples_per_record} examples a record)",
        )
    if facts.small_records:
        return Decision(
            PipelineKind.PACKED,
            f"the records are small ({facts.record_nbytes:.0f} bytes on average) and the "
            "data does not fit in memory",
        )
    return Decision(PipelineKind.STREAMED, "the data does not fit in memory")


def _within(nbytes: int | None, budget: int | None) -> bool:
    return nbytes is not None and budget is not None and nbytes <= budget


def size_text(nbytes: float) -> str:
    """A byte count in decimal units: ``"512 B"``, ``"1.5 KB"``, ``"2.0 GB"``."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(nbytes) < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} GB"  # pragma: no cover
