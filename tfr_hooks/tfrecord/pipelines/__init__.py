"""Reading: the arguments, the plan, the pipeline kinds and the passes over the records.

Each name has one address, in its module: this package re-exports nothing.
"""

__all__: list[str] = []
