"""Provider metadata: what Airflow's ProvidersManager reads, the connection form of the
connection type ``nsq`` included.

Airflow >= 3.2 builds the connection form from ``conn-fields`` and ``ui-field-behaviour``
here, without importing the hook. The settings themselves (kinds, bounds, docs) are
described once in the client
(:class:`~airflow_provider_nsq.client.settings.connection_settings.ConnectionSettings`);
which of them a connection takes as extras is said here, in :data:`CONNECTION_EXTRAS`.
The hook's parser reads extras through it and the form (:data:`CONN_FIELDS`,
:data:`UI_FIELD_BEHAVIOUR`) is generated from it, so the form and the parser cannot
drift apart.

No Airflow here, and of the client only the settings' descriptions (their modules
import no driver): Airflow imports this module when it starts.
"""

from __future__ import annotations

from typing import Any

from .client.settings.address import DEFAULT_NSQD_TCP_PORT
from .client.settings.connection_settings import ConnectionSettings
from .client.settings.fields import Setting, SettingSource
from .event_producer_config import provider_config

#: Internal to the provider: no public names (the API reference lists this module under
#: Internals; other modules of the provider import from it).
__all__: list[str] = []

PACKAGE_NAME = "airflow-provider-nsq"
INTEGRATION = "NSQ"
HOOK_CLASS_NAME = "airflow_provider_nsq.hooks.nsq.NSQHook"
CONN_TYPE = "nsq"

#: An Airflow connection's extras: every connection setting users may write, but the
#: AUTH secret, which is the connection's password field (an extra of that name is
#: unknown, so a secret pasted there is never echoed back).
CONNECTION_EXTRAS = SettingSource(leaves_out=frozenset({"auth_secret"}))


def extra_settings() -> dict[str, Setting]:
    """The settings a connection takes as extras, by name, in their described order."""
    return CONNECTION_EXTRAS.takes(ConnectionSettings.described())


def _conn_field(described: Setting) -> dict[str, Any]:
    """A setting as a ``conn-fields`` entry: label, description and JSON schema.

    The schema's bounds take the setting's special values in (``-1``: off, ``0``: nsqd's
    default, beside ``>= 1000``): a form's schema has no "or", so it bounds the whole
    range, and its description says which values in it are allowed, in the words the
    parser's error uses (:meth:`~.client.settings.fields.Setting.expected`)."""
    schema: dict[str, Any] = {"type": [described.json_type, "null"]}
    doc = described.doc
    special = list(described.special)
    if described.kind == "seconds":
        schema["minimum"] = 0  # and > 0: the parser says so
    elif described.minimum is not None:
        schema["minimum"] = min([described.minimum, *special])
    if described.maximum is not None:
        schema["maximum"] = max([described.maximum, *special])
    if special:
        doc = f"{doc} Allowed: {described.expected()}."
    if described.choices:
        schema["enum"] = list(described.choices)
    if described.pattern is not None:
        schema["pattern"] = described.pattern
    if described.kind == "boolean" or described.choices:
        schema["default"] = described.default  # a blank is no answer to a yes/no question
    return {"label": described.label, "description": doc, "schema": schema}


#: Connection extras: name -> conn-fields entry, one per setting a connection takes as an
#: extra (:func:`extra_settings`), in that order. ``schema.type[0]`` is the value's JSON
#: type; the URI form's text is read as the same.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    name: _conn_field(described) for name, described in extra_settings().items()
}

#: Hidden, relabelled and placeholder fields of the connection form.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["login", "schema"],
    "relabeling": {"host": "nsqd host", "port": "nsqd TCP port", "password": "AUTH secret"},
    "placeholders": {
        "host": "nsqd.example.com",
        "port": str(DEFAULT_NSQD_TCP_PORT),
        "password": "secret for nsqd --auth-http-address (leave empty without AUTH)",
        **{
            name: described.placeholder
            for name, described in extra_settings().items()
            if described.placeholder is not None
        },
    },
}


def _modules(*names: str) -> list[dict[str, Any]]:
    """A provider info entry listing this package's modules of one kind."""
    modules = [f"airflow_provider_nsq.{name}" for name in names]
    return [{"integration-name": INTEGRATION, "python-modules": modules}]


def provider_info() -> dict[str, Any]:
    """The dict returned by ``airflow_provider_nsq.get_provider_info()``."""
    from .version import __version__

    return {
        "package-name": PACKAGE_NAME,
        "name": "NSQ",
        # Plain text: Airflow's providers list and API strip reST's `_<> characters.
        "description": "NSQ (https://nsq.io): publish from tasks, wait on a channel, consume "
        "and apply, start DAGs from messages, and move data between NSQ and Spark.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://nsq.io/",
                "tags": ["service"],
            }
        ],
        "hooks": _modules("hooks.nsq"),
        "operators": _modules("operators.nsq", "operators.nsq_consume", "operators.nsq_admin"),
        "sensors": _modules("sensors.nsq"),
        "triggers": _modules("triggers.nsq", "triggers.nsq_event"),
        # A channel drained into files on Airflow's object storage (s3://, gs://, file://).
        "transfers": [
            {
                "source-integration-name": INTEGRATION,
                "target-integration-name": "Common IO",
                "python-module": "airflow_provider_nsq.transfers.nsq_to_object_storage",
            }
        ],
        "notifications": ["airflow_provider_nsq.notifications.nsq.NSQNotifier"],
        # Airflow's DAG run and task instance events out to NSQ ([nsq_event_producer]).
        "plugins": [
            {
                "name": "nsq_event_producer",
                "plugin-class": "airflow_provider_nsq.plugins.nsq_event_producer.NSQEventProducerPlugin",
            }
        ],
        "config": provider_config(),
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
