"""The tf.data service, one module a concern; each name has its one address there.

- ``address``: addresses and the dispatcher checks (the TFRecord readers use it);
- ``servers``: the dispatcher and worker servers (``tfr-hooks data-service``:
  :mod:`tfr_hooks.cli.data_service`);
- ``local``: :class:`~tfr_hooks.service.local.LocalService`, a local cluster;
- ``watch``: watching reads through the service (the readers mark what they serve).

This package's ``__init__`` imports nothing, so that the readers, importing ``address``
and ``watch``, load neither the servers nor TensorFlow through it.
"""

__all__: list[str] = []
