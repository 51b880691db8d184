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
operators and the sensor report to OpenLineage. Reading the address from the connection
at parse time (``nsq_asset("orders")``, ``nsq_conn_id=...``) still works and warns.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

from airflow.providers.common.compat.sdk import Asset

from .client.http.lookupd_api import parse_lookupd_address
from .hooks.nsq import NSQHook
from .protocol.errors import NSQValueError
from .protocol.names import validate_topic_name

if TYPE_CHECKING:
    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

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


def connection_authority(hook: NSQHook) -> str:
    """The address an ``nsq`` connection names its cluster by: its first nsqlookupd, or
    its nsqd (reads the connection)."""
    lookupds = hook.lookupd_http_addresses
    if lookupds:  # host:port, whatever form the extra used (http://host:port/...)
        return parse_lookupd_address(lookupds[0]).address
    return hook.get_client_config().address


def nsq_asset(
    topic: str,
    *,
    address: str | None = None,
    nsq_conn_id: str | None = None,
    **asset_kwargs: Any,
) -> Asset:
    """The asset of ``topic`` on the NSQ cluster at ``address``, for ``schedule=[...]``,
    ``outlets=[...]`` or a watcher (``nsq_asset("orders", address=..., watchers=[...])``).

    :param topic: the topic name.
    :param address: the cluster's ``host:port``, as the connection names it: its first
        nsqlookupd's HTTP address when it has any, else its nsqd's TCP address. Nothing
        is read: the DAG file parses with no connection and no network.
    :param nsq_conn_id: deprecated, instead of ``address``: read the address from this
        connection when the DAG file is parsed (``nsq_default`` when neither is given);
        the DAG then fails to import where the connection is not defined. Warns with the
        ``address=`` to write.
    :param asset_kwargs: passed to ``Asset`` (``name``, ``group``, ``extra``,
        ``watchers``).
    """
    if address is None:
        address = address_read_at_parse(
            nsq_conn_id or NSQHook.default_conn_name,
            f"nsq_asset({topic!r})",
            f"nsq_asset({topic!r}, address={{address!r}})",
        )
    elif nsq_conn_id is not None:
        raise NSQValueError(
            f"nsq_asset({topic!r}) takes address or nsq_conn_id, not both: "
            f"got address={address!r}, nsq_conn_id={nsq_conn_id!r}"
        )
    return Asset(uri=asset_uri(address, topic), **asset_kwargs)


def address_read_at_parse(nsq_conn_id: str, what: str, instead: str) -> str:
    """The cluster address of connection ``nsq_conn_id``, for ``what`` (a DAG-parse-time
    call that reads it): the deprecated way, with a ``FutureWarning`` that quotes the
    code to write instead (``instead``, a template with ``{address!r}``).

    FutureWarning, not DeprecationWarning: Python and the DAG processor hide the latter
    when a DAG file triggers it, and this one is for the DAG's author.
    """
    try:
        address = connection_authority(NSQHook(nsq_conn_id=nsq_conn_id))
    except Exception as exc:
        exc.add_note(
            f"{what} reads connection {nsq_conn_id!r} when the DAG file is parsed, for the "
            f"NSQ cluster's address; write the address instead: "
            f"{instead.format(address='host:port')}"
        )
        raise
    address = urlsplit(asset_uri(address, "topic")).netloc  # as the URI spells it
    warnings.warn(
        f"{what} reads connection {nsq_conn_id!r} when the DAG file is parsed, so the DAG "
        "does not import where the connection is not defined (Airflow's best practices: "
        "top-level code reads no connection). This is deprecated: write the cluster's "
        f"address instead, {instead.format(address=address)}",
        FutureWarning,
        stacklevel=3,
    )
    return address
