"""The tf.data service servers: addresses, the dispatcher check, the CLI and LocalService.

Every server is a real process on loopback (``tfr-hooks data-service ...``, started by
:class:`LocalService` or by hand); the trainer side reads in this process. Every wait has
a bound.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf
from tensorflow.python.eager.cancellation import CancellationManager

from tfr_hooks import cli
from tfr_hooks.service.address import (
    check_dispatcher,
    check_service_address,
    live_workers,
    registered_workers,
)
from tfr_hooks.service.local import LocalService
from tfr_hooks.service.servers import free_port, run_worker

SRC = Path(cli.__file__).resolve().parents[2]
#: seconds a server may take to start on a loaded 2-core machine (it imports TensorFlow)
START = 120


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound by this process and not listening: a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def distributed(service: str, size: int) -> tf.data.Dataset:
    return tf.data.Dataset.range(size).apply(
        tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=service
        )
    )


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("localhost:5050", "grpc://localhost:5050"),
        ("grpc://10.0.0.5:5050", "grpc://10.0.0.5:5050"),
        (" grpc://host-1.example.com:80 ", "grpc://host-1.example.com:80"),
        ("[::1]:5050", "grpc://[::1]:5050"),
    ],
)
def test_an_address_is_normalized_to_grpc_host_port(given: str, normalized: str) -> None:
    assert check_service_address(given) == normalized


MALFORMED = ["localhost", "grpc://host", "http://host:5050", "h:0", "h:70000"]


@pytest.mark.parametrize("given", MALFORMED)
def test_a_malformed_address_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match=r"Expected `service` to be a tf\.data service address"):
        check_service_address(given)
    with pytest.raises(TypeError, match="Received: service=5050"):
        check_service_address(5050)


def test_a_closed_port_is_an_error_at_once_naming_the_address(closed_port: int) -> None:
    # at once: the refused connection is the error, not a wait for the timeout's end
    with pytest.raises(
        ConnectionError, match=rf"grpc://127\.0\.0\.1:{closed_port}: .*refused"
    ) as error:
        check_dispatcher(f"127.0.0.1:{closed_port}", timeout=30)
    assert "within 30 s" not in str(error.value)


def test_an_unknown_host_is_an_error_at_once() -> None:
    # at once: the name lookup's failure is the error, not a wait for the timeout's end
    with pytest.raises(ConnectionError, match=r"grpc://no-such-host\.invalid:5050") as error:
        check_dispatcher("no-such-host.invalid:5050", timeout=30)
    assert "within 30 s" not in str(error.value)
    assert isinstance(error.value.__cause__, OSError)  # from the lookup, before any RPC


def test_the_cli_refuses_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):
        cli.main(["data-service", "dispatcher", "--port", "70000"])
    assert "--port must be a port number (0 to 65535), not 70000" in capsys.readouterr().err


def test_the_cli_refuses_a_negative_wait_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):
        cli.main(["data-service", "worker", "--dispatcher", "h:1", "--wait-timeout", "-1"])
    assert "--wait-timeout must be a number of seconds >= 0, not -1.0" in capsys.readouterr().err


def _wait_for_line(log: Path, process: subprocess.Popen[bytes], text: str) -> str:
    deadline = time.monotonic() + START
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if text in line:
                return line
        assert process.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} within {START} s: {log.read_text()}")


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(2 * START + 60)
def test_the_cli_servers_log_their_address_serve_and_exit_0_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    base = [sys.executable, "-m", "tfr_hooks.cli", "data-service"]
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *flags: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            processes.append(
                subprocess.Popen(
                    [*base, name, *flags], stdout=out, stderr=out, env=env, cwd=tmp_path
                )
            )
        return processes[-1], log

    try:
        dispatcher, dispatcher_log = start("dispatcher", "--port", "0", "--work-dir", "journal")
        line = _wait_for_line(dispatcher_log, dispatcher, "dispatcher serving at grpc://")
        assert "(fault tolerant, journal in journal)" in line
        port = int(line.split("serving at grpc://")[1].split()[0].rpartition(":")[2])
        worker, worker_log = start("worker", "--dispatcher", f"127.0.0.1:{port}")
        line = _wait_for_line(worker_log, worker, "worker serving at grpc://127.0.0.1:")
        values = [int(x) for x in distributed(f"grpc://127.0.0.1:{port}", 100)]
        assert sorted(values) == list(range(100))
        for process in (worker, dispatcher):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        assert "worker stopping on SIGTERM" in worker_log.read_text()
        assert "dispatcher stopped" in dispatcher_log.read_text()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def cli_server(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """Start ``tfr-hooks data-service NAME FLAGS...`` logging to a file; kill what is left."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *flags: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}-{len(processes)}.log"
        command = [sys.executable, "-m", "tfr_hooks.cli", "data-service", name, *flags]
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        with open(log, "wb") as out:
            processes.append(subprocess.Popen(command, stdout=out, stderr=out, env=env))
        return processes[-1], log

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(3 * START)
def test_a_worker_started_before_its_dispatcher_waits_for_it_then_serves(
    cli_server: Callable[..., tuple[subprocess.Popen[bytes], Path]],
) -> None:
    """Start order is free in a cluster: the worker waits, logging it, and then serves."""
    port = free_port()
    address = f"grpc://127.0.0.1:{port}"
    worker, worker_log = cli_server("worker", "--dispatcher", f"127.0.0.1:{port}")
    _wait_for_line(worker_log, worker, f"waiting for a dispatcher at {address}")
    time.sleep(2.5)
    assert worker.poll() is None, worker_log.read_text()
    assert worker_log.read_text().count("waiting for a dispatcher") == 1  # not a flood
    dispatcher, dispatcher_log = cli_server("dispatcher", "--port", str(port))
    _wait_for_line(dispatcher_log, dispatcher, "dispatcher serving at grpc://")
    _wait_for_line(worker_log, worker, "worker serving at grpc://127.0.0.1:")
    assert sorted(int(x) for x in distributed(address, 200)) == list(range(200))
    for process in (worker, dispatcher):
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


@pytest.mark.slow  # over a second (fast-run budget, issue 56); CI runs it
@pytest.mark.data_service
@pytest.mark.timeout(START)
def test_a_worker_waits_at_most_wait_timeout_then_exits_1_naming_the_address(
    closed_port: int,
) -> None:
    started = time.monotonic()
    command = ["data-service", "worker", "--dispatcher", f"127.0.0.1:{closed_port}"]
    result = subprocess.run(
        [sys.executable, "-m", "tfr_hooks.cli", *command, "--wait-timeout", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=START,
    )
    assert result.returncode == 1, result.stderr
    assert f"waiting for a dispatcher at grpc://127.0.0.1:{closed_port}" in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert error.startswith("tfr-hooks data-service worker: error: No tf.data service")
    assert f"grpc://127.0.0.1:{closed_port} within the 2 s" in error and "--wait-timeout" in error
    assert "tensorflow" not in result.stderr.lower()  # before TensorFlow is imported
    assert time.monotonic() - started >= 2  # waited its --wait-timeout (a lower bound)


@pytest.mark.data_service
@pytest.mark.timeout(START)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_a_worker_waits_ends_it_promptly_with_status_0(
    closed_port: int,
    signum: int,
    cli_server: Callable[..., tuple[subprocess.Popen[bytes], Path]],
) -> None:
    worker, log = cli_server("worker", "--dispatcher", f"127.0.0.1:{closed_port}")
    _wait_for_line(log, worker, "waiting for a dispatcher")
    worker.send_signal(signum)
    # a worker without --wait-timeout waits for ever: ending at all is the signal's doing
    assert worker.wait(timeout=30) == 0, log.read_text()
    name = signal.Signals(signum).name
    assert f"stopping on {name}, before a dispatcher answered" in log.read_text()


@pytest.mark.slow  # over a second (fast-run budget, issue 56); CI runs it
@pytest.mark.timeout(60)
def test_run_worker_raises_connection_error_past_wait_timeout(
    closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    address = rf"127\.0\.0\.1:{closed_port} within the 1 s"
    with (
        caplog.at_level(logging.INFO, logger="tfr_hooks.service.servers"),
        pytest.raises(ConnectionError, match=address),
    ):
        run_worker(f"127.0.0.1:{closed_port}", wait_timeout=1)
    assert time.monotonic() - started >= 1  # waited its wait_timeout (a lower bound)
    assert caplog.text.count("waiting for a dispatcher") == 1


def test_run_worker_checks_wait_timeout() -> None:
    with pytest.raises(ValueError, match="Received: wait_timeout=-1"):
        run_worker("127.0.0.1:5050", wait_timeout=-1)
    with pytest.raises(TypeError, match="Received: wait_timeout='5'"):
        run_worker("127.0.0.1:5050", wait_timeout="5")  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_a_worker_does_not_wait_for_a_server_that_is_not_a_dispatcher() -> None:
    """A port another gRPC server holds is a wrong address: no dispatcher can come there."""
    import grpc  # type: ignore[import-untyped]

    server = grpc.server(ThreadPoolExecutor(max_workers=1))  # answers every RPC UNIMPLEMENTED
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        # no wait_timeout: it would wait for ever (the test's timeout would end it)
        with pytest.raises(ConnectionError, match=r"a server that is not a tf\.data dispatcher"):
            run_worker(f"127.0.0.1:{port}")
    finally:
        server.stop(grace=None).wait(timeout=10)


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
def test_a_local_service_of_two_workers_serves_each_element_once() -> None:
    with LocalService(workers=2, timeout=START) as service:
        assert service.address.startswith("grpc://127.0.0.1:")
        assert check_dispatcher(service.address) == service.address
        values = [int(x) for x in distributed(service.address, 1000)]
        assert sorted(values) == list(range(1000))
        processes = [service.dispatcher, *service.workers]
    # each exited on SIGTERM with status 0, none was killed
    assert [p.returncode for p in processes] == [0, 0, 0]


def watchdog(condition: Callable[[], bool], manager: Any) -> threading.Event:
    """Cancel ``manager`` once ``condition()`` holds (checked twice a second); set to end."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            if condition():
                manager.start_cancel()
                return

    threading.Thread(target=watch, daemon=True).start()
    return done


def dispatcher_gone(address: str) -> bool:
    try:
        check_dispatcher(address, timeout=2)
    except ConnectionError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
def test_a_killed_worker_leaves_the_read_to_the_other_and_none_left_is_seen() -> None:
    """What TensorFlow 2.21 does when workers vanish, and how a reader ends its wait.

    One worker killed: the read goes on from the other, no element twice. Both killed:
    the read waits with no error and no end (TensorFlow has no client timeout);
    :func:`live_workers` sees that none is left, and cancelling the step's
    ``CancellationManager`` ends the wait with ``CancelledError``.
    """
    with LocalService(workers=2, timeout=START, worker_timeout_ms=1000) as service:
        assert len(registered_workers(service.address)) == 2
        iterator = iter(distributed(service.address, 100_000))
        step = tf.function(lambda: next(iterator))
        values = [int(step()) for _ in range(100)]
        service.kill_worker(0)
        assert service.workers[0].returncode == -signal.SIGKILL
        assert len(live_workers(service.address)) == 1
        assert len(registered_workers(service.address)) == 2  # the dispatcher keeps it
        values += [int(step()) for _ in range(2000)]
        assert len(set(values)) == len(values)  # at most once: none repeated
        service.kill_worker(1)
        manager = CancellationManager()
        cancelable = manager.get_cancelable_function(step.get_concrete_function())
        done = watchdog(lambda: not live_workers(service.address), manager)
        started = time.monotonic()
        with pytest.raises(tf.errors.CancelledError, match="Data service iterator was cancelled"):
            while time.monotonic() - started < 60:
                cancelable()
        done.set()  # cancelled: pytest.raises fails if 60 s of reads end otherwise
        processes = [service.dispatcher, *service.workers]
    assert [p.returncode for p in processes] == [0, -signal.SIGKILL, -signal.SIGKILL]


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
def test_with_the_dispatcher_gone_a_read_waits_until_cancelled() -> None:
    with LocalService(workers=1, timeout=START) as service:
        iterator = iter(distributed(service.address, 100_000))
        step = tf.function(lambda: next(iterator))
        for _ in range(100):
            step()
        assert service.dispatcher is not None
        service.dispatcher.kill()
        service.dispatcher.wait(timeout=30)
        manager = CancellationManager()
        cancelable = manager.get_cancelable_function(step.get_concrete_function())
        done = watchdog(lambda: dispatcher_gone(service.address), manager)
        started = time.monotonic()
        with pytest.raises(tf.errors.CancelledError):
            while time.monotonic() - started < 60:
                cancelable()
        done.set()  # cancelled: pytest.raises fails if 60 s of reads end otherwise
        processes = service.workers
    assert [p.returncode for p in processes] == [0]  # stopped on SIGTERM, within the bound
