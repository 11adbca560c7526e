"""What the service's tool path calls: the core's facade, or a stand-in for its tool methods.

A stand-in is a live service's client or a database that could not be opened
(``service.client.live``): it has no store and answers every tool method by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from workbench.facade import Workbench


class StandIn(Protocol):
    """The facade's tool methods, each answered by ``__getattr__``."""

    def __getattr__(self, method: str) -> Callable[..., Any]: ...


ToolTarget: TypeAlias = "Workbench | StandIn"
