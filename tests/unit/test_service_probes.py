"""The services' readiness probes (no JVM): a TCP connection to itself is no listener."""

from __future__ import annotations

import http.client
import socket
from typing import Any

import pytest

from icetide.services import process, registry
from tests.fixtures import stack
from tests.fixtures.stack import _ephemeral_range, free_port_block


def _self_connected() -> socket.socket:
    """A socket connected to itself (TCP simultaneous open), as the kernel makes when a connection
    to a port nothing listens on happens to pick that same port as its source."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.connect(s.getsockname())
    return s


def test_chaos_1404_a_connection_to_itself_is_not_a_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _self_connected()
    assert s.getsockname() == s.getpeername()
    monkeypatch.setattr(process.socket, "create_connection", lambda *a, **k: s)
    assert process.port_open("127.0.0.1", s.getsockname()[1]) is False
    with socket.socket() as listener:  # a real listener still counts
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.undo()
        assert process.port_open("127.0.0.1", listener.getsockname()[1]) is True


def test_chaos_1404_a_registry_that_answers_with_no_http_is_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness died when a restarting registry's probe read its own request back (``BadStatusLine``)."""
    reg = registry.LocalRegistry(port=1, management_port=2)

    def echo(*_a: Any, **_k: Any) -> Any:
        raise http.client.BadStatusLine("GET /apis/ccompat/v7/subjects HTTP/1.1")

    monkeypatch.setattr(registry, "port_open", lambda *_a: True)
    monkeypatch.setattr(registry.urllib.request, "urlopen", echo)
    assert reg.ready() is False


def test_ci_stop_49_a_test_service_port_is_outside_the_ephemeral_range_and_free() -> None:
    """CI stop 49: the registry was given 35302, inside the kernel's ephemeral range, and lost it to
    an outgoing connection before its JVM bound it. A port chosen for a test service is never one
    the kernel can hand out as a source port, and nothing is bound to any of the block."""
    low, high = _ephemeral_range()
    for n in (1, 2, 11):
        p = free_port_block(n)
        assert all(not low <= p + i <= high for i in range(n)), (p, n, low, high)
        for i in range(n):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + i))
    with socket.socket() as taken:  # a bound port is never chosen
        taken.bind(("127.0.0.1", 0))
        assert stack._bindable(taken.getsockname()[1]) is False


def test_a_host_whose_ephemeral_range_is_every_port_still_gets_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: with ``ip_local_port_range`` 1024-65535 the choice raised ValueError (an empty range)."""
    monkeypatch.setattr(stack, "_ephemeral_range", lambda: (1024, 65535))
    p = free_port_block(2)
    assert 20000 <= p < 40000
