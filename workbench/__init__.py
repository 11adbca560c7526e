"""Knowledge Workbench core: a memory service for AI assistants.

Importing this package loads no web framework, no Jupyter and no model: heavy pieces load
lazily when used.
"""

from typing import TYPE_CHECKING

from workbench.clock import ManualClock, utcnow
from workbench.config import Settings, load_settings
from workbench.errors import (
    ConfigError,
    InvalidInput,
    LLMError,
    NotFound,
    StoreError,
    WorkbenchError,
)
from workbench.metrics import Metrics
from workbench.store import Store

if TYPE_CHECKING:  # imported on first use (below): the facade loads ingestion, search, the LLM
    from workbench.facade import Workbench


def __getattr__(name: str) -> object:
    if name == "Workbench":
        from workbench.facade import Workbench

        return Workbench
    raise AttributeError(name)


__all__ = [
    "ConfigError",
    "InvalidInput",
    "LLMError",
    "ManualClock",
    "Metrics",
    "NotFound",
    "Settings",
    "Store",
    "StoreError",
    "Workbench",
    "WorkbenchError",
    "load_settings",
    "utcnow",
]
