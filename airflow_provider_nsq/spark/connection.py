"""Build the data source's options from an Airflow connection (driver / DAG side only)."""

from __future__ import annotations

from .options import options_from_client_config


def nsq_options_from_connection(
    nsq_conn_id: str = "nsq_default", **overrides: object
) -> dict[str, str]:
    """Options for ``df.write.format("nsq")`` from the Airflow connection ``nsq_conn_id``.

    Reads the connection through ``NSQHook.get_client_config()``, so TLS files, the AUTH
    secret and server limits are set once, in the connection. ``overrides`` (e.g.
    ``topic="results"``) are added last. Airflow is imported here, lazily: call this where
    Airflow is installed (the DAG or the driver), never inside executor code.

    The result contains the AUTH secret when the connection has one: pass it to Spark as
    options (Spark redacts option keys containing "secret"), not on a command line.
    """
    from ..hooks.nsq import NSQHook  # Airflow: only on the driver side

    hook = NSQHook(nsq_conn_id=nsq_conn_id)
    options = options_from_client_config(hook.get_client_config())
    options.update({key: str(value) for key, value in overrides.items()})
    return options
