"""DataErrorHook: a loop's read errors become ones that name the file, record and feature.

The TFRecord readers know nothing of hooks: a :class:`~tfr_hooks.tfrecord.Batches` only
carries its files, schema and compression. ``SessionLoop(data=batches)`` and
``hooked_session(data=batches)`` wrap them in this hook, whose ``translate_error`` asks
:func:`tfr_hooks.tfrecord.explain_error` to rescan the files when a run ends with an error.
"""

from __future__ import annotations

from typing import Any

from tfr_hooks.hooks import Hook
from tfr_hooks.tfrecord.formats.framing import Files
from tfr_hooks.tfrecord.inspection.diagnose import explain_error
from tfr_hooks.tfrecord.schema.decoding import stored_schema
from tfr_hooks.tfrecord.schema.schema import Schema

__all__ = ["DataErrorHook"]


class DataErrorHook(Hook):
    """Replaces a pipeline's read errors with ones that name the file, record and feature.

    ``SessionLoop(data=batches)`` adds one for the batches' files by itself; give one to
    other loops in their ``hooks``.

    Args:
        files: The pipeline's files.
        schema: The schema the records hold (for a TFDS directory, as stored: see
            :func:`~tfr_hooks.tfrecord.schema.decoding.stored_schema`).
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.

    Examples:
        >>> hook = DataErrorHook(["train.tfrecord"], schema)  # doctest: +SKIP
        >>> loop = tfr_hooks.FunctionLoop(dataset, model=model, hooks=[hook])  # doctest: +SKIP
    """

    def __init__(
        self, files: Files, schema: Schema | None = None, compression: str | None = None
    ) -> None:
        self.files = files
        self.schema = schema
        self.compression = compression

    @classmethod
    def for_batches(cls, batches: Any) -> DataErrorHook:
        """The hook for the files of a :class:`~tfr_hooks.tfrecord.Batches`."""
        facts = batches.facts
        schema = facts.schema
        if schema is not None:  # the records are checked as stored (TFDS: encoded)
            schema = stored_schema(schema, facts.decoding)
        return cls(list(facts.files), schema, facts.compression)

    def translate_error(self, error: BaseException) -> BaseException | None:
        """Return a clear :class:`~tfr_hooks.tfrecord.TFRecordError` for a data error."""
        return explain_error(error, self.files, self.schema, self.compression)

    def __repr__(self) -> str:
        return f"DataErrorHook(files={self.files!r})"
