"""The test proxy itself: it forwards, then black-holes both ways without closing."""

from __future__ import annotations

import socket
import threading

from tests.support.blackhole_proxy import BlackholeProxy


def echo_server() -> socket.socket:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_forwards_then_drops_every_byte_without_closing() -> None:
    server = echo_server()
    with BlackholeProxy(server.getsockname()) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        client.sendall(b"ping")
        assert client.recv(16) == b"ping"
        proxy.blackhole()
        client.sendall(b"lost")
        client.settimeout(0.5)
        try:
            got = client.recv(16)
        except TimeoutError:
            got = None
        assert got is None  # neither EOF (b"") nor data: silence
        client.close()
    server.close()
