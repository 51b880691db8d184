"""The provider's version, in a module of its own: the client reads it for the user agent
it sends (IDENTIFY, HTTP) without importing the package's entry point, which loads the
provider info and so the Airflow-side modules."""

from __future__ import annotations

__version__ = "0.1.0"
