"""A client joining a running service with other model settings is told so.

The service of a database is started once (by ``workbench serve``, or by the first
``workbench mcp`` client, with that client's environment); a later client's LLM and embedder
settings do not reach it. The service's record says which models it runs
(:func:`model_settings`, never a key or a token); a joining client whose environment says
otherwise gets one warning on stderr naming the difference and how to apply its settings.
"""

from __future__ import annotations

import logging
from typing import Any

from workbench.config import Settings

log = logging.getLogger("service.shared")


def model_settings(settings: Settings) -> dict[str, Any]:
    """The LLM and embedder ``settings`` configure (no secret)."""
    local = settings.embedder_kind == "local"
    return {
        "llm_model": settings.model_name if settings.llm_configured else None,
        "llm_url": settings.compat_base_url if settings.llm_configured else None,
        "embedder": settings.embedder_kind,
        "embedder_model": settings.local_embedder_model if local else settings.embedder_model,
        "embedder_url": None if local else settings.embedder_base_url,
    }


def differences(
    mine: dict[str, Any], theirs: dict[str, Any], embedder_set: bool = True
) -> list[str]:
    """What differs between a client's model settings and the service's, said for a person
    (the embedder only when the client sets one: ``embedder_set``)."""
    said = []
    if mine["llm_model"] and not theirs.get("llm_model"):
        said.append(f"this client configures the LLM {mine['llm_model']} but the service has none")
    elif mine["llm_model"] and (mine["llm_model"], mine["llm_url"]) != (
        theirs.get("llm_model"),
        theirs.get("llm_url"),
    ):
        said.append(
            f"this client configures the LLM {mine['llm_model']} at {mine['llm_url']}, the "
            f"service uses {theirs.get('llm_model')} at {theirs.get('llm_url')}"
        )
    keys = ("embedder", "embedder_model", "embedder_url")
    if embedder_set and any(mine[k] != theirs.get(k) for k in keys):
        said.append(
            f"this client configures the embedder {_embedder(mine)}, the service uses "
            f"{_embedder(theirs)}"
        )
    return said


def _embedder(values: dict[str, Any]) -> str:
    url = values.get("embedder_url")
    return f"{values.get('embedder_model')}" + (f" at {url}" if url else " (local)")


def warn_if_different(settings: Settings, theirs: dict[str, Any] | None, pid: int | None) -> bool:
    """One warning when the client's model settings differ from the running service's;
    whether it was given. A record without them (an older service) says nothing."""
    if not isinstance(theirs, dict):
        return False
    fields = settings.model_fields_set
    embedder_set = bool(
        fields
        & {"embedder_provider", "embedder_base_url", "embedder_model", "local_embedder_model"}
    )
    said = differences(model_settings(settings), theirs, embedder_set)
    if not said:
        return False
    log.warning(
        "the service holding %s was started with other settings: %s. They are not applied "
        "while it runs: to apply this client's, stop it (kill %s, or `workbench serve` with "
        "these settings in its place; the next `workbench mcp` starts it with its own "
        "environment) or give every client of this database the same settings",
        settings.db_location(),
        "; ".join(said),
        pid if pid is not None else "<its PID in the .service.json record>",
    )
    return True
