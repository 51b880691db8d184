"""Bytes in and out, below the protocol: a blocking socket with bounded waits
(:mod:`.blocking_socket`), the TLS context (:mod:`.tls`), one map from socket, ssl and OS
errors to the NSQError family (:mod:`.io_errors`), reused receive buffers
(:mod:`.receive_buffers`) and one HTTP/1.1 request, blocking or asyncio
(:mod:`.http_request`).
"""
