"""What a connection says: :class:`~.client_config.ClientConfig` (one nsqd connection),
:class:`~.connection_settings.ConnectionSettings` (every nsqd, nsqlookupd and HTTP API of
a connection), each setting described once (:mod:`.fields`), values read as users write
them (:mod:`.values`) and ``host:port`` addresses (:mod:`.address`).

Nothing here opens a socket: the provider info reads these at Airflow's start.
"""
