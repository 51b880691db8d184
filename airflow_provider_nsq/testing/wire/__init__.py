"""The embedded daemons' side of the wire, without I/O.

What only a server reads or writes lives here, beside the servers that use it, not in
:mod:`airflow_provider_nsq.protocol` (which keeps what a client needs and what both
roles share: command encoders, the frame codec, names, errors, compression):

- :mod:`.go_json`: JSON as Go writes and reads it, for the daemons' answers;
- :mod:`.command_reader`: nsqd's reading of client commands (``"  V2"``), line first,
  then the body;
- :mod:`.registration`: nsqlookupd's registration protocol (``"  V1"``), nsqd's role
  (the embedded broker) and nsqlookupd's (the embedded lookupd).

Each imports only :mod:`airflow_provider_nsq.protocol` and the modules listed before it.
"""
