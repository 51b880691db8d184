"""What the test servers are built from, apart from what users import.

The embedded nsqd (:mod:`..broker`) and nsqlookupd (:mod:`..lookupd`), the AUTH server
(:mod:`..auth_server`) and the fault proxy (:mod:`..faults`) share this plumbing:

- :mod:`.http_server`: an HTTP/1.1 server on asyncio and h11 that answers as Go's
  ``net/http`` does (the only HTTP server of the package);
- :mod:`.http_api`: how nsqd and nsqlookupd shape their HTTP answers;
- :mod:`.loop_thread`: a service on its own asyncio loop in a background thread;
- :mod:`.embedded_daemon`: what ``EmbeddedNSQD`` and ``EmbeddedNSQLookupd`` share;
- :mod:`.listeners`: a daemon's listening sockets, closed together;
- :mod:`.addresses`: ``tcp_address`` and ``http_address`` from a host and ports;
- :mod:`.lifecycle`: ``with server:``, and a daemon's run until a signal;
- :mod:`.daemon_cli`: what both daemons' command lines share (listener and logging
  flags, ``--version``, the run until a signal);
- :mod:`.daemon_flags`: the daemons' command-line values, read as Go reads them.
"""
