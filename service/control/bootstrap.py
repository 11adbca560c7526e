"""What the command and the servers share to start: open the workbench, name the secrets to
redact, settle the loaded memory. Both ``service.control.cli`` and ``service.control.runner``
import it, so neither imports the other back."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from workbench.config import Settings

if TYPE_CHECKING:
    from workbench.embedding import Embedder
    from workbench.facade import Workbench
    from workbench.llm.health import LLMHealth


def secrets_of(settings: Settings) -> list[str | None]:
    return [
        s.get_secret_value() if s else None for s in (settings.api_token, settings.compat_api_key)
    ]


def open_workbench(
    settings: Settings,
    embedder: Embedder | None = None,
    start: bool = False,
    llm_health: LLMHealth | None = None,
) -> Workbench:
    from workbench.facade import Workbench  # loads the core only for commands that need it

    workbench = Workbench.open(settings, embedder=embedder, llm_health=llm_health)
    if start:
        workbench.start()
    return workbench


def freeze_loaded_memory() -> int:
    """Exempt everything allocated so far from the garbage collector's full passes; returns
    how many objects that is.

    Called once the workbench is open: its search caches (a row dict per memory, the BM25
    postings) are most of the process's container objects and live as long as it does, yet a
    full (generation 2) collection walks every one of them, stalling every request meanwhile for
    a time that grows with the number of memories (figures in ``docs/performance.md``). Frozen,
    they cost such a pass nothing.
    Reference counting still frees what is dropped later (a replaced cache); only reference
    cycles among these objects would never be collected, and they hold none that matter.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
