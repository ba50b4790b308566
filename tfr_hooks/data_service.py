"""Servers of TensorFlow's tf.data service: a dispatcher, its workers, and a local cluster.

The tf.data service (``tf.data.experimental.service``) runs an input pipeline on CPU
workers and streams its elements to the trainers. One dispatcher hands out the work; any
number of workers, on any hosts, register with it and run the pipeline. This module starts
them and checks their addresses:

- :func:`check_service_address` normalizes an address to ``"grpc://HOST:PORT"``;
- :func:`check_dispatcher` asks the address for a dispatcher and fails at once, naming
  the address, when nothing answers (instead of a read that waits);
  :func:`registered_workers` lists the workers it knows, :func:`live_workers` those
  still accepting connections;
- :func:`run_dispatcher` and :func:`run_worker` serve until SIGTERM or SIGINT, as
  ``tfr-hooks data-service dispatcher|worker`` does;
- :class:`LocalService` starts a dispatcher and N workers as local processes on loopback,
  for tests and for one machine whose trainer should not decode its own input.

Only the standard library is imported at module level: TensorFlow is imported by the
servers, and the ``grpc`` package TensorFlow depends on by :func:`check_dispatcher`.

The code lives in :mod:`tfr_hooks.service`, one module a concern (``address``,
``servers``, ``local``, ``watch``); this module is its public face.

Examples:
    >>> check_service_address("localhost:5050")
    'grpc://localhost:5050'
    >>> with LocalService(workers=2) as service:  # doctest: +SKIP
    ...     dataset = tf.data.Dataset.range(10).apply(
    ...         tf.data.experimental.service.distribute("distributed_epoch", service.address)
    ...     )
"""

from __future__ import annotations

from tfr_hooks.service.address import (
    check_dispatcher,
    check_service_address,
    live_workers,
    registered_workers,
)
from tfr_hooks.service.local import LocalService
from tfr_hooks.service.servers import run_dispatcher, run_worker
from tfr_hooks.service.watch import (
    Reason,
    ServiceWatch,
    ServiceWatches,
    Stalled,
    check_service_timeout,
    diagnose,
)

__all__ = [
    "check_service_address",
    "check_dispatcher",
    "registered_workers",
    "live_workers",
    "run_dispatcher",
    "run_worker",
    "LocalService",
    "check_service_timeout",
    "Reason",
    "diagnose",
    "ServiceWatch",
    "ServiceWatches",
    "Stalled",
]
