"""A scripted NSQ server (go-nsq's mockNSQD idea): a real TCP listener on 127.0.0.1 whose
connections each run a test-supplied script, for client edge cases a real nsqd would not
produce on demand (a heartbeat between PUB and OK, split frames, a close before OK,
oversized or non-NSQ frames)."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from airflow_provider_nsq.protocol import encode_error, encode_message, encode_response
from airflow_provider_nsq.testing.wire.command_reader import CommandReader

T = TypeVar("T")

IDENTIFY_JSON = {
    "max_rdy_count": 2500,
    "version": "1.3.0",
    "max_msg_timeout": 900000,
    "msg_timeout": 60000,
    "tls_v1": False,
    "deflate": False,
    "deflate_level": 6,
    "max_deflate_level": 6,
    "snappy": False,
    "sample_rate": 0,
    "auth_required": False,
    "output_buffer_size": 16384,
    "output_buffer_timeout": 250,
}


class Peer:
    """The server side of one connection, for scripts."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(10)
        self.reader = CommandReader()
        self.commands: list[tuple[str, bytes]] = []

    def _wait(self, read: Callable[[], T | None]) -> T:
        """Receive until ``read`` (a CommandReader read) returns something."""
        while (value := read()) is None:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("client closed")
            self.reader.feed(data)
        return value

    def read_command(self) -> tuple[str, bytes]:
        """One client command: (line, body) with the body for the commands that have one."""
        params, body = self._wait(self.reader.read_command)
        line = b" ".join(params).decode()
        self.commands.append((line, body or b""))
        return line, body or b""

    def read_head(self) -> tuple[str, int]:
        """A command's line and its 4-byte body size, leaving (most of) the body unread,
        as nsqd does when it refuses a body by its size: it answers and closes."""
        params = self._wait(self.reader.read_line)
        size = self._wait(self.reader.read_size)
        return b" ".join(params).decode(), size

    def expect_magic(self) -> None:
        assert self._wait(self.reader.read_magic), "the client did not send the V2 magic"

    def handshake(self, **identify_overrides: Any) -> dict:
        """Magic, then answer IDENTIFY with nsqd's JSON; returns the client's IDENTIFY."""
        self.expect_magic()
        line, body = self.read_command()
        assert line == "IDENTIFY", line
        sent = json.loads(body)
        self.send_response(json.dumps({**IDENTIFY_JSON, **identify_overrides}).encode())
        return sent

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_response(self, data: bytes = b"OK") -> None:
        self.send(encode_response(data))

    def send_error(self, code: str, text: str = "") -> None:
        self.send(encode_error(code, text))

    def send_message(self, raw_id: bytes, body: bytes, attempts: int = 1, ts: int = 1) -> None:
        self.send(encode_message(ts, attempts, raw_id, body))

    def close(self) -> None:
        self.sock.close()

    def reset(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


Script = Callable[[Peer], None]


class ScriptedNSQD:
    """``with ScriptedNSQD(script1, script2, ...) as server:`` — connection N runs script N
    (the last script repeats). Script exceptions are re-raised by ``__exit__``."""

    def __init__(self, *scripts: Script, rcvbuf: int | None = None) -> None:
        self.scripts = list(scripts)
        self.listener = socket.socket()
        if rcvbuf is not None:  # set before listen(): accepted sockets inherit it
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = self.listener.getsockname()[1]
        self.peers: list[Peer] = []
        self.errors: list[BaseException] = []
        self.done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ScriptedNSQD:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()
        for t in self._threads:
            t.join(10)
        for peer in self.peers:
            try:
                peer.sock.close()
            except OSError:
                pass
        if self.errors and exc[0] is None:
            raise self.errors[0]

    @property
    def connections(self) -> int:
        return len(self.peers)

    def _serve(self) -> None:
        index = 0
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            peer = Peer(sock)
            self.peers.append(peer)
            script = self.scripts[min(index, len(self.scripts) - 1)]
            index += 1
            t = threading.Thread(target=self._run, args=(script, peer), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, script: Script, peer: Peer) -> None:
        try:
            script(peer)
        except EOFError:
            pass
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self.done.set()
