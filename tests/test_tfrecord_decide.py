"""One decision of the pipeline: the reader's auto choice, the remedy and ``measure`` agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import tfrecord
from tfr_hooks.input_report import InputFacts, InputStats, remedy
from tfr_hooks.measure import Measurement, PipelineRate, recommend
from tfr_hooks.tfrecord import PipelineKind
from tfr_hooks.tfrecord.pipelines.contract import ReadFacts
from tfr_hooks.tfrecord.pipelines.decide import SMALL_RECORD_BYTES, DataFacts, decide

MB = 10**6
BOUND = InputStats(0, 100, 3200, wait_secs=0.5, step_secs=1.0)  # input-bound

#: What each consumer says for each kind: the remedy's advice, the recommendation's start.
ADVICE = {
    PipelineKind.MEMORY_DECODED: "in_memory=True",
    PipelineKind.PACKED: "write packed shards",
    PipelineKind.STREAMED: "The input itself is slow",
}
STARTS = {
    PipelineKind.MEMORY_DECODED: "Hold the data in memory",
    PipelineKind.PACKED: "Write packed shards",
    PipelineKind.STREAMED: "Stream from the files",
}

# (decoded bytes, memory budget, mean record bytes) and the kind they call for
SIZES = [
    pytest.param(10 * MB, 100 * MB, 5000.0, PipelineKind.MEMORY_DECODED, id="fits"),
    pytest.param(10 * MB, 10 * MB, 100.0, PipelineKind.MEMORY_DECODED, id="fits-exactly"),
    pytest.param(10**12, MB, 100.0, PipelineKind.PACKED, id="small-records"),
    pytest.param(10**12, MB, 5000.0, PipelineKind.STREAMED, id="large-records"),
    pytest.param(10**12, MB, SMALL_RECORD_BYTES - 1, PipelineKind.PACKED, id="just-under-small"),
    pytest.param(10**12, MB, float(SMALL_RECORD_BYTES), PipelineKind.STREAMED, id="not-small"),
]


def _measurement(
    decoded: int, budget: int, record: float, rates: dict[str, float | None]
) -> Measurement:
    result = Measurement(
        files=["f"],
        batch_size=32,
        num_examples=1000,
        examples_per_record=1,
        file_bytes=int(record * 1000),
        record_bytes=record,
        decoded_bytes=decoded,
        memory_budget=budget,
    )
    result.rates = [PipelineRate(name, rate) for name, rate in rates.items()]
    return result


@pytest.mark.parametrize("decoded, budget, record, kind", SIZES)
def test_the_remedy_and_the_recommendation_follow_the_decision(
    decoded: int, budget: int, record: float, kind: PipelineKind
) -> None:
    facts = DataFacts(decoded_nbytes=decoded, memory_budget=budget, record_nbytes=record)
    assert decide(facts).kind is kind
    # the remedy of a run streaming these files advises the decided kind
    loop = InputFacts(ReadFacts(kind=PipelineKind.STREAMED), facts)
    advice = remedy(BOUND, loop)
    assert ADVICE[kind].lower() in advice.lower(), advice
    for other in set(ADVICE) - {kind}:
        assert ADVICE[other].lower() not in advice.lower(), advice
    # measure, when only the streamed pipeline ran and the others were not timed
    # (in memory is timed only when it fits; equal rates: the sizes decide)
    rates = {"streamed": 1000.0, "packed": None, "in_memory": None}
    if kind is PipelineKind.MEMORY_DECODED:
        rates = {"streamed": 1000.0, "packed": 1000.0, "in_memory": 1000.5}
    result = _measurement(decoded, budget, record, rates)
    assert result.decision().kind is kind
    assert recommend(result).startswith(STARTS[kind]), recommend(result)
    assert result.to_dict()["recommended_kind"] == kind.value
    # and when nothing could be timed, the sizes alone decide the same
    nothing = _measurement(decoded, budget, record, {"streamed": None})
    assert recommend(nothing).startswith(STARTS[kind]), recommend(nothing)


def test_measured_rates_decide_among_the_kinds_the_data_allows() -> None:
    rates = {PipelineKind.STREAMED: 5e4, PipelineKind.PACKED: 1.4e5}
    fits = DataFacts(decoded_nbytes=MB, memory_budget=10 * MB, record_nbytes=100.0)
    faster = {**rates, PipelineKind.MEMORY_DECODED: 2e5}
    assert decide(DataFacts(**{**vars(fits), "rates": faster})).kind is PipelineKind.MEMORY_DECODED
    too_big = DataFacts(decoded_nbytes=10**12, memory_budget=MB, rates=faster)
    assert decide(too_big).kind is PipelineKind.PACKED  # in memory only when it fits
    service = decide(DataFacts(rates=rates, service_rate=3e5))
    assert (service.kind, service.service, service.measured) == (PipelineKind.STREAMED, True, True)
    slow_packed = DataFacts(record_nbytes=100.0, rates={**rates, PipelineKind.PACKED: 4e4})
    assert decide(slow_packed).kind is PipelineKind.STREAMED  # packed timed, and slower
    untimed = DataFacts(record_nbytes=100.0, rates={PipelineKind.STREAMED: 5e4})
    assert decide(untimed).kind is PipelineKind.PACKED  # packed not timed: small records
    assert decide(DataFacts()).kind is PipelineKind.STREAMED  # nothing known


def test_the_encoded_records_are_held_when_only_they_fit() -> None:
    decision = decide(DataFacts(decoded_nbytes=None, encoded_nbytes=MB, memory_budget=10 * MB))
    assert decision.kind is PipelineKind.MEMORY_ENCODED
    assert "parsed records (1.0 MB)" in decision.reason
    unknown = decide(DataFacts(decoded_nbytes=None, memory_budget=10 * MB))  # not fixed shape
    assert unknown.kind is PipelineKind.STREAMED
    packed = decide(DataFacts(decoded_nbytes=10**12, memory_budget=MB, examples_per_record=8))
    assert packed.kind is PipelineKind.PACKED and "packed shards (8 examples" in packed.reason


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("plain")
    arrays = {"x": np.arange(200 * 3, dtype=np.float32).reshape(200, 3), "y": np.arange(200)}
    tfrecord.write(arrays, directory, shards=2)  # 200 * (12 + 8) = 4,000 bytes decoded
    return directory


# the budget's edge both ways fast; far above it (the same choice as at 4,000) with the slow tests
@pytest.mark.parametrize("budget", [3999, 4000, pytest.param(10**6, marks=pytest.mark.slow)])
def test_the_readers_auto_choice_is_the_decision(plain: Path, budget: int) -> None:
    decoded = 200 * (3 * 4 + 8)
    files = [str(p) for p in sorted(plain.glob("*.tfrecord"))]
    record = sum(Path(f).stat().st_size for f in files) / 200
    facts = DataFacts(decoded_nbytes=decoded, memory_budget=budget, record_nbytes=record)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            plain, 50, in_memory="auto", read_config=tfrecord.ReadConfig(memory_budget=budget)
        )
    decided = decide(facts).kind
    # the reader holds what the decision holds, and otherwise reads the files it has
    assert batches.facts.kind is (decided if decided.in_memory else PipelineKind.STREAMED)
    loop = InputFacts(batches.facts, facts)
    if decided is PipelineKind.MEMORY_DECODED:  # held: no advice to hold it
        assert "in_memory=True" not in remedy(BOUND, loop)
    else:  # streamed small records: the remedy and measure advise packed shards
        assert decided is PipelineKind.PACKED and "write packed shards" in remedy(BOUND, loop)
        rates = {"streamed": 1000.0, "packed": None, "in_memory": None}
        assert recommend(_measurement(decoded, budget, record, rates)).startswith(
            "Write packed shards"
        )
