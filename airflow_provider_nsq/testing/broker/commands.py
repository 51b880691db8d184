"""The V2 commands, as nsqd 1.3.0's ``protocol_v2.go`` executes them.

Each handler takes the connection and the command line split on single spaces
(docs/nsqd-facts.md section 1) and either returns the response payload
(``None``: no response) or, when it must read a body or wait (AUTH, TLS), returns a
generator. The generator yields a :data:`Need` ("I need this many buffered bytes past the
read position; if the stream ends first, say this") or an awaitable (its result is sent back
in), and returns the response payload. Bytes are read through the connection's
:class:`~..wire.command_reader.CommandReader`. Errors are raised as
:class:`ClientError` with nsqd's exact code and text (docs/nsqd-facts.md
section 3).

Validation order matters and follows nsqd: e.g. PUB checks the topic name and the
length prefix before reading the body, and AUTH permission only after it; MPUB checks
auth before the body and reads ``count`` messages straight from the stream, not bounded
by its declared body length (docs/nsqd-facts.md section 6).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import Any

from airflow_provider_nsq.protocol.constants import CLOSE_WAIT, MESSAGE_ID_LENGTH, OK
from airflow_provider_nsq.protocol.names import is_valid_name

from ..wire.command_reader import BadMessageSize, CommandReader
from ..wire.go_json import go_json
from .authorization import AuthFailed, AuthState
from .channel import QueueFull
from .errors import ClientError, go_quote
from .identify import decode_identify
from .session import (
    STATE_CLOSING,
    STATE_INIT,
    STATE_SUBSCRIBED,
    ClientSession,
    Handler,
    Result,
)

log = logging.getLogger("airflow_provider_nsq.testing.broker")

_U64 = 1 << 64
_I63 = 1 << 63

#: What a command yields while it runs: the bytes it needs past the read position, with
#: nsqd's error code and text should the stream end first; or an awaitable.
Need = tuple[int, str, str]
Body = Generator[Any, Any, bytes | None]


def parse_base10(value: bytes) -> int | None:
    """nsqd's ByteToBase10: digits only (so no sign), empty is 0, wraps at 2**64."""
    if value and not value.isdigit():
        return None
    if not value.isascii():
        return None
    return int(value) % _U64 if value else 0


def _enough(params: list[bytes], n: int, cmd: str, word: str = "parameters") -> None:
    if len(params) < n:
        raise ClientError("E_INVALID", f"{cmd} insufficient number of {word}")


def _valid_name(params: list[bytes], index: int, cmd: str, kind: str, prefix: bytes = b"") -> str:
    """Parameter ``index`` as a topic or channel name (``kind``), or nsqd's E_BAD_TOPIC /
    E_BAD_CHANNEL quoting it."""
    raw = params[index]
    text = raw.decode("latin-1")
    if is_valid_name(text):
        return text
    message = prefix + f"{cmd} {kind} name ".encode() + go_quote(raw) + b" is not valid"
    raise ClientError(f"E_BAD_{kind.upper()}", message)


def _base10(raw: bytes, cmd: str, what: str) -> int:
    value = parse_base10(raw)
    if value is None:
        raise ClientError("E_INVALID", f"{cmd} could not parse {what} ".encode() + raw)
    return value


def read_body_size(
    reader: CommandReader, code: str, cmd: str, what: str, limit: int, too_big: str
) -> Generator[Need, None, int]:
    """A body's size, 1 to ``limit``, with nsqd's texts: "<cmd> failed to read <what>
    size", "<cmd> invalid <what> size N", "<cmd> <too_big> too big N > limit"."""
    size = yield from read_len(reader, code, f"{cmd} failed to read {what} size")
    if size <= 0:
        raise ClientError(code, f"{cmd} invalid {what} size {size}")
    if size > limit:
        raise ClientError(code, f"{cmd} {too_big} too big {size} > {limit}")
    return size


# -- body reading ---------------------------------------------------------------------


def read_len(reader: CommandReader, code: str, text: str) -> Generator[Need, None, int]:
    """A size or count; ``code`` and ``text`` are nsqd's error if the stream ends first."""
    value = reader.read_size()
    while value is None:
        yield 4, code, text
        value = reader.read_size()
    return value


def read_exact(reader: CommandReader, n: int, code: str, text: str) -> Generator[Need, None, bytes]:
    data = reader.read_exact(n)
    while data is None:
        yield n, code, text
        data = reader.read_exact(n)
    return data


def read_mpub(
    reader: CommandReader, max_msg_size: int, max_body_size: int
) -> Generator[Need, None, list[bytes]]:
    """nsqd's readMPUB, shared by TCP and HTTP MPUB: the count, then ``count`` messages
    read from the stream whatever a declared body size says (mpub_count_mismatch_more /
    _fewer)."""
    count = yield from read_len(reader, "E_BAD_BODY", "MPUB failed to read message count")
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise ClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
    bodies: list[bytes] = []
    while True:
        try:
            need = reader.read_messages(count, max_msg_size, bodies)
        except BadMessageSize as exc:
            if exc.size <= 0:
                text = f"MPUB invalid message({exc.index}) body size {exc.size}"
            else:
                text = f"MPUB message too big {exc.size} > {max_msg_size}"
            raise ClientError("E_BAD_MESSAGE", text) from None
        if not need:
            return bodies
        if need == 4:
            yield need, "E_BAD_MESSAGE", f"MPUB failed to read message({len(bodies)}) body size"
        else:
            yield need, "E_BAD_MESSAGE", "MPUB failed to read message body"


# -- auth -------------------------------------------------------------------------------


def _ask_authorizer(session: ClientSession) -> Generator[Any, Any, AuthState]:
    """Ask the authorizer about the session's secret and keep its answer. nsqd tells the
    client only "AUTH failed" and its log why (auth_bad_secret)."""
    try:
        state: AuthState = yield session.query_auth()
    except AuthFailed as exc:
        log.warning("[%s] AUTH failed %s", session, exc)
        raise ClientError("E_AUTH_FAILED", "AUTH failed") from None
    except Exception as exc:  # an answer no one foresaw: nsqd's reply is the same
        log.warning("[%s] AUTH failed: unusable answer (%s)", session, type(exc).__name__)
        raise ClientError("E_AUTH_FAILED", "AUTH failed") from None
    session.auth_state = state
    return state


def check_auth(
    session: ClientSession, cmd: str, topic: str, channel: str
) -> Generator[Any, Any, None]:
    """nsqd's CheckAuth: AUTH first, re-ask the authorizer once the TTL ran out."""
    if not session.options.auth_enabled:
        return
    state = session.auth_state
    if state is None or not state.authorizations:
        raise ClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
    if state.expired:
        state = yield from _ask_authorizer(session)
    if not state.allows(topic, channel):
        raise ClientError(
            "E_UNAUTHORIZED",
            f"AUTH failed for {cmd} on ".encode()
            + go_quote(topic.encode("latin-1"))
            + b" "
            + go_quote(channel.encode("latin-1")),
        )


def _publish(
    session: ClientSession, cmd: str, topic_name: str, bodies: list[bytes], defer_ms: int
) -> None:
    topic = session.broker.get_topic(topic_name)
    try:
        topic.publish(bodies, defer_ms)
    except QueueFull as exc:
        raise ClientError(f"E_{cmd}_FAILED", f"{cmd} failed {exc}") from None
    session.published(topic_name, len(bodies))


# -- commands -----------------------------------------------------------------------------


def cmd_nop(session: ClientSession, params: list[bytes]) -> Result:
    return None


def cmd_identify(session: ClientSession, params: list[bytes]) -> Result:
    if session.state != STATE_INIT:
        raise ClientError("E_INVALID", "cannot IDENTIFY in current state")
    return _identify(session)


def _read_sized_body(session: ClientSession, command: str) -> Generator[Need, None, bytes]:
    """IDENTIFY's and AUTH's ``[u32be len][bytes]``, bounded by max-body-size, with
    nsqd's texts for each way it can fail (docs/nsqd-facts.md section 3)."""
    reader = session.reader
    limit = session.options.max_body_size
    size = yield from read_body_size(reader, "E_BAD_BODY", command, "body", limit, "body")
    return (yield from read_exact(reader, size, "E_BAD_BODY", f"{command} failed to read body"))


def _identify(session: ClientSession) -> Body:
    opts = session.options
    body = yield from _read_sized_body(session, "IDENTIFY")
    data = decode_identify(body)
    error = session.apply_identify(data)
    if error:
        raise ClientError("E_BAD_BODY", f"IDENTIFY {error}")
    if not data.feature_negotiation:
        return OK
    # docs/nsqd-facts.md section 4: what nsqd reports, and section 8:
    # the upgrade order.
    tls_v1 = opts.tls_enabled and data.tls_v1
    deflate = opts.deflate and data.deflate
    level = data.deflate_level if deflate and data.deflate_level > 0 else 6
    level = min(level, opts.max_deflate_level)
    snappy = opts.snappy and data.snappy
    if deflate and snappy:
        raise ClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
    if session.compressed:  # a second upgrade would nest streams; nsqd would garble them
        deflate = snappy = False
    response = go_json(
        {
            "max_rdy_count": opts.max_rdy_count,
            "version": session.broker.version,
            "max_msg_timeout": opts.max_msg_timeout,
            "msg_timeout": session.settings.msg_timeout,
            "tls_v1": tls_v1,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": session.settings.sample_rate,
            "auth_required": opts.auth_enabled,
            "output_buffer_size": session.settings.output_buffer_size,
            "output_buffer_timeout": session.settings.output_buffer_timeout,
        }
    )
    session.send_response(response, flush=True)
    if tls_v1 and not session.tls:
        try:
            yield session.upgrade_tls()
        except Exception as exc:
            raise ClientError("E_IDENTIFY_FAILED", f"IDENTIFY failed {exc}") from None
        session.send_response(OK, flush=True)
    if snappy:
        session.start_compression("snappy", 0)
        session.send_response(OK, flush=True)
    elif deflate:
        session.start_compression("deflate", level)
        session.send_response(OK, flush=True)
    return None


def cmd_auth(session: ClientSession, params: list[bytes]) -> Result:
    if session.state != STATE_INIT:
        raise ClientError("E_INVALID", "cannot AUTH in current state")
    if len(params) != 1:
        raise ClientError("E_INVALID", "AUTH invalid number of parameters")
    return _auth(session)


def _auth(session: ClientSession) -> Body:
    opts = session.options
    secret = yield from _read_sized_body(session, "AUTH")
    if session.auth_state is not None and session.auth_state.authorizations:
        raise ClientError("E_INVALID", "AUTH already set")
    if not opts.auth_enabled:
        raise ClientError("E_AUTH_DISABLED", "AUTH disabled")
    session.auth_secret = secret
    state = yield from _ask_authorizer(session)
    if not state.authorizations:
        raise ClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
    return go_json(
        {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
    )


def cmd_pub(session: ClientSession, params: list[bytes]) -> Result:
    _enough(params, 2, "PUB")
    return _pub(session, "PUB", _valid_name(params, 1, "PUB", "topic"), 0)


def cmd_dpub(session: ClientSession, params: list[bytes]) -> Result:
    _enough(params, 3, "DPUB")
    topic = _valid_name(params, 1, "DPUB", "topic")
    timeout = _base10(params[2], "DPUB", "timeout")
    limit = session.options.max_req_timeout
    if timeout > limit:
        raise ClientError("E_INVALID", f"DPUB timeout {timeout} out of range 0-{limit}")
    return _pub(session, "DPUB", topic, timeout)


def _pub(session: ClientSession, cmd: str, topic: str, defer_ms: int) -> Body:
    reader = session.reader
    limit = session.options.max_msg_size
    size = yield from read_body_size(reader, "E_BAD_MESSAGE", cmd, "message body", limit, "message")
    body = yield from read_exact(
        reader, size, "E_BAD_MESSAGE", f"{cmd} failed to read message body"
    )
    yield from check_auth(session, cmd, topic, "")
    _publish(session, cmd, topic, [body], defer_ms)
    return OK


def cmd_mpub(session: ClientSession, params: list[bytes]) -> Result:
    _enough(params, 2, "MPUB")
    # The code really is repeated in nsqd 1.3.0's text
    # (docs/nsqd-facts.md section 3).
    return _mpub(session, _valid_name(params, 1, "MPUB", "topic", prefix=b"E_BAD_TOPIC "))


def _mpub(session: ClientSession, topic: str) -> Body:
    opts = session.options
    yield from check_auth(session, "MPUB", topic, "")
    session.broker.get_topic(topic)  # nsqd creates the topic before reading the body
    yield from read_body_size(
        session.reader, "E_BAD_BODY", "MPUB", "body", opts.max_body_size, "body"
    )
    bodies = yield from read_mpub(session.reader, opts.max_msg_size, opts.max_body_size)
    _publish(session, "MPUB", topic, bodies, 0)
    return OK


def cmd_sub(session: ClientSession, params: list[bytes]) -> Result:
    if session.state != STATE_INIT:
        raise ClientError("E_INVALID", "cannot SUB in current state")
    if session.settings.heartbeat_interval <= 0:
        raise ClientError("E_INVALID", "cannot SUB with heartbeats disabled")
    _enough(params, 3, "SUB")
    topic = _valid_name(params, 1, "SUB", "topic")
    return _sub(session, topic, _valid_name(params, 2, "SUB", "channel"))


def _sub(session: ClientSession, topic_name: str, channel_name: str) -> Body:
    yield from check_auth(session, "SUB", topic_name, channel_name)
    channel = session.broker.get_topic(topic_name).get_channel(channel_name)
    try:
        channel.add_client(session)
    except ValueError as exc:
        raise ClientError("E_SUB_FAILED", f"SUB failed {exc}") from None
    session.subscribed(channel)
    return OK


def cmd_rdy(session: ClientSession, params: list[bytes]) -> Result:
    if session.state == STATE_CLOSING:
        return None  # nsqd ignores RDY after CLS
    if session.state != STATE_SUBSCRIBED:
        raise ClientError("E_INVALID", "cannot RDY in current state")
    count = 1
    if len(params) > 1:
        parsed = _base10(params[1], "RDY", "count")
        count = parsed - _U64 if parsed >= _I63 else parsed  # Go's int64(uint64)
    limit = session.options.max_rdy_count
    if count < 0 or count > limit:
        raise ClientError("E_INVALID", f"RDY count {count} out of range 0-{limit}")
    session.set_rdy(count)
    return None


def _message_id(session: ClientSession, cmd: str, params: list[bytes], n: int) -> bytes:
    if session.state != STATE_SUBSCRIBED and session.state != STATE_CLOSING:
        raise ClientError("E_INVALID", f"cannot {cmd} in current state")
    # "params", not "parameters", as nsqd 1.3.0 says it
    # (docs/nsqd-facts.md section 3).
    _enough(params, n, cmd, "params")
    msg_id = params[1]
    if len(msg_id) != MESSAGE_ID_LENGTH:
        raise ClientError("E_INVALID", "invalid message ID")
    return msg_id


def _in_channel(cmd: str, msg_id: bytes, act: Callable[[], None]) -> None:
    """Run FIN/REQ/TOUCH's channel ``act``; an unknown or foreign id is the non-fatal
    E_FIN/REQ/TOUCH_FAILED, e.g. ``FIN <id> failed ID not in flight``."""
    try:
        act()
    except LookupError as exc:
        text = cmd.encode() + b" " + msg_id + b" failed " + str(exc.args[0]).encode()
        raise ClientError(f"E_{cmd}_FAILED", text) from None


def cmd_fin(session: ClientSession, params: list[bytes]) -> Result:
    msg_id = _message_id(session, "FIN", params, 2)
    channel = session.channel
    assert channel is not None  # subscribed
    _in_channel("FIN", msg_id, lambda: channel.finish(session, msg_id))
    session.finished()
    return None


def cmd_req(session: ClientSession, params: list[bytes]) -> Result:
    msg_id = _message_id(session, "REQ", params, 3)
    timeout = _base10(params[2], "REQ", "timeout")
    # Unlike DPUB, REQ silently clamps to 0..max-req-timeout (req_timeout_clamped). nsqd
    # turns the ms into an int64 Duration first, so huge values wrap negative -> 0.
    duration_ns = (timeout * 1_000_000) % _U64
    if duration_ns >= _I63:
        timeout = 0
    timeout = min(timeout, session.options.max_req_timeout)
    channel = session.channel
    assert channel is not None  # subscribed
    _in_channel("REQ", msg_id, lambda: channel.requeue(session, msg_id, timeout))
    session.requeued()
    return None


def cmd_touch(session: ClientSession, params: list[bytes]) -> Result:
    msg_id = _message_id(session, "TOUCH", params, 2)
    channel = session.channel
    assert channel is not None  # subscribed
    msg_timeout = session.settings.msg_timeout
    _in_channel("TOUCH", msg_id, lambda: channel.touch(session, msg_id, msg_timeout))
    return None


def cmd_cls(session: ClientSession, params: list[bytes]) -> Result:
    if session.state != STATE_SUBSCRIBED:
        raise ClientError("E_INVALID", "cannot CLS in current state")
    session.start_close()
    return CLOSE_WAIT


HANDLERS: dict[bytes, Handler] = {
    b"IDENTIFY": cmd_identify,
    b"FIN": cmd_fin,
    b"RDY": cmd_rdy,
    b"REQ": cmd_req,
    b"PUB": cmd_pub,
    b"MPUB": cmd_mpub,
    b"DPUB": cmd_dpub,
    b"NOP": cmd_nop,
    b"TOUCH": cmd_touch,
    b"SUB": cmd_sub,
    b"CLS": cmd_cls,
    b"AUTH": cmd_auth,
}
