"""NSQ topics as Airflow assets: the ``nsq`` URI scheme.

An NSQ asset is a topic: ``nsq://host:port/topic``, where ``host:port`` is the address
the connection names for the NSQ cluster: its first nsqlookupd
(``lookupd_http_addresses``) when it has any, else its nsqd (``host:port``). It is the
queue URI of ``MessageQueueTrigger(queue="nsq://host:port/topic?channel=...")`` without
the channel, which belongs to a consumer, not to the data.

Registered in the provider info (``asset-uris``), Airflow uses:

- :func:`sanitize_uri` to check and normalise every ``Asset("nsq://...")`` a DAG
  declares (a bad one fails the DAG's import with the reason);
- :func:`create_asset`, the scheme's factory;
- :func:`convert_asset_to_openlineage`, the OpenLineage dataset of an asset: namespace
  ``nsq://host:port``, name ``topic``, as Apache's messaging providers name theirs
  (``kafka://bootstrap:port`` + topic, ``pubsub://project`` + topic).

DAG authors use :func:`nsq_asset` with the cluster's address written in the DAG file
(``nsq_asset("orders", address="nsqd.example.com:4150")``): a DAG file's top-level code
reads no connection, so the DAG parses where the connection is not defined (the
triggerer and the workers read it when they run). Write the address the connection
names (its first nsqlookupd, else its nsqd), so that the asset is the dataset the
operators and the sensor report to OpenLineage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

from airflow.providers.common.compat.sdk import Asset

from .protocol.errors import NSQValueError
from .protocol.names import validate_topic_name

if TYPE_CHECKING:
    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

__all__ = ["convert_asset_to_openlineage", "create_asset", "nsq_asset", "sanitize_uri"]

SCHEME = "nsq"
_FORM = "nsq://host:port/topic"


def asset_uri(authority: str, topic: str) -> str:
    """``nsq://authority/topic``, checked and normalised."""
    return sanitize_uri(urlsplit(f"{SCHEME}://{authority}/{topic}")).geturl()


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normaliser for ``nsq`` URIs: a host, a port, one valid topic name and
    nothing else; the host lower-cased. Raises ValueError saying what is wrong."""
    if uri.scheme != SCHEME:
        raise ValueError(f"{uri.geturl()!r} is not an {SCHEME}:// URI ({_FORM})")
    try:
        port = uri.port
    except ValueError:
        port = None  # not a number, or out of range
    if not uri.hostname or port is None:
        raise ValueError(
            f"NSQ asset {uri.geturl()!r} must name the cluster as host:port ({_FORM}): "
            "the connection's first nsqlookupd HTTP address, or its nsqd"
        )
    if uri.username or uri.password:
        raise ValueError(f"NSQ asset {uri.geturl()!r} must not carry user info ({_FORM})")
    if uri.query or uri.fragment:
        raise ValueError(
            f"NSQ asset {uri.geturl()!r} is a topic ({_FORM}): a channel belongs to the "
            "watcher's trigger (channel=...), not to the asset"
        )
    topic = uri.path.removeprefix("/")
    try:
        validate_topic_name(topic)
    except NSQValueError as exc:
        raise ValueError(f"NSQ asset {uri.geturl()!r} ({_FORM}): {exc}") from None
    host = uri.hostname.lower()
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return uri._replace(netloc=netloc, path=f"/{topic}")


def create_asset(*, authority: str, topic: str, extra: dict[str, Any] | None = None) -> Asset:
    """The asset of ``topic`` on the NSQ cluster at ``authority`` (``host:port``)."""
    return Asset(uri=asset_uri(authority, topic), extra=extra)


def openlineage_dataset(uri: str) -> OpenLineageDataset:
    """The OpenLineage dataset of the ``nsq`` asset ``uri``: namespace
    ``nsq://host:port``, name the topic."""
    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

    parsed = sanitize_uri(urlsplit(uri))
    return OpenLineageDataset(
        namespace=f"{SCHEME}://{parsed.netloc}", name=parsed.path.removeprefix("/")
    )


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> OpenLineageDataset:
    """Airflow's converter of ``nsq`` assets to OpenLineage datasets."""
    return openlineage_dataset(asset.uri)


def nsq_asset(topic: str, *, address: str, **asset_kwargs: Any) -> Asset:
    """The asset of ``topic`` on the NSQ cluster at ``address``, for ``schedule=[...]``,
    ``outlets=[...]`` or a watcher (``nsq_asset("orders", address=..., watchers=[...])``).

    :param topic: the topic name.
    :param address: the cluster's ``host:port``, as the connection names it: its first
        nsqlookupd's HTTP address when it has any, else its nsqd's TCP address. Nothing
        is read: the DAG file parses with no connection and no network.
    :param asset_kwargs: passed to ``Asset`` (``name``, ``group``, ``extra``,
        ``watchers``).
    """
    return Asset(uri=asset_uri(address, topic), **asset_kwargs)
