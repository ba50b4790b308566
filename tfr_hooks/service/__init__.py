"""The tf.data service, by concern; its public module is :mod:`tfr_hooks.data_service`.

- ``address``: addresses and the dispatcher checks (the TFRecord readers use it);
- ``servers``: the dispatcher and worker servers;
- ``local``: :class:`~tfr_hooks.data_service.LocalService`, a local cluster;
- ``watch``: watching reads through the service (the readers mark what they serve).

This package's ``__init__`` imports nothing, so that the readers, importing ``address``
and ``watch``, load neither the servers nor TensorFlow through it.
"""

__all__: list[str] = []
