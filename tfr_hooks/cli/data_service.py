"""The ``tfr-hooks data-service`` sub-command: a dispatcher or a worker, run until a signal.

Usage::

    tfr-hooks data-service dispatcher --port PORT [--work-dir DIR] [--worker-timeout-ms MS]
    tfr-hooks data-service worker --dispatcher HOST:PORT [--port PORT]
        [--worker-address HOST] [--wait-timeout SECONDS]

:mod:`tfr_hooks.cli` adds it to the ``tfr-hooks`` parser. Only the standard library is
imported at module level; it runs before TensorFlow is imported (:data:`NEEDS_TENSORFLOW`):
a worker waits for its dispatcher first.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["NAME", "NEEDS_TENSORFLOW", "add_parser", "check", "run"]

#: The sub-command's name.
NAME = "data-service"
#: Run before TensorFlow is imported: a worker waits for its dispatcher without it.
NEEDS_TENSORFLOW = False


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``data-service`` sub-command: its ``dispatcher`` and ``worker`` servers."""
    data_service = commands.add_parser(
        "data-service",
        help="run a tf.data service dispatcher or worker until SIGTERM or Ctrl-C",
        description="Run a server of TensorFlow's tf.data service: one dispatcher, and "
        "workers on any hosts that run the input pipelines of the trainers reading through "
        "it. Each logs its address, serves until SIGTERM or Ctrl-C, then exits 0.",
        epilog="servers: dispatcher --port PORT [--work-dir DIR] [--worker-timeout-ms MS]; "
        "worker --dispatcher HOST:PORT [--port PORT] [--worker-address HOST] "
        "[--wait-timeout SECONDS]",
    )
    roles = data_service.add_subparsers(dest="role", required=True, metavar="SERVER")
    dispatcher = roles.add_parser(
        "dispatcher",
        help="the dispatcher, which hands out the work to the workers",
        description="Start a tf.data service DispatchServer, fault tolerant when "
        "--work-dir is given (restarted with the same directory and port, it recovers its "
        "datasets and jobs).",
    )
    dispatcher.add_argument(
        "--port", type=int, required=True, help="port to listen on (0: a free one, logged)"
    )
    dispatcher.add_argument(
        "--work-dir", default=None, metavar="DIR", help="journal directory: fault tolerance"
    )
    dispatcher.add_argument(
        "--worker-timeout-ms",
        type=int,
        default=0,
        metavar="MS",
        help="a worker without heartbeat for MS is taken as gone (default: TensorFlow's)",
    )
    worker = roles.add_parser(
        "worker",
        help="a worker, which runs the pipelines and serves their elements",
        description="Start a tf.data service WorkerServer registered with the dispatcher "
        "at HOST:PORT. It waits for the dispatcher to answer first (start order is free), "
        "logging that it waits; SIGTERM or Ctrl-C ends the wait with status 0.",
    )
    worker.add_argument(
        "--dispatcher", required=True, metavar="HOST:PORT", help="the dispatcher's address"
    )
    worker.add_argument(
        "--port", type=int, default=0, help="port to listen on (default 0: a free one, logged)"
    )
    worker.add_argument(
        "--worker-address",
        default=None,
        metavar="HOST",
        help="the host trainers reach this worker at (default: this host's address on the "
        "route to the dispatcher)",
    )
    worker.add_argument(
        "--wait-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit 1 when no dispatcher answers within SECONDS (default: wait until one "
        "does; 0: check once)",
    )


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse the ``data-service`` flags out of range (``parser.error``: status 2)."""
    if not 0 <= args.port < 65536:
        parser.error(f"--port must be a port number (0 to 65535), not {args.port}")
    if getattr(args, "worker_timeout_ms", 0) < 0:
        parser.error(f"--worker-timeout-ms must not be negative, not {args.worker_timeout_ms}")
    wait_timeout = getattr(args, "wait_timeout", None)
    if wait_timeout is not None and not wait_timeout >= 0:  # NaN too
        parser.error(f"--wait-timeout must be a number of seconds >= 0, not {wait_timeout}")


def run(args: argparse.Namespace) -> int:
    """Run the server ``args.role`` until SIGTERM or SIGINT, logging to stderr.

    A worker waits for its dispatcher before TensorFlow is imported, so that waiting
    costs no import, and a wait past ``--wait-timeout`` is an error at once.
    """
    import logging

    from tfr_hooks.quiet import import_tensorflow
    from tfr_hooks.service.servers import await_dispatcher, run_dispatcher, run_worker

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.role == "worker" and await_dispatcher(args.dispatcher, args.wait_timeout) is None:
            return 0  # SIGTERM or SIGINT while waiting
        import_tensorflow()
        if args.role == "dispatcher":
            run_dispatcher(args.port, args.work_dir, worker_timeout_ms=args.worker_timeout_ms)
        else:
            run_worker(
                args.dispatcher,
                args.port,
                worker_address=args.worker_address,
                wait_timeout=args.wait_timeout,
            )
    except (OSError, ValueError, TypeError) as error:
        print(f"tfr-hooks data-service {args.role}: error: {error}", file=sys.stderr)
        return 1
    return 0
