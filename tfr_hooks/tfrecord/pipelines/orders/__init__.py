"""The orders: how a pass turns a source's records into the stream a pipeline batches.

One module an order, behind :class:`.base.Order`: :mod:`.file` (no shuffle),
:mod:`.buffer` (a shuffle buffer) and :mod:`.global_order` (``shuffle="global"``);
:mod:`.choice` maps the reader's options to one of them. Each name has one address, in
its module: this package re-exports nothing.
"""

__all__: list[str] = []
