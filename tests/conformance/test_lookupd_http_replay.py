"""Every ``http_`` recording of real nsqlookupd 1.3.0, replayed against the embedded one.

For each file: a fresh lookupd, and for the files recorded with two nsqds, two embedded
brokers registered with it and prepared as the ``setup`` says. Each recorded request is
sent as recorded, over a raw socket (same request line, same headers in the same
order), with and without the ``Accept: application/vnd.nsq; version=1.0`` header
where the recorder sent both; the answer must have the recorded status, reason, headers
(names, values and order; only ``Date``'s value differs) and body. JSON bodies are
compared modulo what README.md says changes between runs: list order, remote
addresses, ``/debug``'s ids and timestamps, the OS hostname and the port numbers (mapped
role by role). The recorder's checks and its actions on the nsqds are replayed too.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_nsq.client.transport.http_request import NSQ_V1_ACCEPT, http_request
from airflow_provider_nsq.testing.broker import EmbeddedNSQD
from airflow_provider_nsq.testing.lookupd import EmbeddedNSQLookupd
from airflow_provider_nsq.testing.polling import wait_for
from tests.conformance.lookupd_transcript import (
    REMOTE_ADDRESS,
    LookupdTranscript,
    load,
    normalise,
    with_ports,
)

TRANSCRIPTS = load("http")
RECORDED_HOSTNAME = "vm"  # the recording machine's (README.md)
ACCEPT = ("Accept", NSQ_V1_ACCEPT)


@dataclass
class RawResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


def raw_exchange(port: int, request: bytes) -> RawResponse:
    """Send one request as bytes and read the answer until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = bytearray()
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    _, status, reason = lines[0].split(" ", 2)
    headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
    return RawResponse(int(status), reason, headers, body)  # type: ignore[arg-type]


@dataclass
class Topology:
    t: LookupdTranscript
    lookupd: EmbeddedNSQLookupd
    nsqds: dict[str, EmbeddedNSQD] = field(default_factory=dict)

    @property
    def ports(self) -> dict[str, int]:
        ports = {"nsqlookupd_tcp": self.lookupd.tcp_port, "nsqlookupd_http": self.lookupd.http_port}
        for name, nsqd in self.nsqds.items():
            ports[f"nsqd_{name}_tcp"] = nsqd.tcp_port
            ports[f"nsqd_{name}_http"] = nsqd.http_port
        return ports

    def target(self, recorded: str) -> str:
        """A recorded request target with each role's port replaced by ours."""
        mapping = {str(self.t.ports[r]): str(p) for r, p in self.ports.items()}
        return re.sub(r"\b\d{4,5}\b", lambda m: mapping.get(m.group(0), m.group(0)), recorded)

    def expected_json(self, doc: Any) -> Any:
        doc = with_ports(doc, self.t.ports, self.ports)
        return _replace_hostname(doc, socket.gethostname())

    def lookupd_request(self, method: str, target: str) -> tuple[int, bytes]:
        response = http_request(
            self.lookupd.host,
            self.lookupd.http_port,
            target,
            method=method,
            timeout=10,
            headers=[ACCEPT],
        )
        return response.status, response.body

    def lookupd_channels(self, topic: str) -> list[str]:
        return list(
            json.loads(self.lookupd_request("GET", f"/channels?topic={topic}")[1])["channels"]
        )

    def nsqd_post(self, name: str, target: str) -> None:
        nsqd = self.nsqds[name]
        response = http_request(
            nsqd.host, nsqd.http_port, target, method="POST", body=b"hello", timeout=10
        )
        assert response.status == 200, (target, response.body)


def _replace_hostname(doc: Any, hostname: str) -> Any:
    if isinstance(doc, dict):
        return {
            k: (
                hostname
                if k == "hostname" and v == RECORDED_HOSTNAME
                else _replace_hostname(v, hostname)
            )
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_replace_hostname(v, hostname) for v in doc]
    return doc


def normalise_debug(doc: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    """``/debug``: each key's entries as sorted JSON, ``id`` and ``last_update`` checked
    for shape and blanked (README.md: they change between runs)."""
    out = {}
    for key, entries in doc.items():
        blanked = []
        for entry in entries:
            assert REMOTE_ADDRESS.fullmatch(entry["id"]), entry
            assert isinstance(entry["last_update"], int) and entry["last_update"] > 0
            blanked.append(json.dumps({**entry, "id": "", "last_update": 0}, sort_keys=True))
        out[key] = sorted(blanked)
    return out


@contextmanager
def topology(t: LookupdTranscript) -> Iterator[Topology]:
    with ExitStack() as stack:
        lookupd = stack.enter_context(EmbeddedNSQLookupd())
        topo = Topology(t, lookupd)
        if "nsqd_A_tcp" in t.ports:
            for name in ("A", "B"):
                topo.nsqds[name] = stack.enter_context(
                    EmbeddedNSQD(lookupd_tcp_addresses=[lookupd.tcp_address])
                )
            # setup: as the recorder prepared them, one nsqd after the other (so, as
            # recorded, nsqd_B pre-creates ch_a, which the lookupd knows by then)
            for name, channel in (("A", "ch_a"), ("B", "ch_b")):
                topo.nsqd_post(name, "/pub?topic=lookup_topic")
                topo.nsqd_post(name, f"/channel/create?topic=lookup_topic&channel={channel}")
                wait_for(lambda c=channel: c in topo.lookupd_channels("lookup_topic"), 10)
            wait_for(lambda: len(lookupd.producers("lookup_topic")) == 2, 10)
            if any("second_topic" in line for line in t.data.get("setup", [])):
                topo.nsqd_post("A", "/pub?topic=second_topic")
                wait_for(lambda: lookupd.producers("second_topic"), 10)
        yield topo


def request_bytes(topo: Topology, recorded: dict[str, Any], accept: bool) -> bytes:
    lines = [f"{recorded['method']} {topo.target(recorded['target'])} HTTP/1.1"]
    for name, value in recorded["headers"]:
        if name == "Host":
            value = f"127.0.0.1:{topo.lookupd.http_port}"
        elif name == "Accept" and not accept:
            continue
        lines.append(f"{name}: {value}")
    body = recorded.get("body_text", "").encode()
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def check_answer(topo: Topology, step: dict[str, Any], answer: RawResponse) -> None:
    expected = step["http_response"]
    assert (answer.status, answer.reason) == (expected["status"], expected["reason"])
    names = [name for name, _ in answer.headers]
    assert names == [name for name, _ in expected["headers"]], answer.headers
    for (name, value), (_, want) in zip(answer.headers, expected["headers"], strict=True):
        if name == "Content-Length" and "json" in expected:
            continue  # the JSON's length changes with ports and addresses
        if name != "Date":
            assert value == want, (name, value, want)
    if "json" not in expected:
        assert answer.body == expected["body_text"].encode()
        return
    assert int(dict(answer.headers)["Content-Length"]) == len(answer.body)
    got = json.loads(answer.body)
    if step["http_request"]["target"] == "/debug":
        assert normalise_debug(got) == normalise_debug(topo.expected_json(expected["json"]))
    else:
        assert normalise(got) == normalise(topo.expected_json(expected["json"]))


def run_action(topo: Topology, action: str) -> None:
    match = re.fullmatch(r"nsqd_(\w): POST (\S+) -> .*", action)
    assert match, f"unmapped action {action!r}"
    topo.nsqd_post(match.group(1), match.group(2))


def run_check(topo: Topology, step: dict[str, Any], after_action: bool) -> None:
    check = step["check"]
    if check.startswith("nsqd_A GET /stats"):
        stats = topo.nsqds["A"].stats("lookup_topic")["topics"]
        if "topics" in step:
            assert [t["topic_name"] for t in stats] == step["topics"]
        else:
            assert [c["channel_name"] for c in stats[0]["channels"]] == step["channels"]
        return
    method, target = check.split(" ", 1)

    def matches() -> bool:
        status, body = topo.lookupd_request(method, topo.target(target))
        if status != step["status"]:
            return False
        if "json" in step:
            return normalise(json.loads(body)) == normalise(topo.expected_json(step["json"]))
        return body.decode() == step.get("body_text", "")

    if after_action:  # the nsqd's (UN)REGISTER reaches the lookupd a moment later
        wait_for(matches, 10)
    else:
        assert matches(), check


@pytest.mark.parametrize("t", TRANSCRIPTS, ids=lambda t: t.name)
def test_replay(t: LookupdTranscript) -> None:
    with topology(t) as topo:
        after_action = False
        for step in t.steps:
            if "http_request" in step:
                recorded = step["http_request"]
                accept = any(name == "Accept" for name, _ in recorded["headers"])
                answer = raw_exchange(topo.lookupd.http_port, request_bytes(topo, recorded, accept))
                check_answer(topo, step, answer)
                if isinstance(step.get("without_accept_header"), str):
                    # Sent again without Accept: the very same answer
                    # (tests/conformance/lookupd_transcripts/FACTS.md 1).
                    again = raw_exchange(
                        topo.lookupd.http_port, request_bytes(topo, recorded, accept=False)
                    )
                    check_answer(topo, step, again)
                after_action = False
            elif "action" in step:
                run_action(topo, step["action"])
                after_action = True
            elif "check" in step:
                run_check(topo, step, after_action)
            else:  # pragma: no cover - a new kind of step
                raise AssertionError(f"unknown step {step}")


def test_every_http_recording_is_replayed() -> None:
    assert len(TRANSCRIPTS) == 16
