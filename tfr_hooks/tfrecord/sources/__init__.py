"""Where records come from: one module per kind of source, behind one protocol.

:mod:`.base` holds the :class:`~.base.RecordSource` protocol and the dispatcher
:func:`~.base.open_source`; :mod:`.files` reads plain TFRecord files, :mod:`.converted`
the directories ``tfr-hooks convert`` writes (a ``schema.json`` sidecar beside the
shards), :mod:`.tfds` the directories TensorFlow Datasets prepares. Each name has one
address, in its module: this package re-exports nothing.
"""

__all__: list[str] = []
