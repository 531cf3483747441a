"""The network: a program reaches no host service, over TCP, UDP or DNS, and does not hang trying."""

from __future__ import annotations

import socket
import time

import pytest
from sandbox_support import (
    contained,
    program,
    wrong,
)

# ---------------------------------------------------------------- network


@pytest.fixture
def tcp_server():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def test_network_is_unreachable(namespaced, tcp_server):
    port = tcp_server.getsockname()[1]
    g = f"""
        import socket
        def g():
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=0.3).close()
                return "connected"
            except OSError as error:
                return "failed: " + type(error).__name__
    """
    (verdict,) = contained(namespaced, program("def f(x: str):\n    return x.startswith('failed')", g))
    assert verdict.status == "pass", verdict
    with pytest.raises(BlockingIOError):
        tcp_server.accept()  # nobody connected


def test_network_error_when_not_caught(namespaced, tcp_server):
    port = tcp_server.getsockname()[1]
    (verdict,) = contained(
        namespaced,
        wrong(
            f"import socket\ndef g():\n    socket.create_connection(('127.0.0.1', {port}), timeout=0.3)\n    return 5"
        ),
    )
    assert verdict.status == "error" and "Error" in verdict.detail, verdict
    with pytest.raises(BlockingIOError):
        tcp_server.accept()


def test_udp_and_dns_do_not_hang(namespaced):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    port = receiver.getsockname()[1]
    g = f"""
        import socket
        def g():
            outcomes = []
            for attempt in [
                lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port})),
                lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)),
                lambda: socket.getaddrinfo("example.com", 80),
                lambda: socket.gethostbyname("pypi.org"),
            ]:
                try:
                    attempt()
                    outcomes.append("worked")
                except OSError:
                    outcomes.append("failed")
            return outcomes
    """
    started = time.monotonic()
    try:
        (verdict,) = contained(
            namespaced,
            program("def f(x: List[str]):\n    return x[1:] == ['failed'] * 3 and x[0] in ('worked', 'failed')", g),
        )
        assert verdict.status == "pass", verdict
        assert verdict.seconds < 1.5
        with pytest.raises(BlockingIOError):
            receiver.recv(16)  # the loopback datagram stayed in the sandbox's own network
    finally:
        receiver.close()
    assert time.monotonic() - started < 10
