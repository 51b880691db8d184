"""nsqd's administration endpoints (``POST /topic/*`` and ``/channel/*``) answer as nsqd
1.3.0 does, with the embedded broker and with a real nsqd (``NSQD_ADDRESS``): status,
body and headers of each answer, and what each one does.

Expected answers come from nsqd v1.3.0's ``nsqd/http.go`` (``doCreateTopic``,
``doEmptyTopic``, ``doDeleteTopic``, ``doPauseTopic``, ``doCreateChannel``,
``doEmptyChannel``, ``doDeleteChannel``, ``doPauseChannel``),
``internal/http_api/topic_channel_args.go`` (the order of the argument checks) and
``internal/http_api/api_response.go`` (``RespondV1``: 200 with an empty body and no
``Content-Type``; errors ``{"message":"<CODE>"}`` as JSON).
"""

from __future__ import annotations

import os
from urllib.parse import urlencode

import pytest

from airflow_provider_nsq.client.transport.http_request import NSQ_V1_ACCEPT, http_request

BAD = "bad!name"


@pytest.fixture
def nsq_topic() -> str:
    """A short unique topic (the cases append ``_old`` / ``_new`` within 64 characters)."""
    return f"adm_{os.urandom(4).hex()}"


def _post(nsqd, path: str, **query: str):
    target = path + ("?" + urlencode(query) if query else "")
    return http_request(
        nsqd.http_host,
        nsqd.http_port,
        target,
        timeout=10,
        method="POST",
        headers=[("Accept", NSQ_V1_ACCEPT)],
    )


def _answer(response) -> tuple[int, bytes]:
    return response.status, response.body


def _error(status: int, code: str) -> tuple[int, bytes]:
    return status, b'{"message":"' + code.encode() + b'"}'


OK = (200, b"")


@pytest.mark.parametrize(
    ("path", "query", "expected"),
    [
        ("/topic/create", {}, _error(400, "MISSING_ARG_TOPIC")),
        ("/topic/create", {"topic": BAD}, _error(400, "INVALID_TOPIC")),
        ("/topic/delete", {}, _error(400, "MISSING_ARG_TOPIC")),
        ("/topic/delete", {"topic": BAD}, _error(404, "TOPIC_NOT_FOUND")),  # no name check
        ("/topic/delete", {"topic": "{new}"}, _error(404, "TOPIC_NOT_FOUND")),
        ("/topic/empty", {}, _error(400, "MISSING_ARG_TOPIC")),
        ("/topic/empty", {"topic": BAD}, _error(400, "INVALID_TOPIC")),  # the only check
        ("/topic/empty", {"topic": "{new}"}, _error(404, "TOPIC_NOT_FOUND")),
        ("/topic/pause", {}, _error(400, "MISSING_ARG_TOPIC")),
        ("/topic/pause", {"topic": BAD}, _error(404, "TOPIC_NOT_FOUND")),
        ("/topic/unpause", {"topic": "{new}"}, _error(404, "TOPIC_NOT_FOUND")),
        ("/channel/create", {}, _error(400, "MISSING_ARG_TOPIC")),
        ("/channel/create", {"topic": BAD}, _error(400, "INVALID_ARG_TOPIC")),
        ("/channel/create", {"topic": "{new}"}, _error(400, "MISSING_ARG_CHANNEL")),
        ("/channel/create", {"topic": "{new}", "channel": BAD}, _error(400, "INVALID_ARG_CHANNEL")),
        ("/channel/create", {"topic": "{new}", "channel": "c"}, _error(404, "TOPIC_NOT_FOUND")),
        ("/channel/delete", {"topic": "{new}", "channel": "c"}, _error(404, "TOPIC_NOT_FOUND")),
        ("/channel/delete", {"topic": "{old}", "channel": "c"}, _error(404, "CHANNEL_NOT_FOUND")),
        ("/channel/empty", {"topic": "{old}", "channel": "c"}, _error(404, "CHANNEL_NOT_FOUND")),
        ("/channel/pause", {"topic": "{old}", "channel": "c"}, _error(404, "CHANNEL_NOT_FOUND")),
        ("/channel/unpause", {"topic": "{old}", "channel": "c"}, _error(404, "CHANNEL_NOT_FOUND")),
        ("/topic/create", {"topic": "{old}"}, OK),  # idempotent
    ],
)
def test_each_error_answer_is_nsqds(nsqd, nsq_topic, path, query, expected) -> None:
    nsqd.create_topic(f"{nsq_topic}_old")
    names = {"{new}": f"{nsq_topic}_new", "{old}": f"{nsq_topic}_old"}
    query = {k: names.get(v, v) for k, v in query.items()}
    response = _post(nsqd, path, **query)
    assert _answer(response) == expected
    headers = {k.lower(): v for k, v in response.headers}
    assert headers["x-nsq-content-type"] == "nsq; version=1.0"
    if response.status == 200:
        assert "content-type" not in headers  # RespondV1 sets it for JSON only
    else:
        assert headers["content-type"] == "application/json; charset=utf-8"


def test_a_get_is_refused_as_httprouter_refuses_it(nsqd) -> None:
    response = http_request(nsqd.http_host, nsqd.http_port, "/topic/create?topic=x", timeout=10)
    assert _answer(response) == _error(405, "METHOD_NOT_ALLOWED")


def test_what_each_endpoint_does(nsqd, nsq_topic) -> None:
    topic = nsq_topic
    assert _answer(_post(nsqd, "/topic/create", topic=topic)) == OK
    assert _answer(_post(nsqd, "/channel/create", topic=topic, channel="c")) == OK
    nsqd.http_publish(topic, b"one")
    assert nsqd.channel_stats(topic, "c")["depth"] == 1

    assert _answer(_post(nsqd, "/channel/pause", topic=topic, channel="c")) == OK
    assert nsqd.channel_stats(topic, "c")["paused"] is True
    assert _answer(_post(nsqd, "/channel/pause", topic=topic, channel="c")) == OK  # again: OK
    assert _answer(_post(nsqd, "/channel/unpause", topic=topic, channel="c")) == OK
    assert nsqd.channel_stats(topic, "c")["paused"] is False

    assert _answer(_post(nsqd, "/channel/empty", topic=topic, channel="c")) == OK
    assert nsqd.channel_stats(topic, "c")["depth"] == 0

    # A paused topic keeps what is published in the topic, not in its channels.
    assert _answer(_post(nsqd, "/topic/pause", topic=topic)) == OK
    nsqd.http_publish(topic, b"two")
    assert nsqd.topic_stats(topic)["paused"] is True
    assert (nsqd.topic_stats(topic)["depth"], nsqd.channel_stats(topic, "c")["depth"]) == (1, 0)
    assert _answer(_post(nsqd, "/topic/empty", topic=topic)) == OK  # the topic's own queue
    assert nsqd.topic_stats(topic)["depth"] == 0
    assert _answer(_post(nsqd, "/topic/unpause", topic=topic)) == OK
    assert nsqd.channel_stats(topic, "c")["depth"] == 0

    assert _answer(_post(nsqd, "/channel/delete", topic=topic, channel="c")) == OK
    assert nsqd.channel_stats(topic, "c") is None
    assert _answer(_post(nsqd, "/topic/delete", topic=topic)) == OK
    assert nsqd.topic_stats(topic) is None
    assert _answer(_post(nsqd, "/topic/delete", topic=topic)) == _error(404, "TOPIC_NOT_FOUND")
