"""Schemas and decoding: declaring features, matching records to them, parsing batches.

Each name has one address, in its module: this package re-exports nothing.
"""

__all__: list[str] = []
