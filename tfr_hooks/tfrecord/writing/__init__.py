"""Writing and inspection: shards and their sidecar written, any file converted or inspected.

Each name has one address, in its module: this package re-exports nothing.
"""

__all__: list[str] = []
