"""A StatsD server on 127.0.0.1 for the real-Airflow tests: what Airflow's metrics
backend sent (``[metrics] statsd_on``, with InfluxDB-style tags), parsed."""

from __future__ import annotations

import socket
import threading
import time


class StatsDListener:
    """A StatsD server on 127.0.0.1: every datagram received, parsed."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.lines: list[str] = []
        self.received_at: list[float] = []  # time.time() of each line, in step with lines
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def airflow_env(self) -> dict[str, str]:
        """``[metrics]`` for an Airflow that sends here, tags on the wire, prefix
        ``airflow``."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",  # tags on the wire
        }

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            lines = data.decode(errors="replace").splitlines()
            now = time.time()
            self.received_at.extend(now for _ in lines)  # first: lines is read unlocked
            self.lines.extend(lines)

    def samples(self, prefix: str) -> list[tuple[str, dict[str, str], float, str]]:
        """``(name, tags, value, type)`` of each line whose name starts with ``prefix``
        (InfluxDB-style tags: ``name,k=v:value|type``)."""
        return [sample for _, sample in self.timed_samples(prefix)]

    def timed_samples(
        self, prefix: str
    ) -> list[tuple[float, tuple[str, dict[str, str], float, str]]]:
        """:meth:`samples`, each with the time (``time.time()``) it was received."""
        out = []
        for when, line in zip(list(self.received_at), list(self.lines), strict=False):
            head, _, rest = line.partition(":")
            name, *pairs = head.split(",")
            if not name.startswith(prefix) or "|" not in rest:
                continue
            value, kind = rest.split("|")[:2]
            tags = dict(p.split("=", 1) for p in pairs if "=" in p)
            out.append((when, (name, tags, float(value), kind)))
        return out

    def values(self, name: str, **tags: str) -> list[float]:
        """The values sent for ``name`` with (at least) ``tags``, in order."""
        return [
            v
            for n, t, v, _ in self.samples(name)
            if n == name and all(t.get(k) == x for k, x in tags.items())
        ]

    def total(self, name: str, **tags: str) -> float:
        """A counter's sum over the samples with (at least) ``tags``."""
        return sum(self.values(name, **tags))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
