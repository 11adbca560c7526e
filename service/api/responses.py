"""What each tool returns and what an error looks like, for the OpenAPI schema
(``POST /tools/<name>``: 200 and every error status; over MCP the same dicts are a tool's
``structuredContent``). The facade's answers are typed in the core (:mod:`workbench.results`)
and sent as they are; here each becomes the pydantic model the schema publishes (tests check
real answers against them, schemathesis checks every response against the schema). The models
allow extra fields, so a field added later does not break a client that validates against an
older schema.
"""

from __future__ import annotations

import types
import typing
from datetime import datetime
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, create_model

from workbench import results as r
from workbench.results import browse as rb


class Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- errors ------------------------------------------------------------------------------------


class ErrorDetail(Out):
    type: str = Field(
        description="Machine-readable kind: invalid_input, unauthorized, forbidden, "
        "not_found, conflict, payload_too_large, unsupported_media_type, "
        "misdirected_request, rate_limited, llm_error, llm_not_configured, store_error, "
        "internal_error, ..."
    )
    message: str = Field(description="What went wrong, for a person (never a stack trace).")
    request_id: str = Field(description="The request's id, also in the server log.")
    retry_after: int | None = Field(
        default=None,
        description="MCP tool results only: the seconds after which a retry may succeed "
        "(REST sends them as the Retry-After header).",
    )


class ErrorBody(Out):
    """The body of every error response."""

    error: ErrorDetail


# --- tools -------------------------------------------------------------------------------------

_COVERED = Field(
    description="The groups this answer covered (the ones named, else every group the "
    "caller may use): an empty answer is never ambiguous."
)


# the service adds the groups an answer covered to the facade's search and list answers
class NodesResult(r.NodesFound):
    groups: Annotated[list[str], _COVERED]


class FactsResult(r.FactsFound):
    groups: Annotated[list[str], _COVERED]


class EpisodesResult(r.EpisodesFound):
    groups: Annotated[list[str], _COVERED]


class ToolTable(Out):
    tools: list[dict[str, Any]]


# the string kinds of the core's answers, as the schema types them
_STRINGS: dict[Any, type] = {r.Uuid: UUID, r.Timestamp: datetime}


@cache
def model_of(answer: type) -> type[Out]:
    """The pydantic model of a typed dict of answers (nested typed dicts become models too;
    keys it may leave out default to None)."""
    fields: dict[str, Any] = {}
    for name, hint in get_type_hints(answer, include_extras=True).items():
        # NotRequired shows in the hint even where postponed annotations hid it from the class
        required = name in answer.__required_keys__  # type: ignore[attr-defined]
        if get_origin(hint) is typing.NotRequired:
            hint, required = get_args(hint)[0], False
        fields[name] = (_schema_type(hint), ... if required else None)
    return create_model(answer.__name__, __base__=Out, __doc__=answer.__doc__, **fields)


def _schema_type(hint: Any) -> Any:
    if hint in _STRINGS:
        return _STRINGS[hint]
    if typing.is_typeddict(hint):
        return model_of(hint)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return Annotated[(_schema_type(args[0]), *hint.__metadata__)]
    if origin in (Union, types.UnionType):
        return Union[tuple(_schema_type(a) for a in args)]  # noqa: UP007 - built from a tuple
    if origin in (list, dict):
        return origin[tuple(_schema_type(a) for a in args)]
    return hint  # Literal, a plain type, Any


ANSWERS: dict[str, type] = {
    "add_memory": r.AddMemoryResult,
    "search_memory_nodes": NodesResult,
    "search_memory_facts": FactsResult,
    "search_memory": r.SearchMemoryResult,
    "get_episodes": EpisodesResult,
    "delete_episode": r.DeleteEpisodeResult,
    "get_entity_edge": r.EntityEdge,
    "get_sources": r.SourcesResult,
    "get_timeline": r.TimelineResult,
    "delete_entity_edge": r.Message,
    "clear_graph": r.ClearGraphResult,
    "get_status": r.StatusResult,
    "get_queue_status": r.QueueStatusResult,
    "retry_failed_episodes": r.RetryResult,
    "run_decay_maintenance": r.MaintenanceResult,
    "get_knowledge_health": r.KnowledgeHealthResult,
    "classify_memory": r.ClassifyResult,
    "import_memories": r.ImportResult,
    "export_snapshot": r.SnapshotResult,
    "recover_soft_deleted": r.RecoverResult,
    "list_groups": r.GroupsResult,
    "add_token": r.NewToken,
    "list_tokens": r.TokensResult,
    "revoke_token": r.RevokeResult,
    "reextract": r.ReextractResult,
    "get_group_stats": rb.GroupStatsResult,
    "list_episodes": rb.EpisodePage,
    "get_episode": rb.EpisodeWhole,
    "list_facts": rb.FactPage,
    "list_entities": rb.EntityPage,
    "get_entity": rb.EntityNeighbourhood,
    "delete_entity": rb.DeleteEntityResult,
}
# what each tool's route publishes as its 200 answer
RESULTS: dict[str, type[Out]] = {name: model_of(answer) for name, answer in ANSWERS.items()}


# the error statuses every tool route can answer, with what they mean there
ERRORS: dict[int, str] = {
    400: "Invalid arguments (the message names each wrong field).",
    401: "Missing or wrong bearer token (only when SVC_KNOWLEDGE_API_TOKEN is set).",
    403: "A browser Origin that is not allowed, or a call the token's scope does not allow "
    "(another group, a write with a read-only token, an admin tool).",
    404: "No such item (a uuid that names nothing, or an item of a group the token may not use).",
    409: "Conflict (e.g. other content under an episode uuid already used).",
    413: "The body is over the size limit.",
    415: "The body is not JSON.",
    421: "A Host name this service does not answer (DNS-rebinding protection).",
    429: "Over the rate limit, or add_memory while the extraction queue holds its cap of "
    "episodes (queue_full); retry after the Retry-After header's seconds.",
    500: "Internal error; the message names the request id of the server log line.",
    502: "The LLM failed (extraction or classification).",
    503: "The store, the embedder or the LLM is unavailable; when it passes by itself "
    "(store_unavailable, embedder_error) the Retry-After header says after how many seconds "
    "to retry.",
}
