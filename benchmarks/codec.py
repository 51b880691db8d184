"""Codec cost per message: encode an MPUB of 200 x 200-byte messages, decode 10,000
message frames (fed in 64 KiB reads, as a socket delivers them), and FIN them.

    python benchmarks/codec.py [--repeat N]

Prints ns per message for each, best of N runs. Pure CPU: no sockets, no server.
"""

from __future__ import annotations

import argparse
import os
import time

from airflow_provider_nsq.client.message import NSQMessage
from airflow_provider_nsq.protocol import FrameDecoder, encode_message, encode_mpub, encode_response
from airflow_provider_nsq.protocol.connection import ClientConnection


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    bodies = [os.urandom(200) for _ in range(200)]
    encode_ns = best(lambda: [encode_mpub("bench", bodies) for _ in range(50)], args.repeat)
    encode_per_msg = encode_ns / (50 * 200)

    frames = b"".join(
        encode_message(1_700_000_000_000_000_000 + i, 1, b"%016x" % i, os.urandom(200))
        for i in range(10_000)
    )
    chunks = [frames[i : i + 65536] for i in range(0, len(frames), 65536)]

    def decode() -> None:
        decoder = FrameDecoder(message_class=NSQMessage)
        n = 0
        for chunk in chunks:
            decoder.feed(chunk)
            n += len(decoder.frames())
        assert n == 10_000

    decode_per_msg = best(decode, args.repeat) / 10_000

    def consume_and_fin() -> None:
        core = ClientConnection(message_class=NSQMessage)
        core.initiate()
        core.sub("bench", "c")
        core.rdy(2500)
        core.receive_data(encode_response(b"OK"))
        core.events()
        core.data_to_send()
        n = 0
        for chunk in chunks:
            core.receive_data(chunk)
            messages = core.events()
            core.fin_many([m.raw_id for m in messages])
            core.data_to_send()
            n += len(messages)
        assert n == 10_000

    consume_per_msg = best(consume_and_fin, args.repeat) / 10_000

    print(f"{'operation':<46}{'ns/msg':>10}{'target':>10}")
    print(f"{'encode MPUB, 200 x 200 B':<46}{encode_per_msg:>10.0f}{'<= 300':>10}")
    print(
        f"{'decode 10,000 message frames (64 KiB reads)':<46}{decode_per_msg:>10.0f}{'<= 1000':>10}"
    )
    print(f"{'decode + FIN batch per read (core, no I/O)':<46}{consume_per_msg:>10.0f}{'':>10}")


if __name__ == "__main__":
    main()
