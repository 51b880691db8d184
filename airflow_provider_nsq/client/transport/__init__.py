"""Below the drivers and the HTTP clients: the TLS context (:mod:`.tls`), one map from
socket, ssl and OS errors to the NSQError family (:mod:`.io_errors`) and one HTTP/1.1
request, blocking or asyncio (:mod:`.http_request`). Each driver keeps its own socket
or transport code (:mod:`..drivers`).
"""
