"""tf.data service addresses: their form, and whether a dispatcher answers at one.

- :func:`check_service_address` normalizes an address to ``"grpc://HOST:PORT"``;
- :func:`check_dispatcher` asks the address for a dispatcher (a TCP connection, then its
  ``GetVersion`` RPC) and fails at once, naming the address, when nothing answers;
- :func:`registered_workers` lists the workers a dispatcher knows, :func:`live_workers`
  those still accepting connections.

The RPCs go through the ``grpc`` package TensorFlow depends on, with their messages read
by a few lines of protocol-buffer decoding here: TensorFlow is not imported. Only the
argument checks of the package are, so that the TFRecord readers may use this module.
"""

from __future__ import annotations

import re
import socket
import time

from tfr_hooks.checks import expected

__all__ = [
    "check_service_address",
    "check_dispatcher",
    "registered_workers",
    "live_workers",
    "accepts",
    "host_port",
    "NotADispatcher",
]

_ADDRESS = re.compile(r"^(?:grpc://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d+)$")
#: the RPC :func:`check_dispatcher` calls: answered by dispatchers, not by workers
_GET_VERSION = "/tensorflow.data.DispatcherService/GetVersion"
_GET_WORKERS = "/tensorflow.data.DispatcherService/GetWorkers"


class NotADispatcher(ConnectionError):
    """A server answers at the address, but not as a tf.data dispatcher (a worker?).

    Raised by :func:`check_dispatcher`; a worker waiting for its dispatcher stops at it,
    since no dispatcher will come up on a port another server holds.
    """


def check_service_address(service: object, name: str = "service") -> str:
    """Return a tf.data service address as ``"grpc://HOST:PORT"``.

    Args:
        service: ``"grpc://HOST:PORT"`` or ``"HOST:PORT"`` (an IPv6 host in brackets).
        name: The argument's name in the error message.

    Returns:
        The address with its protocol, ``"grpc://HOST:PORT"``.

    Raises:
        TypeError: ``service`` is not a string.
        ValueError: ``service`` is not of that form, or its port is not in 1..65535.

    Examples:
        >>> check_service_address("grpc://10.0.0.5:5050")
        'grpc://10.0.0.5:5050'
    """
    what = 'a tf.data service address, "grpc://HOST:PORT" or "HOST:PORT"'
    if not isinstance(service, str):
        raise TypeError(expected(name, what, service))
    match = _ADDRESS.match(service.strip())
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ValueError(expected(name, what + " with a port in 1..65535", service))
    return f"grpc://{match.group(1)}:{int(match.group(2))}"


def host_port(service: str) -> tuple[str, int]:
    """The host (without IPv6 brackets) and port of a normalized address."""
    host, _, port = service.removeprefix("grpc://").rpartition(":")
    return host.strip("[]"), int(port)


def check_dispatcher(service: object, timeout: float = 5.0) -> str:
    """Check that a tf.data service dispatcher answers at ``service``, within ``timeout``.

    A TCP connection first, so that a closed port or an unknown host fails at once; then
    the dispatcher's ``GetVersion`` RPC through the ``grpc`` package (a dependency of
    TensorFlow), which a worker or another server does not answer.

    Args:
        service: The dispatcher's address, as :func:`check_service_address` takes it.
        timeout: Seconds to wait for an answer at most.

    Returns:
        The normalized address, ``"grpc://HOST:PORT"``.

    Raises:
        ConnectionError: No dispatcher answers at the address; the message names it.
    """
    address = check_service_address(service)
    host, port = host_port(address)
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        raise ConnectionError(
            f"No tf.data service dispatcher answers at {address}: {error}. Start one with "
            f"`tfr-hooks data-service dispatcher --port {port}`, or check the address."
        ) from error
    import grpc  # type: ignore[import-untyped]  # a dependency of TensorFlow, untyped

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(_GET_VERSION)  # raw bytes: an empty request message
        try:
            call(b"", timeout=max(deadline - time.monotonic(), 0.1))
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            what = "a server that is not a tf.data dispatcher (a worker?)"
            kind: type[ConnectionError] = NotADispatcher
            if code is not grpc.StatusCode.UNIMPLEMENTED:
                what = f"no tf.data dispatcher within {timeout:g} s ({code})"
                kind = ConnectionError
            raise kind(
                f"No tf.data service dispatcher answers at {address}: {what}. Check the "
                f"address, or start one with `tfr-hooks data-service dispatcher --port {port}`."
            ) from error
    return address


def registered_workers(service: object, timeout: float = 5.0) -> list[str]:
    """The addresses of the workers registered with the dispatcher at ``service``.

    The dispatcher's ``GetWorkers`` RPC. A worker killed without stopping stays listed
    (on TensorFlow 2.21, still after a minute with ``worker_timeout_ms=1000``): see
    :func:`live_workers` for those that still accept connections.

    Args:
        service: The dispatcher's address, as :func:`check_service_address` takes it.
        timeout: Seconds to wait for the answer at most.

    Returns:
        Each worker's ``"HOST:PORT"``, in the dispatcher's order.

    Raises:
        ConnectionError: No dispatcher answers at the address; the message names it.
    """
    address = check_dispatcher(service, timeout)
    import grpc

    host, port = host_port(address)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        try:
            answer = channel.unary_unary(_GET_WORKERS)(b"", timeout=timeout)
        except grpc.RpcError as error:
            raise ConnectionError(
                f"The tf.data service dispatcher at {address} did not list its workers: {error}"
            ) from error
    # GetWorkersResponse: repeated WorkerInfo workers = 1; WorkerInfo: string address = 1
    return [_field(info, 1).decode() for info in _fields(answer, 1)]


def live_workers(service: object, timeout: float = 2.0) -> list[str]:
    """The registered workers that accept a TCP connection (each within ``timeout``).

    An empty list while the dispatcher answers means that no worker is left to serve:
    a read through the service would wait (TensorFlow 2.21 does not end it).

    Raises:
        ConnectionError: No dispatcher answers at ``service``; the message names it.
    """
    alive = []
    for worker in registered_workers(service, timeout):
        if accepts(*host_port(worker), timeout=timeout):
            alive.append(worker)
    return alive


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _fields(message: bytes, number: int) -> list[bytes]:
    """The values of length-delimited field ``number`` of a serialized protocol buffer."""
    found, at = [], 0
    while at < len(message):
        key, at = _varint(message, at)
        kind = key & 7
        if kind == 0:
            _, at = _varint(message, at)
        elif kind == 2:
            length, at = _varint(message, at)
            if key >> 3 == number:
                found.append(message[at : at + length])
            at += length
        else:  # fixed 64 or 32 bits
            at += 8 if kind == 1 else 4
    return found


def _field(message: bytes, number: int) -> bytes:
    values = _fields(message, number)
    return values[0] if values else b""


def accepts(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
