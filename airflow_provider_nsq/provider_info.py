"""Provider metadata: what Airflow's ProvidersManager and the connection form read.

Airflow >= 3.2 builds the connection form from ``conn-fields`` and ``ui-field-behaviour``
here, without importing the hook. Both come from ``hooks/connection_form.py``, generated
from the described settings through the same source of extras the hook's parser reads,
so the form and the parser cannot drift apart.

No Airflow here, and of the client only the settings' descriptions (their modules
import no driver).
"""

from __future__ import annotations

from typing import Any

from .hooks.connection_form import CONN_FIELDS, CONN_TYPE, UI_FIELD_BEHAVIOUR
from .plugins.event_producer_config import provider_config

PACKAGE_NAME = "airflow-provider-nsq"
INTEGRATION = "NSQ"
HOOK_CLASS_NAME = "airflow_provider_nsq.hooks.nsq.NSQHook"

__all__ = ["CONN_FIELDS", "CONN_TYPE", "UI_FIELD_BEHAVIOUR", "provider_info"]


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
