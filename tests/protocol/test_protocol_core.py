"""The sans-I/O core on its own: names, encoders, decoder limits, state rules."""

from __future__ import annotations

import struct

import pytest

from airflow_provider_nsq.protocol import (
    ClientConnection,
    CommandFailed,
    ConnectionClosed,
    ConnectionState,
    FrameDecoder,
    Heartbeat,
    Message,
    NSQConnectionClosedError,
    NSQFrameTooLargeError,
    NSQProtocolError,
    NSQServerError,
    NSQStateError,
    NSQValueError,
    Reply,
    ResponseFrame,
    ServerWarning,
    encode_dpub,
    encode_error,
    encode_identify,
    encode_message,
    encode_mpub,
    encode_pub,
    encode_rdy,
    encode_req,
    encode_response,
    encode_sub,
    is_ephemeral,
    is_valid_name,
    split_mpub,
    validate_channel_name,
    validate_topic_name,
)
from airflow_provider_nsq.protocol.constants import DEFAULT_MAX_FRAME_SIZE

# -- names (tests/conformance/transcripts/FACTS.md section 5) ------------------------------


@pytest.mark.parametrize(
    "name",
    ["a", "a" * 64, "a.b_c-d", "t#ephemeral", "x" * 54 + "#ephemeral", "0", "..."],
)
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name, why",
    [
        ("", "1 to 64"),
        ("a" * 65, "65 characters"),
        ("x" * 55 + "#ephemeral", "65 characters"),
        ("bad!", "letters, digits"),
        ("has space", "letters, digits"),
        ("t#ephemeral#ephemeral", "letters, digits"),
        ("t#other", "letters, digits"),
        ("trailing\n", "letters, digits"),  # Python's "$" would accept this; Go's does not
        ("ünïcode", "letters, digits"),
    ],
)
def test_invalid_names_are_refused_with_the_reason(name: str, why: str) -> None:
    assert not is_valid_name(name)
    with pytest.raises(NSQValueError, match=why) as info:
        validate_topic_name(name)
    assert repr(name) in str(info.value)


@pytest.mark.parametrize(
    "name, problem",
    [
        ("hello space", "' ' is not allowed"),
        ("bad topic!", "' ' and '!' are not allowed"),
        ("t#other", "'#' is not allowed"),
        ("a" * 65, "it is 65 characters long"),
        ("", "it is empty"),
        ("#ephemeral", "it has nothing before '#ephemeral'"),
    ],
)
def test_the_error_says_what_is_wrong_then_every_rule_nsqd_applies(name: str, problem: str) -> None:
    """What a DAG author reads when a literal name fails the DAG file's import: this
    name's problem first, then all of nsqd's rules (docs/nsqd-facts.md, section 5), the
    length included, so that one fix is enough."""
    with pytest.raises(NSQValueError) as info:
        validate_channel_name(name)
    text = str(info.value)
    assert text.startswith(f"invalid channel name {name!r}: {problem}; nsqd takes "), text
    for rule in (
        "1 to 64 characters, the '#ephemeral' suffix included",
        "letters, digits, '.', '_' and '-'",
        "optionally ending in '#ephemeral'",
    ):
        assert rule in text, (rule, text)


def test_ephemeral() -> None:
    assert is_ephemeral("c#ephemeral") and not is_ephemeral("c")


def test_non_string_name() -> None:
    with pytest.raises(NSQValueError, match="must be a str"):
        validate_topic_name(b"bytes")


# -- encoders (bytes as the recordings show them) --------------------------------------


def test_encoders_match_recorded_bytes() -> None:
    assert encode_pub("pub_ok", b"hello").hex() == "505542207075625f6f6b0a0000000568656c6c6f"
    assert encode_mpub("mpub_ok", [b"msg-1", b"msg-2", b"msg-3"]).hex() == (
        "4d505542206d7075625f6f6b0a0000001f00000003000000056d73672d31000000056d73672d3200"
        "0000056d73672d33"
    )
    assert encode_sub("sub_rdy_fin", "ch") == b"SUB sub_rdy_fin ch\n"
    assert encode_rdy(2) == b"RDY 2\n"
    assert encode_req(b"18a3e59995669000", 0) == b"REQ 18a3e59995669000 0\n"
    assert encode_dpub("t", 1000, b"x") == b"DPUB t 1000\n\x00\x00\x00\x01x"
    assert encode_identify({"client_id": "c", "feature_negotiation": True}) == (
        b'IDENTIFY\n\x00\x00\x00\x2c{"client_id":"c","feature_negotiation":true}'
    )


def test_binary_bodies_are_untouched() -> None:
    body = bytes(range(256)) * 4
    assert encode_pub("t", body).endswith(struct.pack(">I", len(body)) + body)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: encode_pub("t", b""), "empty"),
        (lambda: encode_pub("t", "text"), "must be bytes"),
        (lambda: encode_pub("t", b"x" * 11, max_msg_size=10), "max message size of 10 bytes"),
        (lambda: encode_dpub("t", -1, b"x"), "out of range 0-3600000"),
        (lambda: encode_dpub("t", 3_600_001, b"x"), "out of range 0-3600000"),
        (lambda: encode_dpub("t", 1.5, b"x"), "whole milliseconds"),
        (lambda: encode_req(b"0" * 16, 3_600_001), "REQ delay 3600001 ms is out of range"),
        (lambda: encode_req(b"short", 0), "16 bytes"),
        (lambda: encode_rdy(2501), "out of range 0-2500"),
        (lambda: encode_rdy(-1), "out of range 0-2500"),
        (lambda: encode_mpub("t", []), "at least one message"),
        (lambda: encode_mpub("t", [b"a", b""]), "MPUB message 1 body is empty"),
        (
            lambda: encode_mpub("t", [b"a" * 600, b"b" * 600], max_body_size=1024),
            "max body size of 1024",
        ),
    ],
)
def test_encoders_refuse_what_nsqd_would_refuse(call, message: str) -> None:
    with pytest.raises(NSQValueError, match=message):
        call()


def test_split_mpub_uses_as_few_frames_as_fit() -> None:
    bodies = [b"x" * 100] * 25  # 104 bytes each in MPUB framing
    batches = split_mpub(bodies, max_body_size=4 + 104 * 10)
    assert [len(b) for b in batches] == [10, 10, 5]
    assert [m for b in batches for m in b] == bodies
    assert split_mpub([]) == []
    with pytest.raises(NSQValueError, match="message 1"):
        split_mpub([b"ok", b""])
    with pytest.raises(NSQValueError, match="exceeds the max body size"):
        split_mpub([b"x" * 1020], max_body_size=1024)


# -- decoder ---------------------------------------------------------------------------


def test_decoder_handles_a_max_size_message_and_refuses_one_byte_more() -> None:
    body = b"\x00\xff" * (1_048_576 // 2)
    frame = encode_message(1, 1, b"0123456789abcdef", body)
    decoder = FrameDecoder()
    decoder.feed(frame)
    (msg,) = decoder.frames()
    assert isinstance(msg, Message) and msg.body == body
    too_big = struct.pack(">II", DEFAULT_MAX_FRAME_SIZE + 1, 2)
    decoder.feed(too_big)
    with pytest.raises(NSQFrameTooLargeError, match="exceeds the limit"):
        decoder.frames()


@pytest.mark.parametrize(
    "size, text", [(0, "at least 4"), (3, "at least 4"), (0xFFFFFFFF, "negative")]
)
def test_decoder_rejects_impossible_sizes(size: int, text: str) -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">II", size, 0))
    with pytest.raises(NSQProtocolError, match=text):
        decoder.next_frame()


def test_decoder_names_an_http_peer() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"HTTP/1.1 400 Bad Request\r\n")
    with pytest.raises(NSQProtocolError, match="HTTP port") as info:
        decoder.frames()
    assert "(HTTP/1.1 400 Bad Request)" in str(info.value)


def test_an_http_answer_is_reported_as_seen_and_its_source_asked_not_asserted() -> None:
    # Any HTTP server answers an NSQ client so: nsqd's HTTP port, or a proxy in front.
    response = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nServer: nginx/1.25.3\r\n\r\n"
    for decode in ("frames", "next_frame", "needed"):
        decoder = FrameDecoder()
        decoder.feed(response)
        with pytest.raises(NSQProtocolError) as info:
            getattr(decoder, decode)()
        text = str(info.value)
        assert text.startswith(
            "got an HTTP response where NSQ frames were expected "
            "(HTTP/1.1 502 Bad Gateway; Server: nginx/1.25.3): is this nsqd's HTTP port "
            "(4151 by default) or an HTTP proxy?"
        ), text
        assert "TCP port (4150 by default)" in text
    decoder = FrameDecoder()
    decoder.feed(b"HTTP/1.1 40")  # the status line not complete yet: nothing quoted
    with pytest.raises(NSQProtocolError, match=r"expected: is this nsqd's HTTP port"):
        decoder.frames()


def test_decoder_rejects_unknown_frame_type_and_short_message() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">II", 6, 7) + b"xx")
    with pytest.raises(NSQProtocolError, match="unknown frame type 7"):
        decoder.frames()
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">II", 10, 2) + b"x" * 6)
    with pytest.raises(NSQProtocolError, match="shorter than"):
        decoder.frames()


def test_custom_frame_limit_for_servers_with_larger_messages() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(encode_response(b"x" * 96))
    assert decoder.frames() == [ResponseFrame(b"x" * 96)]
    decoder.feed(encode_response(b"x" * 97))
    with pytest.raises(NSQFrameTooLargeError):
        decoder.frames()


# -- connection state ---------------------------------------------------------------


def ready_core(**kw) -> ClientConnection:
    core = ClientConnection(identify={"client_id": "c", "feature_negotiation": True}, **kw)
    core.initiate()
    core.data_to_send()
    core.receive_data(encode_response(b'{"max_rdy_count":100,"version":"1.3.0"}'))
    core.events()
    assert core.state is ConnectionState.READY
    return core


@pytest.mark.parametrize(
    "command, state_text",
    [
        (lambda c: c.rdy(1), "cannot send RDY in state READY"),
        (lambda c: c.fin(b"0" * 16), "cannot send FIN in state READY"),
        (lambda c: c.cls(), "cannot send CLS in state READY"),
    ],
)
def test_state_table_refuses_out_of_order_commands(command, state_text: str) -> None:
    with pytest.raises(NSQStateError, match=state_text):
        command(ready_core())


def test_second_sub_is_refused_and_rdy_is_bounded_by_the_server() -> None:
    core = ready_core()
    core.sub("t", "c")
    with pytest.raises(NSQStateError, match="cannot send SUB in state SUBSCRIBED"):
        core.sub("t", "c")
    with pytest.raises(NSQValueError, match="out of range 0-100"):
        core.rdy(101)


def test_sub_with_heartbeats_disabled_is_refused() -> None:
    core = ClientConnection(identify={"heartbeat_interval": -1})
    core.initiate()
    core.receive_data(encode_response(b"OK"))
    core.events()
    with pytest.raises(NSQStateError, match="heartbeats disabled"):
        core.sub("t", "c")


def test_replies_match_commands_in_order_and_unasked_frames_do_not_consume_them() -> None:
    core = ready_core()
    core.pub("t", b"1")
    core.mpub("t", [b"2"])
    core.receive_data(
        encode_response(b"_heartbeat_")
        + encode_error("E_FIN_FAILED", "FIN x failed ID not in flight")
        + encode_response(b"OK")
        + encode_response(b"OK")
    )
    events = core.events()
    assert [type(e) for e in events] == [Heartbeat, ServerWarning, Reply, Reply]
    assert [e.command for e in events if isinstance(e, Reply)] == ["PUB", "MPUB"]
    assert core.data_to_send().endswith(b"NOP\n")


def test_fatal_error_fails_the_pending_command_and_the_connection() -> None:
    core = ready_core()
    core.pub("t", b"1")
    core.receive_data(
        encode_error("E_BAD_TOPIC", 'PUB topic name "t" is not valid') + encode_response(b"OK")
    )
    (failed,) = core.events()
    assert isinstance(failed, CommandFailed) and failed.command == "PUB"
    assert isinstance(failed.error, NSQServerError) and failed.error.fatal
    assert core.state is ConnectionState.FAILED
    with pytest.raises(NSQConnectionClosedError):
        core.pub("t", b"2")
    core.receive_data(b"")
    assert isinstance(core.events()[-1], ConnectionClosed)


def test_eof_reports_the_commands_left_unanswered() -> None:
    core = ready_core()
    core.pub("t", b"1")
    core.receive_data(b"")
    (closed,) = core.events()
    assert closed == ConnectionClosed(("PUB",))
    assert core.state is ConnectionState.CLOSED


def test_unexpected_response_is_a_protocol_error() -> None:
    core = ready_core()
    core.receive_data(encode_response(b"OK"))
    with pytest.raises(NSQProtocolError, match="no command pending"):
        core.events()
    assert core.state is ConnectionState.FAILED


def test_compression_switches_at_the_exact_byte() -> None:
    """nsqd's deflate OK can arrive in the same read as the plain IDENTIFY response."""
    from airflow_provider_nsq.protocol.compression import DeflateCodec

    core = ClientConnection(
        identify={"feature_negotiation": True, "deflate": True, "deflate_level": 6}
    )
    core.initiate()
    core.data_to_send()
    server = DeflateCodec()
    plain = encode_response(b'{"deflate":true,"deflate_level":6}')
    core.receive_data(plain + server.compress(encode_response(b"OK")))
    events = core.events()
    assert [e.command for e in events if isinstance(e, Reply)] == ["IDENTIFY", "DEFLATE"]
    assert core.state is ConnectionState.READY and core.compression == "deflate"
    core.pub("t", b"x")
    assert server.decompress(core.data_to_send()) == b"PUB t\n\x00\x00\x00\x01x"


def test_auth_secret_never_appears_in_errors() -> None:
    core = ClientConnection(identify={"feature_negotiation": True}, auth_secret=b"hunter2")
    core.initiate()
    core.receive_data(encode_response(b'{"auth_required":true}'))
    core.events()
    core.data_to_send()
    core.receive_data(encode_error("E_AUTH_FAILED", "AUTH failed"))
    (failed,) = core.events()
    assert isinstance(failed, CommandFailed) and failed.command == "AUTH"
    assert "hunter2" not in str(failed.error) and "hunter2" not in repr(core.__dict__.get("error"))
