"""Dead sockets' ``pymp-*`` folders go; live, empty, mixed or older ones stay. Real sockets,
read against the kernel's table of bound Unix sockets."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from loadertune.mp_leftovers import remove_dead_listener_dirs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/net/unix")


def _socket_in(folder: Path) -> socket.socket:
    folder.mkdir()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "listener-x"))
    sock.listen()
    return sock


def test_only_folders_of_dead_sockets_go(tmp_path: Path) -> None:
    since = time.time() - 1
    live = _socket_in(tmp_path / "pymp-live")
    _socket_in(tmp_path / "pymp-dead").close()  # the file stays, bound by nobody
    mixed = tmp_path / "pymp-mixed"
    _socket_in(mixed).close()
    (mixed / "notes").write_text("not a socket")
    (tmp_path / "pymp-empty").mkdir()  # just made: its socket may be next
    _socket_in(tmp_path / "other-dead").close()  # not multiprocessing's
    old = tmp_path / "pymp-old"
    _socket_in(old).close()
    os.utime(old, (since - 100, since - 100))
    try:
        assert remove_dead_listener_dirs(since, tmp_path) == 1
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == ["other-dead", "pymp-empty", "pymp-live", "pymp-mixed", "pymp-old"]
        assert (tmp_path / "pymp-live" / "listener-x").exists()
    finally:
        live.close()
    assert remove_dead_listener_dirs(since, tmp_path) == 1  # closed now: it goes too
    assert not (tmp_path / "pymp-live").exists()
