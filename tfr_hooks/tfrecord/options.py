"""The readers' arguments, checked once, and the kind of pipeline they build.

:func:`read_options` checks the arguments :func:`~tfr_hooks.tfrecord.dataset` and
:func:`~tfr_hooks.tfrecord.read_batches` share into one frozen :class:`ReadOptions`,
which the pipeline builder (:mod:`tfr_hooks.tfrecord.pipeline`) reads;
:func:`queue_capacity` holds the checks only the queue pipeline needs. A
:class:`PipelineKind` names what was built, once, for every consumer (``Batches``,
``SessionLoop``, the input report).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfr_hooks.checks import check_non_negative_int, check_positive_int, expected
from tfr_hooks.service.address import check_service_address
from tfr_hooks.tfrecord.pools import DEFAULT_POOL
from tfr_hooks.tfrecord.ragged import PadTo, Shaping, check_shaping

__all__ = [
    "PipelineKind",
    "ReadOptions",
    "read_options",
    "check_servable",
    "queue_capacity",
    "queue_readers",
]


class PipelineKind(enum.Enum):
    """The kind of input pipeline a reader built.

    Attributes:
        STREAMED: ``tf.data`` from shards of one example a record, parsed every epoch.
        PACKED: ``tf.data`` from packed shards (many examples a record).
        MEMORY_DECODED: The decoded data (``map_fn``'s output when given) held in memory.
        MEMORY_ENCODED: The parsed records held in memory, ``map_fn`` run every batch.
        QUEUE: Queue runners (``read_batches(pipeline="queue")``).
    """

    STREAMED = "streamed"
    PACKED = "packed"
    MEMORY_DECODED = "memory_decoded"
    MEMORY_ENCODED = "memory_encoded"
    QUEUE = "queue"

    @property
    def in_memory(self) -> bool:
        """Whether the data is held in memory (decoded or encoded)."""
        return self in (PipelineKind.MEMORY_DECODED, PipelineKind.MEMORY_ENCODED)

    @property
    def packed(self) -> bool:
        """Whether the batches are parsed from packed shards every epoch."""
        return self is PipelineKind.PACKED

    @property
    def pipeline(self) -> str:
        """The ``pipeline`` of ``read_batches`` that builds it: ``"dataset"`` or ``"queue"``."""
        return "queue" if self is PipelineKind.QUEUE else "dataset"


@dataclass(frozen=True)
class ReadOptions:
    """The checked arguments shared by the two readers (see :func:`read_options`).

    Each attribute is the reader argument of the same name (``prefetch``,
    ``deterministic`` and ``autotune`` as :func:`~tfr_hooks.tfrecord.dataset` takes them;
    ``read_batches`` builds with its own fixed values), except ``shaping``: ``pad_to``,
    ``padding_values``, ``bucket_boundaries`` and ``bucket_by``, checked together.
    ``service`` is the tf.data service dispatcher's address as ``"grpc://HOST:PORT"``
    (normalized), or ``None`` to read in this process. ``max_corrupt_records`` is the
    damaged records a build may skip (0: the first raises; see
    :mod:`tfr_hooks.tfrecord.damage`).
    """

    batch_size: int
    shuffle_buffer: int = 0
    seed: int | None = None
    deterministic: bool = True
    num_parallel_reads: int | None = None
    drop_remainder: bool = False
    num_epochs: int | None = 1
    map_fn: Callable[[dict[str, Any]], Any] | None = None
    batch_map_fn: Callable[[Any], Any] | None = None
    prefetch: int | None = None
    autotune: bool = False
    in_memory: bool | str = False
    memory_budget: int | None = None
    shaping: Shaping = field(default_factory=Shaping)
    service: str | None = None
    max_corrupt_records: int = 0
    bucket_pool: int = DEFAULT_POOL  # batches a pool of streamed bucketing (pools.py)

    @property
    def renamed(self) -> bool:
        """Whether ``as_tuple`` names the outputs of ``map_fn``/``batch_map_fn``."""
        return self.map_fn is not None or self.batch_map_fn is not None


def read_options(
    batch_size: int,
    *,
    shuffle_buffer: int,
    seed: int | None,
    num_parallel_reads: int | None,
    drop_remainder: bool,
    num_epochs: int | None,
    map_fn: Callable[[dict[str, Any]], Any] | None,
    batch_map_fn: Callable[[Any], Any] | None,
    in_memory: bool | str,
    memory_budget: int | None,
    pad_to: PadTo,
    padding_values: Any,
    bucket_boundaries: Any,
    bucket_by: str | None,
    deterministic: bool = True,
    prefetch: int | None = None,
    autotune: bool = False,
    service: str | None = None,
    max_corrupt_records: int = 0,
) -> ReadOptions:
    """Check the readers' shared arguments into a :class:`ReadOptions`.

    Raises:
        TypeError: For an argument of the wrong type.
        ValueError: For an argument out of range, a malformed ``service`` address, or
            ``in_memory`` other than ``False`` with ``service``.
    """
    check_positive_int(batch_size, "batch_size")
    check_non_negative_int(max_corrupt_records, "max_corrupt_records")
    check_non_negative_int(shuffle_buffer, "shuffle_buffer")
    if num_parallel_reads is not None:
        check_positive_int(num_parallel_reads, "num_parallel_reads")
    if num_epochs is not None:
        check_positive_int(num_epochs, "num_epochs")
    if map_fn is not None and not callable(map_fn):
        raise TypeError(expected("map_fn", "callable or None", map_fn))
    if batch_map_fn is not None and not callable(batch_map_fn):
        raise TypeError(expected("batch_map_fn", "callable or None", batch_map_fn))
    if not (in_memory is True or in_memory is False or in_memory == "auto"):
        raise ValueError(expected("in_memory", "False, True or 'auto'", in_memory))
    if memory_budget is not None:
        check_positive_int(memory_budget, "memory_budget")
    shaping = check_shaping(pad_to, padding_values, bucket_boundaries, bucket_by)
    if service is not None:
        service = check_service_address(service)
        check_servable(in_memory, service)
    return ReadOptions(
        batch_size,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        deterministic=deterministic,
        num_parallel_reads=num_parallel_reads,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
        map_fn=map_fn,
        batch_map_fn=batch_map_fn,
        prefetch=prefetch,
        autotune=autotune,
        in_memory=in_memory,
        memory_budget=memory_budget,
        shaping=shaping,
        service=service,
        max_corrupt_records=max_corrupt_records,
    )


def check_servable(in_memory: object, service: str) -> None:
    """Refuse ``in_memory`` other than ``False`` with ``service``.

    The in-memory pipeline reaches its data through ``tf.numpy_function``, which runs
    Python of this process: a tf.data service worker, another process, cannot run it.

    Raises:
        ValueError: ``in_memory`` is ``True`` or ``"auto"``; the message names both.
    """
    if in_memory is not False:
        raise ValueError(
            "Expected in_memory=False with service= (the in-memory pipeline feeds its data "
            "through tf.numpy_function, which a tf.data service worker cannot run; the "
            "workers stream from the files). Received: "
            f"in_memory={in_memory!r}, service={service!r}"
        )


def queue_capacity(options: ReadOptions, capacity: int | None) -> int:
    """Check the options a queue pipeline can build; its capacity, checked.

    Raises:
        ValueError: If the options bucket, map examples or hold the data in memory, or
            ``capacity`` does not exceed ``shuffle_buffer`` or reach ``batch_size``.
    """
    shaping = options.shaping
    if shaping.bucket_boundaries is not None:
        raise ValueError(
            expected(
                "bucket_boundaries",
                "None with pipeline='queue' (a queue batches the records before they "
                "are parsed, so it cannot group them by length; bucket with "
                "pipeline='dataset')",
                list(shaping.bucket_boundaries),
            )
        )
    if options.map_fn is not None:
        raise ValueError(
            expected(
                "map_fn",
                "None with pipeline='queue' (a queue parses whole batches; map "
                "examples with pipeline='dataset', or map batches with batch_map_fn)",
                options.map_fn,
            )
        )
    if options.in_memory is not False:
        raise ValueError(
            expected(
                "in_memory",
                "False with pipeline='queue' (a queue streams from the files; hold "
                "the data in memory with pipeline='dataset')",
                options.in_memory,
            )
        )
    shuffle_buffer, batch_size = options.shuffle_buffer, options.batch_size
    cap = (
        shuffle_buffer + (queue_readers(options) + 2) * batch_size if capacity is None else capacity
    )
    check_positive_int(cap, "capacity")
    if cap <= shuffle_buffer or cap < batch_size:
        raise ValueError(
            "Expected `capacity` to exceed `shuffle_buffer` and be at least "
            f"`batch_size`. Received: capacity={cap}, shuffle_buffer={shuffle_buffer}, "
            f"batch_size={batch_size}"
        )
    return cap


def queue_readers(options: ReadOptions) -> int:
    """The reader threads of a queue pipeline: ``num_parallel_reads``, 2 by default."""
    return 2 if options.num_parallel_reads is None else options.num_parallel_reads
