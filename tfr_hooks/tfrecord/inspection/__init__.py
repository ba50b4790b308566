"""The user's tools that read files to explain them: inspect, infer a schema, diagnose.

Built on the sources and formats below them; nothing below imports them. Each name has
one address, in its module: this package re-exports nothing.
"""

__all__: list[str] = []
