"""Joining a Ray cluster (no root, no Ray head): the probe that must be refused without a
token is bounded in time and never carries one; nothing that does not speak Ray is
believed to be a cluster."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from commands.sweep import cluster, cluster_auth
from emu.errors import EmuError

TOKEN = "0123456789abcdef" * 4


@pytest.fixture
def mute_listener():
    """A listener that accepts and reads but never answers (not Ray): yields its port
    and what it received."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    got = bytearray()
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        conns = []
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                c.settimeout(0.2)
                conns.append(c)
            except TimeoutError:
                pass
            for c in conns:
                try:
                    got.extend(c.recv(65536))
                except (TimeoutError, OSError):
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], got
    stop.set()
    t.join()
    srv.close()


def test_the_probe_of_a_listener_that_does_not_speak_ray_ends_in_time(mute_listener):
    port, got = mute_listener
    t0 = time.monotonic()
    said = cluster.probe_auth(f"127.0.0.1:{port}", TOKEN, timeout_s=3.0)
    assert time.monotonic() - t0 < 30.0  # killed at its deadline, not Ray's minutes
    assert said[-1] == "error: no answer within 3 s", said
    assert TOKEN.encode() not in bytes(got)  # the token is only sent to a refusing GCS


def test_joining_a_listener_that_does_not_speak_ray_is_refused(mute_listener, monkeypatch,
                                                                tmp_path):
    port, _ = mute_listener
    token = tmp_path / "t"
    token.write_text(TOKEN)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.setattr(cluster_auth, "JOIN_TIMEOUT_S", 3.0)
    with pytest.raises(EmuError, match=f"no Ray cluster answers at 127.0.0.1:{port} "
                       r"\(no answer within 3 s\)"):
        cluster.preflight(f"127.0.0.1:{port}")
