"""A stand-in nsqd that does almost nothing, to measure a client's own ceiling.

    python benchmarks/clients/null_nsqd.py --tcp-port P

``throughput.py --server null`` runs the workloads against it. It answers IDENTIFY, SUB,
PUB, MPUB, DPUB and CLS as nsqd does (tests/conformance/transcripts/FACTS.md sections 1 and
4), keeps nothing, and for a subscriber streams pre-built 200-byte message frames within the
RDY window (a FIN frees a slot, tests/conformance/transcripts/FACTS.md section 6). Its cost
per message is a fraction of a real broker's, so the figures show how fast each client can
go, and its CPU column stays low: what is left is the client (and the kernel's loopback).

One thread reads each connection; a subscribed connection gets a second thread that
writes. Commands are read and frames encoded by the project's protocol core
(``CommandReader``, ``encode_response``, ``encode_message``), nothing else of it.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading

from airflow_provider_nsq.protocol.frames import encode_message, encode_response
from airflow_provider_nsq.testing.wire.command_reader import CommandReader

_BATCH = 100  # message frames per write to a subscriber
_BODY = bytes(i % 251 for i in range(200))
_IDENTIFY_RESPONSE = json.dumps(
    {
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
).encode()
_OK = encode_response(b"OK")
_CLOSE_WAIT = encode_response(b"CLOSE_WAIT")
_IDENTIFIED = encode_response(_IDENTIFY_RESPONSE)


def _messages(start: int, count: int) -> bytes:
    return b"".join(
        encode_message(1_700_000_000_000_000_000, 1, b"%016x" % (start + i), _BODY)
        for i in range(count)
    )


class _Subscriber:
    """The RDY window of one subscribed connection, and the thread that fills it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rdy = 0
        self.in_flight = 0
        self.closed = False
        self.cond = threading.Condition()
        # Ids repeat every 2500 messages; clients FIN what they get and nothing here
        # depends on ids being unique (nsqd's are).
        self.frames = [_messages(n, 1) for n in range(2500)]
        self.batches = [b"".join(self.frames[n : n + _BATCH]) for n in range(0, 2500, _BATCH)]
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self) -> None:
        n = 0
        try:
            while True:
                with self.cond:
                    while not self.closed and self.rdy <= self.in_flight:
                        self.cond.wait()
                    if self.closed:
                        return
                    room = min(self.rdy - self.in_flight, _BATCH)
                    self.in_flight += room
                # Whole pre-built batches while the window allows (pynsq and gnsq start
                # at RDY 1 and raise it as messages arrive); the remainder frame by frame.
                start = (n * _BATCH) % 2500
                if room == _BATCH:
                    self.sock.sendall(self.batches[start // _BATCH])
                else:
                    self.sock.sendall(b"".join(self.frames[start : start + room]))
                n += 1
        except OSError:
            return

    def update(self, rdy: int | None = None, finished: int = 0, closed: bool = False) -> None:
        with self.cond:
            if rdy is not None:
                self.rdy = rdy
            self.in_flight = max(0, self.in_flight - finished)
            self.closed = self.closed or closed
            self.cond.notify()


def serve(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sub: _Subscriber | None = None
    reader = CommandReader()
    magic: bool | None = None
    try:
        while True:
            # 64 KiB: below glibc's mmap threshold, so a read does not mmap/munmap.
            chunk = conn.recv(65536)
            if not chunk:
                return
            reader.feed(chunk)
            if magic is None and (magic := reader.read_magic()) is None:
                continue
            replies, fins = [], 0
            while (command := reader.read_command()) is not None:
                params, body = command
                name = params[0]
                if body is not None:
                    replies.append(_IDENTIFIED if name == b"IDENTIFY" else _OK)
                elif name == b"FIN" or name == b"REQ":
                    fins += 1
                elif name == b"RDY":
                    if sub is None:
                        sub = _Subscriber(conn)
                    sub.update(rdy=int(params[1] if len(params) > 1 and params[1] else b"1"))
                elif name == b"SUB":
                    replies.append(_OK)
                elif name == b"CLS":
                    if sub is not None:
                        sub.update(rdy=0)
                    replies.append(_CLOSE_WAIT)
            reader.compact()
            if fins and sub is not None:
                sub.update(finished=fins)
            if replies:
                conn.sendall(b"".join(replies))
    except OSError:
        return
    finally:
        if sub is not None:
            sub.update(closed=True)
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tcp-port", type=int, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.create_server((args.host, args.tcp_port))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
