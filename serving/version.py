"""The installed distribution's version, which both servers report (``--version``, OpenAPI)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The installed distribution's version (``0.0.0`` in a bare checkout)."""
    try:
        return version("knowledge-workbench")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"
