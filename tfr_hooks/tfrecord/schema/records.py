"""What one serialized record holds: a ``tf.train.Example``, a ``SequenceExample``, or neither.

A ``tf.train.SequenceExample``'s ``context`` (field 1) has the wire format of an
``Example``'s ``features`` (field 1), so every Example also parses as a SequenceExample
with only a context: :func:`parse_record` parses each record as a SequenceExample and
calls it one when it holds ``feature_lists`` (field 2). Bytes that are no such proto
(raw bytes, ``tf.io.serialize_tensor`` output) either fail to parse or parse into fields
neither message has: both make the record ``"neither"``, with :attr:`RecordContent.found`
saying what it looks like.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from google.protobuf import message as protobuf_message
from google.protobuf import unknown_fields
from tensorflow.core.example import example_pb2
from tensorflow.core.framework import tensor_pb2, types_pb2

from tfr_hooks.tfrecord.errors import CorruptRecordError

__all__ = [
    "EXAMPLE",
    "SEQUENCE_EXAMPLE",
    "NEITHER",
    "RecordContent",
    "parse_record",
    "as_record_content",
    "not_a_proto_error",
    "where",
]

#: A record of ``tf.train.Example`` (or a SequenceExample without feature lists).
EXAMPLE = "Example"
#: A record of ``tf.train.SequenceExample`` with ``feature_lists``.
SEQUENCE_EXAMPLE = "SequenceExample"
#: A record that is neither (raw bytes, a serialized tensor, another proto).
NEITHER = "neither"


@dataclass(frozen=True)
class RecordContent:
    """One record, parsed.

    Attributes:
        kind: :data:`EXAMPLE`, :data:`SEQUENCE_EXAMPLE` or :data:`NEITHER`.
        proto: The record as a ``tf.train.SequenceExample`` (an Example's features are its
            context), or ``None`` when it is neither.
        found: What a record of kind :data:`NEITHER` holds, in words (else ``""``).
    """

    kind: str
    proto: Any
    found: str = ""

    @property
    def context(self) -> Any:
        """The context (an Example's features) map of name to ``tf.train.Feature``."""
        return self.proto.context.feature

    @property
    def feature_lists(self) -> Any:
        """The map of name to ``tf.train.FeatureList`` (empty for an Example)."""
        return self.proto.feature_lists.feature_list


def parse_record(serialized: bytes) -> RecordContent:
    """Parse one serialized record and tell which kind it is; never raises."""
    proto = example_pb2.SequenceExample()
    try:
        proto.ParseFromString(serialized)
    except protobuf_message.DecodeError:
        return RecordContent(NEITHER, None, _describe_other(serialized, parses=False))
    if _has_unknown_fields(proto):
        return RecordContent(NEITHER, None, _describe_other(serialized, parses=True))
    kind = SEQUENCE_EXAMPLE if proto.HasField("feature_lists") else EXAMPLE
    return RecordContent(kind, proto)


def as_record_content(example: Any) -> RecordContent:
    """The content of a record given as bytes, an ``Example`` or a ``SequenceExample`` proto.

    An ``Example`` parsed from a SequenceExample's bytes keeps the feature lists as an
    unknown field: they are found again here.

    Raises:
        TypeError: If ``example`` is none of these.
    """
    if isinstance(example, RecordContent):
        return example
    if isinstance(example, (bytes, bytearray, memoryview)):
        return parse_record(bytes(example))
    if isinstance(example, (example_pb2.Example, example_pb2.SequenceExample)):
        if isinstance(example, example_pb2.Example) and not _has_unknown_fields(example):
            proto = example_pb2.SequenceExample()
            proto.context.CopyFrom(example.features)
            return RecordContent(EXAMPLE, proto)
        return parse_record(example.SerializeToString())
    raise TypeError(
        "Expected a record: serialized bytes, a tf.train.Example or a "
        f"tf.train.SequenceExample. Received: example={type(example).__name__}"
    )


def not_a_proto_error(content: RecordContent, *, file: str | None, record: int | None) -> Any:
    """The error for a record that is neither an Example nor a SequenceExample."""
    return CorruptRecordError(
        f"{where(file, record).capitalize()} is not a tf.train.Example or "
        f"tf.train.SequenceExample: expected a serialized proto of either; found "
        f"{content.found}.",
        file=file,
        record=record,
    )


def where(file: str | None, record: int | None) -> str:
    """``"record 3 of file 'x'"`` and the like, for messages."""
    if file is None:
        return "a record" if record is None else f"record {record}"
    return f"file {file!r}" if record is None else f"record {record} of file {file!r}"


def _has_unknown_fields(proto: Any) -> bool:
    """Whether ``proto`` holds fields its message lacks (at the top level).

    Bytes of another message (a TensorProto, say) hold such fields at the top level;
    looking no deeper keeps the scan of a large file fast.
    """
    return bool(len(unknown_fields.UnknownFieldSet(proto)))


def _describe_other(serialized: bytes, *, parses: bool) -> str:
    """What bytes that are no Example or SequenceExample look like, in words."""
    head = serialized[:16]
    size = f"{len(serialized)} bytes (starting {head!r})"
    tensor = tensor_pb2.TensorProto()
    try:
        tensor.ParseFromString(serialized)
        is_tensor = tensor.dtype != types_pb2.DT_INVALID and not _has_unknown_fields(tensor)
    except protobuf_message.DecodeError:
        is_tensor = False
    if is_tensor:
        dtype = tf.dtypes.as_dtype(tensor.dtype).name
        shape = [d.size for d in tensor.tensor_shape.dim]
        return (
            f"{size} of a serialized TensorProto of dtype {dtype} and shape {shape}, as "
            "tf.io.serialize_tensor writes (read such records with tf.io.parse_tensor)"
        )
    if not parses:
        return f"{size} that do not parse as a protocol buffer (raw bytes?)"
    return f"{size} holding protocol buffer fields that neither message has"
