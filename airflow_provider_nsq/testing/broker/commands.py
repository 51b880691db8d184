"""The V2 commands, as nsqd 1.3.0's ``protocol_v2.go`` executes them.

Each handler takes the connection and the command line split on single spaces (FACTS.md
section 1) and either returns the response payload (``None``: no response) or, when it
must read a body or wait (AUTH, TLS), returns a generator. The generator yields a
:data:`Need` ("I need this many buffered bytes past the read position; if the stream
ends first, say this") or an awaitable (its result is sent back in), and returns the
response payload. Bytes are read through the connection's
:class:`~airflow_provider_nsq.protocol.command_reader.CommandReader`. Errors are raised
as :class:`ClientError` with nsqd's exact code and text (FACTS.md section 3).

Validation order matters and follows nsqd: e.g. PUB checks the topic name and the
length prefix before reading the body, and AUTH permission only after it; MPUB checks
auth before the body and reads ``count`` messages straight from the stream, not bounded
by its declared body length (FACTS.md section 6).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from airflow_provider_nsq.protocol.command_reader import BadMessageSize, CommandReader
from airflow_provider_nsq.protocol.constants import CLOSE_WAIT, MESSAGE_ID_LENGTH, OK
from airflow_provider_nsq.protocol.go_json import go_json
from airflow_provider_nsq.protocol.names import is_valid_name

from .auth import AuthFailed
from .channel import QueueFull
from .errors import ClientError, go_quote
from .identify import decode_identify

if TYPE_CHECKING:
    from .client import ClientConnection

log = logging.getLogger("airflow_provider_nsq.testing.broker")

STATE_INIT = 0
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

_U64 = 1 << 64
_I63 = 1 << 63

#: What a command yields while it runs: the bytes it needs past the read position, with
#: nsqd's error code and text should the stream end first; or an awaitable.
Need = tuple[int, str, str]
Body = Generator[Any, Any, bytes | None]
Result = bytes | None | Body


def parse_base10(value: bytes) -> int | None:
    """nsqd's ByteToBase10: digits only (so no sign), empty is 0, wraps at 2**64."""
    if value and not value.isdigit():
        return None
    if not value.isascii():
        return None
    return int(value) % _U64 if value else 0


def _name(value: bytes) -> str | None:
    text = value.decode("latin-1")
    return text if is_valid_name(text) else None


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


def check_auth(
    conn: ClientConnection, cmd: str, topic: str, channel: str
) -> Generator[Any, Any, None]:
    """nsqd's CheckAuth: AUTH first, re-ask the authorizer once the TTL ran out."""
    if not conn.broker.options.auth_enabled:
        return
    state = conn.auth_state
    if state is None or not state.authorizations:
        raise ClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
    if state.expired:
        try:
            state = yield conn.query_auth()
        except AuthFailed as exc:
            log.warning("[%s] auth failed %s", conn, exc)
            raise ClientError("E_AUTH_FAILED", "AUTH failed") from None
        conn.auth_state = state
    if not state.allows(topic, channel):
        raise ClientError(
            "E_UNAUTHORIZED",
            f"AUTH failed for {cmd} on ".encode()
            + go_quote(topic.encode("latin-1"))
            + b" "
            + go_quote(channel.encode("latin-1")),
        )


def _publish(
    conn: ClientConnection, cmd: str, topic_name: str, bodies: list[bytes], defer_ms: int
) -> None:
    topic = conn.broker.get_topic(topic_name)
    try:
        topic.publish(bodies, defer_ms)
    except QueueFull as exc:
        raise ClientError(f"E_{cmd}_FAILED", f"{cmd} failed {exc}") from None
    conn.published(topic_name, len(bodies))


# -- commands -----------------------------------------------------------------------------


def cmd_nop(conn: ClientConnection, params: list[bytes]) -> Result:
    return None


def cmd_identify(conn: ClientConnection, params: list[bytes]) -> Result:
    if conn.state != STATE_INIT:
        raise ClientError("E_INVALID", "cannot IDENTIFY in current state")
    return _identify(conn)


def _read_sized_body(conn: ClientConnection, command: str) -> Generator[Need, None, bytes]:
    """IDENTIFY's and AUTH's ``[u32be len][bytes]``, bounded by max-body-size, with
    nsqd's texts for each way it can fail (FACTS.md section 3)."""
    limit = conn.broker.options.max_body_size
    size = yield from read_len(conn.reader, "E_BAD_BODY", f"{command} failed to read body size")
    if size > limit:
        raise ClientError("E_BAD_BODY", f"{command} body too big {size} > {limit}")
    if size <= 0:
        raise ClientError("E_BAD_BODY", f"{command} invalid body size {size}")
    return (
        yield from read_exact(conn.reader, size, "E_BAD_BODY", f"{command} failed to read body")
    )


def _identify(conn: ClientConnection) -> Body:
    opts = conn.broker.options
    body = yield from _read_sized_body(conn, "IDENTIFY")
    data = decode_identify(body)
    error = conn.apply_identify(data)
    if error:
        raise ClientError("E_BAD_BODY", f"IDENTIFY {error}")
    if not data.feature_negotiation:
        return OK
    # FACTS.md section 4: what nsqd reports, and section 8: the upgrade order.
    tls_v1 = opts.tls_enabled and data.tls_v1
    deflate = opts.deflate and data.deflate
    level = data.deflate_level if deflate and data.deflate_level > 0 else 6
    level = min(level, opts.max_deflate_level)
    snappy = opts.snappy and data.snappy
    if deflate and snappy:
        raise ClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
    if conn.compressed:  # a second upgrade would nest streams; nsqd would garble them
        deflate = snappy = False
    response = go_json(
        {
            "max_rdy_count": opts.max_rdy_count,
            "version": conn.broker.version,
            "max_msg_timeout": opts.max_msg_timeout,
            "msg_timeout": conn.msg_timeout,
            "tls_v1": tls_v1,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": conn.sample_rate,
            "auth_required": opts.auth_enabled,
            "output_buffer_size": conn.output_buffer_size,
            "output_buffer_timeout": conn.output_buffer_timeout,
        }
    )
    conn.send_response(response, flush=True)
    if tls_v1 and not conn.tls:
        try:
            yield conn.upgrade_tls()
        except Exception as exc:
            raise ClientError("E_IDENTIFY_FAILED", f"IDENTIFY failed {exc}") from None
        conn.send_response(OK, flush=True)
    if snappy:
        conn.start_compression("snappy", 0)
        conn.send_response(OK, flush=True)
    elif deflate:
        conn.start_compression("deflate", level)
        conn.send_response(OK, flush=True)
    return None


def cmd_auth(conn: ClientConnection, params: list[bytes]) -> Result:
    if conn.state != STATE_INIT:
        raise ClientError("E_INVALID", "cannot AUTH in current state")
    if len(params) != 1:
        raise ClientError("E_INVALID", "AUTH invalid number of parameters")
    return _auth(conn)


def _auth(conn: ClientConnection) -> Body:
    opts = conn.broker.options
    secret = yield from _read_sized_body(conn, "AUTH")
    if conn.auth_state is not None and conn.auth_state.authorizations:
        raise ClientError("E_INVALID", "AUTH already set")
    if not opts.auth_enabled:
        raise ClientError("E_AUTH_DISABLED", "AUTH disabled")
    conn.auth_secret = secret
    try:
        state = yield conn.query_auth()
    except AuthFailed as exc:
        # nsqd does not leak the reason to the client, only to its log (auth_bad_secret).
        log.warning("[%s] AUTH failed %s", conn, exc)
        raise ClientError("E_AUTH_FAILED", "AUTH failed") from None
    conn.auth_state = state
    if not state.authorizations:
        raise ClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
    return go_json(
        {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
    )


def cmd_pub(conn: ClientConnection, params: list[bytes]) -> Result:
    if len(params) < 2:
        raise ClientError("E_INVALID", "PUB insufficient number of parameters")
    topic = _name(params[1])
    if topic is None:
        raise ClientError(
            "E_BAD_TOPIC", b"PUB topic name " + go_quote(params[1]) + b" is not valid"
        )
    return _pub(conn, "PUB", topic, 0)


def cmd_dpub(conn: ClientConnection, params: list[bytes]) -> Result:
    if len(params) < 3:
        raise ClientError("E_INVALID", "DPUB insufficient number of parameters")
    topic = _name(params[1])
    if topic is None:
        raise ClientError(
            "E_BAD_TOPIC", b"DPUB topic name " + go_quote(params[1]) + b" is not valid"
        )
    timeout = parse_base10(params[2])
    if timeout is None:
        raise ClientError("E_INVALID", b"DPUB could not parse timeout " + params[2])
    limit = conn.broker.options.max_req_timeout
    if timeout > limit:
        raise ClientError("E_INVALID", f"DPUB timeout {timeout} out of range 0-{limit}")
    return _pub(conn, "DPUB", topic, timeout)


def _pub(conn: ClientConnection, cmd: str, topic: str, defer_ms: int) -> Body:
    limit = conn.broker.options.max_msg_size
    size = yield from read_len(
        conn.reader, "E_BAD_MESSAGE", f"{cmd} failed to read message body size"
    )
    if size <= 0:
        raise ClientError("E_BAD_MESSAGE", f"{cmd} invalid message body size {size}")
    if size > limit:
        raise ClientError("E_BAD_MESSAGE", f"{cmd} message too big {size} > {limit}")
    body = yield from read_exact(
        conn.reader, size, "E_BAD_MESSAGE", f"{cmd} failed to read message body"
    )
    yield from check_auth(conn, cmd, topic, "")
    _publish(conn, cmd, topic, [body], defer_ms)
    return OK


def cmd_mpub(conn: ClientConnection, params: list[bytes]) -> Result:
    if len(params) < 2:
        raise ClientError("E_INVALID", "MPUB insufficient number of parameters")
    topic = _name(params[1])
    if topic is None:
        # The code really is repeated in nsqd 1.3.0's text (FACTS.md section 3).
        raise ClientError(
            "E_BAD_TOPIC", b"E_BAD_TOPIC MPUB topic name " + go_quote(params[1]) + b" is not valid"
        )
    return _mpub(conn, topic)


def _mpub(conn: ClientConnection, topic: str) -> Body:
    opts = conn.broker.options
    yield from check_auth(conn, "MPUB", topic, "")
    conn.broker.get_topic(topic)  # nsqd creates the topic before reading the body
    size = yield from read_len(conn.reader, "E_BAD_BODY", "MPUB failed to read body size")
    if size <= 0:
        raise ClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
    if size > opts.max_body_size:
        raise ClientError("E_BAD_BODY", f"MPUB body too big {size} > {opts.max_body_size}")
    bodies = yield from read_mpub(conn.reader, opts.max_msg_size, opts.max_body_size)
    _publish(conn, "MPUB", topic, bodies, 0)
    return OK


def cmd_sub(conn: ClientConnection, params: list[bytes]) -> Result:
    if conn.state != STATE_INIT:
        raise ClientError("E_INVALID", "cannot SUB in current state")
    if conn.heartbeat_interval <= 0:
        raise ClientError("E_INVALID", "cannot SUB with heartbeats disabled")
    if len(params) < 3:
        raise ClientError("E_INVALID", "SUB insufficient number of parameters")
    topic = _name(params[1])
    if topic is None:
        raise ClientError(
            "E_BAD_TOPIC", b"SUB topic name " + go_quote(params[1]) + b" is not valid"
        )
    channel = _name(params[2])
    if channel is None:
        raise ClientError(
            "E_BAD_CHANNEL", b"SUB channel name " + go_quote(params[2]) + b" is not valid"
        )
    return _sub(conn, topic, channel)


def _sub(conn: ClientConnection, topic_name: str, channel_name: str) -> Body:
    yield from check_auth(conn, "SUB", topic_name, channel_name)
    channel = conn.broker.get_topic(topic_name).get_channel(channel_name)
    try:
        channel.add_client(conn)
    except ValueError as exc:
        raise ClientError("E_SUB_FAILED", f"SUB failed {exc}") from None
    conn.subscribed(channel)
    return OK


def cmd_rdy(conn: ClientConnection, params: list[bytes]) -> Result:
    if conn.state == STATE_CLOSING:
        return None  # nsqd ignores RDY after CLS
    if conn.state != STATE_SUBSCRIBED:
        raise ClientError("E_INVALID", "cannot RDY in current state")
    count = 1
    if len(params) > 1:
        parsed = parse_base10(params[1])
        if parsed is None:
            raise ClientError("E_INVALID", b"RDY could not parse count " + params[1])
        count = parsed - _U64 if parsed >= _I63 else parsed  # Go's int64(uint64)
    limit = conn.broker.options.max_rdy_count
    if count < 0 or count > limit:
        raise ClientError("E_INVALID", f"RDY count {count} out of range 0-{limit}")
    conn.set_rdy(count)
    return None


def _message_id(conn: ClientConnection, cmd: str, params: list[bytes], n: int) -> bytes:
    if conn.state != STATE_SUBSCRIBED and conn.state != STATE_CLOSING:
        raise ClientError("E_INVALID", f"cannot {cmd} in current state")
    if len(params) < n:
        # "params", not "parameters", as nsqd 1.3.0 says it (FACTS.md section 3).
        raise ClientError("E_INVALID", f"{cmd} insufficient number of params")
    msg_id = params[1]
    if len(msg_id) != MESSAGE_ID_LENGTH:
        raise ClientError("E_INVALID", "invalid message ID")
    return msg_id


def _answer_failed(cmd: str, msg_id: bytes, exc: LookupError) -> ClientError:
    """The non-fatal E_FIN/REQ/TOUCH_FAILED, e.g. ``FIN <id> failed ID not in flight``."""
    return ClientError(
        f"E_{cmd}_FAILED", cmd.encode() + b" " + msg_id + b" failed " + str(exc.args[0]).encode()
    )


def cmd_fin(conn: ClientConnection, params: list[bytes]) -> Result:
    msg_id = _message_id(conn, "FIN", params, 2)
    try:
        conn.channel.finish(conn, msg_id)  # type: ignore[union-attr]
    except LookupError as exc:
        raise _answer_failed("FIN", msg_id, exc) from None
    conn.finished()
    return None


def cmd_req(conn: ClientConnection, params: list[bytes]) -> Result:
    msg_id = _message_id(conn, "REQ", params, 3)
    timeout = parse_base10(params[2])
    if timeout is None:
        raise ClientError("E_INVALID", b"REQ could not parse timeout " + params[2])
    # Unlike DPUB, REQ silently clamps to 0..max-req-timeout (req_timeout_clamped). nsqd
    # turns the ms into an int64 Duration first, so huge values wrap negative -> 0.
    duration_ns = (timeout * 1_000_000) % _U64
    if duration_ns >= _I63:
        timeout = 0
    timeout = min(timeout, conn.broker.options.max_req_timeout)
    try:
        conn.channel.requeue(conn, msg_id, timeout)  # type: ignore[union-attr]
    except LookupError as exc:
        raise _answer_failed("REQ", msg_id, exc) from None
    conn.requeued()
    return None


def cmd_touch(conn: ClientConnection, params: list[bytes]) -> Result:
    msg_id = _message_id(conn, "TOUCH", params, 2)
    try:
        conn.channel.touch(conn, msg_id, conn.msg_timeout)  # type: ignore[union-attr]
    except LookupError as exc:
        raise _answer_failed("TOUCH", msg_id, exc) from None
    return None


def cmd_cls(conn: ClientConnection, params: list[bytes]) -> Result:
    if conn.state != STATE_SUBSCRIBED:
        raise ClientError("E_INVALID", "cannot CLS in current state")
    conn.start_close()
    return CLOSE_WAIT


HANDLERS: dict[bytes, Callable[[ClientConnection, list[bytes]], Result]] = {
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
