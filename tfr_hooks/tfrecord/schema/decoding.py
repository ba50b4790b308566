"""How the records a source stores become the features a reader returns, as a value.

Most sources store their features as they are read: a :class:`~.schema.Schema` parses
the records into them. A source whose records hold the features in another form (a
TensorFlow Datasets directory: encoded images, sequences flattened into one list, nested
keys) declares a :class:`Decoding` beside its plain schema, and the reader carries both
(the plan, then the facts). :func:`parse_batch` is the one place a batch of serialized
records becomes the features returned, with a decoding or without; :func:`stored_schema`
is the schema the records themselves hold, which the checks of a record read.

A decoding is declared once by its source and passed on as a value: nothing is set on a
:class:`~.schema.Schema` (a frozen value) to carry it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from tfr_hooks.tfrecord.schema.schema import Schema

__all__ = ["Decoding", "parse_batch", "stored_schema"]


class Decoding(Protocol):
    """How the records stored for a schema's features become those features.

    A decoding answers for any selection of the features it declares (a reader's
    ``as_tuple`` keeps some of them): both methods take the schema of the features to
    return, a plain :class:`~.schema.Schema`.
    """

    def stored(self, schema: Schema) -> Schema:
        """The features the records hold for ``schema``'s features, as stored."""
        ...

    def decode(self, schema: Schema, parsed: Mapping[str, Any]) -> dict[str, Any]:
        """``schema``'s features, in its order, from the batch parsed with :meth:`stored`."""
        ...


def parse_batch(
    schema: Schema, serialized: Any, decoding: Decoding | None = None
) -> dict[str, Any]:
    """A 1-D batch of serialized records as the features of ``schema``.

    Args:
        schema: The features to return.
        serialized: A string tensor of shape ``[batch]``.
        decoding: How the records store those features, or ``None`` when they store them
            as ``schema`` declares (:meth:`Schema.parse_batch`).

    Returns:
        A dict of tensors (ragged for feature lists), in ``schema``'s order.
    """
    if decoding is None:
        return schema.parse_batch(serialized)
    return decoding.decode(schema, decoding.stored(schema).parse_batch(serialized))


def stored_schema(schema: Schema, decoding: Decoding | None = None) -> Schema:
    """The schema the records hold for ``schema``'s features: what checks a record."""
    return schema if decoding is None else decoding.stored(schema)
