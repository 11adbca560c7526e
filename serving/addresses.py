"""Addresses: whether a host is this machine's loopback.

A leaf module with no dependency beyond the standard library: the live client (the CLI,
notebooks) imports it without loading Litestar, which :mod:`serving.middleware` brings."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is loopback:
    ``localhost``, ``127.0.0.0/8`` or ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
