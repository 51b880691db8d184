"""The Airflow connection type ``nsq``: which settings it takes as extras, and its form.

The settings themselves (kinds, bounds, docs) are described once in the client
(:class:`~..client.settings.connection_settings.ConnectionSettings`); which of them an Airflow
connection takes as extras is said here, in :data:`CONNECTION_EXTRAS`. The hook's parser
(``settings_from_connection``) reads extras through it and the connection form
(:data:`CONN_FIELDS`, ``ui-field-behaviour``; the provider info hands both to Airflow)
is generated from it, so the form and the parser cannot drift apart.

No Airflow here: the provider info imports this module when Airflow starts.
"""

from __future__ import annotations

from typing import Any

from ..client.settings.address import DEFAULT_NSQD_TCP_PORT
from ..client.settings.connection_settings import ConnectionSettings
from ..client.settings.fields import Setting, SettingSource

CONN_TYPE = "nsq"

#: An Airflow connection's extras: every connection setting users may write, but the
#: AUTH secret, which is the connection's password field (an extra of that name is
#: unknown, so a secret pasted there is never echoed back).
CONNECTION_EXTRAS = SettingSource(leaves_out=frozenset({"auth_secret"}))


def extra_settings() -> dict[str, Setting]:
    """The settings a connection takes as extras, by name, in their described order."""
    return CONNECTION_EXTRAS.takes(ConnectionSettings.described())


def _conn_field(described: Setting) -> dict[str, Any]:
    """A setting as a ``conn-fields`` entry: label, description and JSON schema."""
    schema: dict[str, Any] = {"type": [described.json_type, "null"]}
    if described.kind == "seconds":
        schema["minimum"] = 0  # and > 0: the parser says so
    elif described.minimum is not None:
        schema["minimum"] = described.minimum
    if described.maximum is not None:
        schema["maximum"] = described.maximum
    if described.choices:
        schema["enum"] = list(described.choices)
    if described.pattern is not None:
        schema["pattern"] = described.pattern
    if described.kind == "boolean" or described.choices:
        schema["default"] = described.default  # a blank is no answer to a yes/no question
    return {"label": described.label, "description": described.doc, "schema": schema}


#: Connection extras: name -> conn-fields entry, one per setting a connection takes as an
#: extra (:func:`extra_settings`), in that order. ``schema.type[0]`` is the value's JSON
#: type; the URI form's text is read as the same.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    name: _conn_field(described) for name, described in extra_settings().items()
}

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
