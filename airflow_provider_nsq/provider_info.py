"""Provider metadata: what Airflow's ProvidersManager and the connection form read.

Airflow >= 3.2 builds the connection form from ``conn-fields`` and ``ui-field-behaviour``
here, without importing the hook. :data:`CONN_FIELDS` is also the hook's list of known
extras (and their types), so the form and the parser cannot drift apart.

This module must stay import-light: no Airflow, no client.
"""

from __future__ import annotations

from typing import Any

PACKAGE_NAME = "airflow-provider-nsq"
INTEGRATION = "NSQ"
CONN_TYPE = "nsq"
HOOK_CLASS_NAME = "airflow_provider_nsq.hooks.nsq.NSQHook"


def _field(label: str, json_type: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "label": label,
        "description": description,
        "schema": {"type": [json_type, "null"], **schema},
    }


#: Connection extras: name -> conn-fields entry. ``schema.type[0]`` is the value type
#: the hook accepts (``"true"``/``"false"`` and numeric strings from the URI form too).
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "tls": _field(
        "TLS",
        "boolean",
        "Upgrade the connection to TLS after IDENTIFY (nsqd needs --tls-cert/--tls-key).",
        default=False,
    ),
    "tls_verify": _field(
        "Verify TLS certificate",
        "boolean",
        "Check nsqd's certificate and host name (default true). Turn off only for testing.",
        default=True,
    ),
    "tls_ca_file": _field(
        "TLS CA file",
        "string",
        "Path (on the worker) to the CA bundle that signed nsqd's certificate; "
        "empty: the system CAs.",
    ),
    "tls_cert_file": _field(
        "TLS client certificate file",
        "string",
        "Path to a client certificate, for nsqd --tls-client-auth-policy; needs the key file too.",
    ),
    "tls_key_file": _field(
        "TLS client key file",
        "string",
        "Path to the client certificate's private key.",
    ),
    "compression": _field(
        "Compression",
        "string",
        "Compress the connection: none, snappy or deflate (negotiated with nsqd).",
        enum=["none", "snappy", "deflate"],
        default="none",
    ),
    "deflate_level": _field(
        "Deflate level",
        "integer",
        "1-9; nsqd caps it at its --max-deflate-level (6 by default).",
        minimum=1,
        maximum=9,
    ),
    "heartbeat_interval_ms": _field(
        "Heartbeat interval (ms)",
        "integer",
        "How often nsqd sends heartbeats; empty: nsqd's default (30000). "
        "nsqd drops a client that is silent for two intervals.",
        minimum=1000,
    ),
    "msg_timeout_ms": _field(
        "Message timeout (ms)",
        "integer",
        "How long a delivered message may stay unanswered before nsqd redelivers it; "
        "empty: nsqd's --msg-timeout (60000).",
        minimum=1000,
    ),
    "client_id": _field(
        "Client ID",
        "string",
        "Shown in nsqd's /stats; empty: the worker's short host name.",
    ),
    "lookupd_http_addresses": _field(
        "nsqlookupd HTTP addresses",
        "string",
        "Comma-separated host:port list of nsqlookupd HTTP endpoints. When set, consumers "
        "(consume, the sensor, the triggers) read the topic from every nsqd they list.",
    ),
    "nsqd_tcp_addresses": _field(
        "More nsqd TCP addresses",
        "string",
        "Comma-separated host:port list of more nsqds, after host:port above. Publishing "
        "fails over to the next one that accepts a connection; without nsqlookupd, "
        "consumers read from all of them.",
    ),
    "connect_timeout": _field(
        "Connect timeout (s)",
        "number",
        "Seconds to open the TCP connection and finish the handshake (default 5).",
        minimum=0,
    ),
    "read_timeout": _field(
        "Read timeout (s)",
        "number",
        "Seconds to wait for nsqd's answer to a command (a publish's OK) before failing "
        "(default 30, at most 3600). Bounds what a frozen nsqd costs a task.",
        minimum=0,
        maximum=3600,
    ),
    "http_port": _field(
        "nsqd HTTP port",
        "integer",
        "nsqd's HTTP API port (4151 by default). Recommended: the sensor reads a channel's "
        "depth from /stats there and waits without taking (and redelivering) messages.",
        minimum=1,
        maximum=65535,
    ),
    "https_port": _field(
        "nsqd HTTPS port",
        "integer",
        "nsqd's HTTPS API port (--https-address); used instead of the HTTP port when TLS is "
        "on, with the same CA and client certificate.",
        minimum=1,
        maximum=65535,
    ),
    "max_msg_size": _field(
        "Max message size (bytes)",
        "integer",
        "nsqd's --max-msg-size (1048576); bigger bodies are refused before sending.",
        minimum=1,
    ),
    "max_body_size": _field(
        "Max body size (bytes)",
        "integer",
        "nsqd's --max-body-size (5242880); MPUB batches are split to fit.",
        minimum=1,
    ),
    "max_req_timeout_ms": _field(
        "Max defer/requeue delay (ms)",
        "integer",
        "nsqd's --max-req-timeout (3600000); longer DPUB delays are refused before sending.",
        minimum=1,
    ),
    "nsqadmin_url": _field(
        "nsqadmin URL",
        "string",
        "Base URL of nsqadmin (NSQ's web console), e.g. http://nsqadmin:4171. Tasks then "
        "link to the page of the topic (and channel) they used.",
        pattern=r"^https?://[^/?#\s]+",
    ),
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["login", "schema"],
    "relabeling": {"host": "nsqd host", "port": "nsqd TCP port", "password": "AUTH secret"},
    "placeholders": {
        "host": "nsqd.example.com",
        "port": "4150",  # shown only; the default is client.address.DEFAULT_NSQD_TCP_PORT
        "password": "secret for nsqd --auth-http-address (leave empty without AUTH)",
        "tls_ca_file": "/etc/ssl/nsq/ca.pem",
        "compression": "none",
        "lookupd_http_addresses": "lookupd-1:4161,lookupd-2:4161",
        "nsqd_tcp_addresses": "nsqd-2:4150,nsqd-3:4150",
        "nsqadmin_url": "http://nsqadmin:4171",
    },
}


def provider_info() -> dict[str, Any]:
    """The dict returned by ``airflow_provider_nsq.get_provider_info()``."""
    from . import __version__

    return {
        "package-name": PACKAGE_NAME,
        "name": "NSQ",
        "description": "`NSQ <https://nsq.io/>`__: publish, defer and batch-publish messages, "
        "and wait for messages on a channel.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://nsq.io/",
                "tags": ["service"],
            }
        ],
        "hooks": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_provider_nsq.hooks.nsq"]}
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_nsq.operators.nsq"],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_nsq.sensors.nsq"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_nsq.triggers.nsq",
                    "airflow_provider_nsq.triggers.nsq_event",
                ],
            }
        ],
        # Needs apache-airflow-providers-common-messaging (the [messaging] extra).
        "queues": ["airflow_provider_nsq.queues.nsq.NSQMessageQueueProvider"],
        # Links to nsqadmin on the task instance (the connection's nsqadmin_url).
        "extra-links": [
            "airflow_provider_nsq.links.NSQAdminTopicLink",
            "airflow_provider_nsq.links.NSQAdminChannelLink",
        ],
        # nsq://host:port/topic: Airflow checks and normalises these assets' URIs, and
        # the OpenLineage provider names their datasets, through these functions.
        "asset-uris": [
            {
                "schemes": ["nsq"],
                "handler": "airflow_provider_nsq.assets.sanitize_uri",
                "factory": "airflow_provider_nsq.assets.create_asset",
                "to_openlineage_converter": "airflow_provider_nsq.assets.convert_asset_to_openlineage",
            }
        ],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": HOOK_CLASS_NAME,
                "hook-name": "NSQ",
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
                "conn-fields": CONN_FIELDS,
            }
        ],
    }
