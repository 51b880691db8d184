"""OpenLineage facets of the provider's tasks (with the ``openlineage`` extra:
``apache-airflow-providers-openlineage``).

A publish operator's topic is an output dataset, a sensor's an input dataset; both
named as :func:`~airflow_provider_nsq.assets.convert_asset_to_openlineage` names the
topic's asset: namespace ``nsq://host:port`` (the connection's first nsqlookupd, or its
nsqd), name the topic. So the asset an event-driven DAG watches, declared as a task's
inlet, becomes the same input dataset.

The OpenLineage provider calls ``get_openlineage_facets_on_complete`` on the operators
only when it is installed (as the task ends: the connection is read then); these
functions import it then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .assets import asset_uri, openlineage_dataset
from .client.http.lookupd_api import parse_lookupd_address

#: Internal to the provider: no public names (the API reference lists this module under
#: Internals; other modules of the provider import from it).
__all__: list[str] = []

if TYPE_CHECKING:
    from .hooks.base import NSQBaseHook


def connection_authority(hook: NSQBaseHook) -> str:
    """The address an ``nsq`` connection names its cluster by: its first nsqlookupd, or
    its nsqd (reads the connection)."""
    lookupds = hook.lookupd_http_addresses
    if lookupds:  # host:port, whatever form the extra used (http://host:port/...)
        return parse_lookupd_address(lookupds[0]).address
    return hook.get_client_config().address


def _dataset(hook: NSQBaseHook, topic: str) -> Any:
    return openlineage_dataset(asset_uri(connection_authority(hook), topic))


def publish_lineage(hook: NSQBaseHook, topic: str) -> Any:
    """``OperatorLineage`` with ``topic`` as the output dataset."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(outputs=[_dataset(hook, topic)])


def sensor_lineage(hook: NSQBaseHook, topic: str) -> Any:
    """``OperatorLineage`` with ``topic`` as the input dataset."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=[_dataset(hook, topic)])
