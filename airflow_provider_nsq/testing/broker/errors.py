"""Error frames the broker sends, and Go's ``%q`` quoting that nsqd's texts use."""

from __future__ import annotations

from airflow_provider_nsq.protocol.constants import NON_FATAL_ERROR_CODES


class ClientError(Exception):
    """An error frame for the client: ``<code> <text>``.

    Fatal unless the code is E_FIN_FAILED, E_REQ_FAILED or E_TOUCH_FAILED
    (docs/nsqd-facts.md section 3): the broker writes the frame, then
    closes the connection.
    """

    def __init__(self, code: str, text: bytes | str = b"") -> None:
        self.code = code
        self.text = text.encode() if isinstance(text, str) else text
        self.fatal = code not in NON_FATAL_ERROR_CODES
        super().__init__(self.payload.decode("utf-8", "replace"))

    @property
    def payload(self) -> bytes:
        code = self.code.encode()
        return code + b" " + self.text if self.text else code


_ESCAPES = {
    0x07: b"\\a",
    0x08: b"\\b",
    0x0C: b"\\f",
    0x0A: b"\\n",
    0x0D: b"\\r",
    0x09: b"\\t",
    0x0B: b"\\v",
    0x22: b'\\"',
    0x5C: b"\\\\",
}


def go_quote(value: bytes) -> bytes:
    """Go's ``strconv.Quote`` of a byte string: what nsqd's ``%q`` prints."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    out = bytearray(b'"')
    if text is None:
        for b in value:
            if b in _ESCAPES:
                out += _ESCAPES[b]
            elif 0x20 <= b < 0x7F:
                out.append(b)
            else:
                out += b"\\x%02x" % b
    else:
        for ch in text:
            cp = ord(ch)
            if cp in _ESCAPES:
                out += _ESCAPES[cp]
            elif cp < 0x20 or cp == 0x7F:
                out += b"\\x%02x" % cp
            elif cp < 0x80 or ch.isprintable():
                out += ch.encode()
            elif cp < 0x10000:
                out += b"\\u%04x" % cp
            else:
                out += b"\\U%08x" % cp
    out += b'"'
    return bytes(out)
