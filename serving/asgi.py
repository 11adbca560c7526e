"""The ASGI shapes the pure middlewares speak (the ASGI spec's scope, message and callables),
loose on purpose: a scope and a message are plain mappings, as every server sends them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

if TYPE_CHECKING:
    from litestar.types import ASGIApp as LitestarApp

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


def for_litestar(middleware: Callable[..., ASGIApp]) -> Callable[..., LitestarApp]:
    """``middleware`` as Litestar's ``DefineMiddleware`` / ``middleware=`` take it: the same
    callable; Litestar types its scope and messages as TypedDicts, these plain mappings."""
    return cast("Callable[..., LitestarApp]", middleware)
