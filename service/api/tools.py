"""THE tool table: one definition per tool, shared by REST (``POST /tools/<name>``) and MCP so
the two cannot drift.

Each :class:`Tool` has the name and argument names of the Graphiti MCP server (clients written
for it keep working), a description written for an assistant choosing among tools, a pydantic
model of its arguments (the JSON schema both transports publish) and the facade method it
calls. :meth:`Tool.invoke` validates and calls; the facade raises ``workbench.errors``.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from service.api.access import guarded_call
from workbench.decay.classification import MAX_CLASSIFY_CHARS
from workbench.errors import NotFound
from workbench.names import (
    GROUP_ID_PATTERN,
    GROUP_ID_RULE,
    MAX_GROUP_ID,
    MAX_GROUP_IDS,
    is_group_id,
)

if TYPE_CHECKING:
    from service.api.seam import ToolTarget
    from workbench.store.tenancy import Caller


def _canonical_uuid(value: str) -> str:
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        raise ValueError("must be a uuid, e.g. 3a460868-7411-4c0e-99cf-570bf7f9a77d") from None


# every id the service hands out is a uuid: say so in the schema, refuse anything else early
Uuid = Annotated[
    str, AfterValidator(_canonical_uuid), WithJsonSchema({"type": "string", "format": "uuid"})
]
# (Litestar builds the OpenAPI schema itself and reads only a field's json_schema_extra)
AS_UUID: dict[str, Any] = {"format": "uuid"}
AS_UUIDS: dict[str, Any] = {"items": {"type": "string", "format": "uuid"}}
_MIN_SCORE = (
    "Only results whose score is at least this (scores run from about 0 to 1: similarity, "
    "keyword match, freshness and importance, weighted); omit for the best matches whatever "
    "their score."
)


def _group_name(value: str) -> str:
    if not is_group_id(value):
        raise ValueError(f"not a valid group name: {GROUP_ID_RULE}")
    return value


# one rule for group names (workbench.names), in the schema and checked early; the facade
# checks again for callers that bypass the tools (notebooks, the CLI)
_GROUP_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": GROUP_ID_PATTERN,
    "minLength": 1,
    "maxLength": MAX_GROUP_ID,
}
GroupName = Annotated[str, AfterValidator(_group_name), WithJsonSchema(_GROUP_SCHEMA)]
AS_GROUP: dict[str, Any] = {"pattern": GROUP_ID_PATTERN}
AS_GROUPS: dict[str, Any] = {"items": _GROUP_SCHEMA, "maxItems": MAX_GROUP_IDS}
GroupIds = Annotated[list[GroupName] | None, Field(max_length=MAX_GROUP_IDS)]
_GROUPS = "Groups (namespaces) to search; omit to search every group the token may use."
State = Literal["ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED", "PERMANENT"]
_STATES = (
    "Only memories in these lifecycle states; default all but EXPIRED and SOFT_DELETED "
    "(name them to search forgotten memories)."
)
_AFTER = "Only memories created at or after this time (ISO 8601)."
_BEFORE = "Only memories created before this time (ISO 8601)."
_ABOUT_AFTER = (
    "Only memories about a time at or after this (ISO 8601): a passage said then, a fact "
    "valid at some time since (from its valid_at, else when it was stored)"
)
_ABOUT_BEFORE = "Only memories about a time before this (ISO 8601); see 'after'"
_AS_OF = (
    "Facts as they were at this instant (ISO 8601): those valid then, including ones "
    "superseded since; default: facts true now."
)
_SUPERSEDED = (
    "Also return superseded facts (no longer true), each with its invalid_at and "
    "superseded_by; default false (the response counts them in superseded_omitted)."
)
_NOW = (
    "When the question is asked (ISO 8601), that time words in the query ('last week', "
    "'two days ago') and 'current' are read against; default the server's clock. A client "
    "replaying an old conversation passes its date."
)


class Args(BaseModel):
    """Base of every argument model: unknown arguments are an error, not silently dropped, and
    types are strict (``"10"`` is not a number, ``"yes"`` not a boolean)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class NoArgs(Args):
    pass


class AddMemoryArgs(Args):
    name: str = Field(min_length=1, max_length=500, description="Short title of the episode.")
    episode_body: str = Field(
        min_length=1,
        description="The content to remember: plain text, a chat transcript (source "
        "'message', lines like 'user: ...'), or a JSON document (source 'json').",
    )
    group_id: GroupName | None = Field(
        None,
        json_schema_extra=AS_GROUP,
        description="Group (namespace) to store the episode in; default group if omitted.",
    )
    source: Literal["text", "message", "json"] = Field(
        "text", description="How to read episode_body: text, message or json."
    )
    source_description: str = Field("", max_length=500, description="Where the content came from.")
    uuid: Uuid | None = Field(
        None,
        json_schema_extra=AS_UUID,
        description="Optional uuid to give the episode. Sending the same episode again "
        "under its uuid returns the first result (a safe retry); other content under a used "
        "uuid is a conflict.",
    )
    reference_time: str | None = Field(
        None,
        description="When the content happened (ISO 8601, e.g. 2025-03-01T12:00:00Z); default now.",
    )
    priority: Literal["high", "normal", "low"] = Field(
        "normal", description="Queue priority of the extraction."
    )


class SearchNodesArgs(Args):
    query: str = Field(min_length=1, description="What to look for, in natural language.")
    group_ids: GroupIds = Field(None, json_schema_extra=AS_GROUPS, description=_GROUPS)
    max_nodes: int = Field(10, ge=1, le=1000, description="Maximum number of entities.")
    entity_types: list[str] | None = Field(
        None, description="Only entities of these types (e.g. Person, Organization)."
    )
    created_after: str | None = Field(None, description=_AFTER)
    created_before: str | None = Field(None, description=_BEFORE)
    states: list[State] | None = Field(None, description=_STATES)
    after: str | None = Field(
        None, description=_ABOUT_AFTER + ", for an entity one of its facts, or first seen then."
    )
    before: str | None = Field(None, description=_ABOUT_BEFORE + ".")
    include_weighted_scores: bool | None = Field(
        None,
        description="Rank by similarity, keyword match, freshness and importance "
        "(default true); false ranks by relevance (similarity and keyword match) only.",
    )
    min_score: float | None = Field(None, allow_inf_nan=False, description=_MIN_SCORE)

    @model_validator(mode="before")
    @classmethod
    def _legacy_entity(cls, data: Any) -> Any:
        """Older Graphiti clients send ``entity`` (one type, '' for any)."""
        if isinstance(data, dict) and "entity" in data:
            data = dict(data)
            entity = data.pop("entity")
            if entity and not data.get("entity_types"):
                data["entity_types"] = [entity]
        return data


class SearchFactsArgs(Args):
    query: str = Field(min_length=1, description="What to look for, in natural language.")
    group_ids: GroupIds = Field(None, json_schema_extra=AS_GROUPS, description=_GROUPS)
    max_facts: int = Field(10, ge=1, le=1000, description="Maximum number of facts.")
    center_node_uuid: Uuid | None = Field(
        None,
        json_schema_extra=AS_UUID,
        description="Rank facts near this entity first (uuid of an entity).",
    )
    created_after: str | None = Field(None, description=_AFTER)
    created_before: str | None = Field(None, description=_BEFORE)
    relation_types: list[str] | None = Field(
        None, description="Only facts of these relations (e.g. WORKS_AT)."
    )
    include_invalidated: bool | None = Field(
        None, description="Also return facts no longer valid (superseded); default false."
    )
    states: list[State] | None = Field(None, description=_STATES)
    min_score: float | None = Field(None, allow_inf_nan=False, description=_MIN_SCORE)
    after: str | None = Field(None, description=_ABOUT_AFTER + ".")
    before: str | None = Field(None, description=_ABOUT_BEFORE + ".")
    as_of: str | None = Field(None, description=_AS_OF)
    include_superseded: bool | None = Field(None, description=_SUPERSEDED)


class SearchMemoryArgs(Args):
    query: str = Field(min_length=1, description="What to look for, in natural language.")
    group_ids: GroupIds = Field(None, description=_GROUPS)
    max_results: int = Field(10, ge=1, le=1000, description="Maximum number of results.")
    kinds: list[Literal["fact", "passage"]] | None = Field(
        None,
        description="Which kinds of memory to return: 'fact' (extracted facts) and 'passage' "
        "(what was said, verbatim); default both.",
    )
    created_after: str | None = Field(None, description=_AFTER)
    created_before: str | None = Field(None, description=_BEFORE)
    min_score: float | None = Field(None, allow_inf_nan=False, description=_MIN_SCORE)
    after: str | None = Field(None, description=_ABOUT_AFTER + ".")
    before: str | None = Field(None, description=_ABOUT_BEFORE + ".")
    as_of: str | None = Field(None, description=_AS_OF)
    include_superseded: bool | None = Field(None, description=_SUPERSEDED)
    now: str | None = Field(None, description=_NOW)


class QueueStatusArgs(Args):
    group_ids: GroupIds = Field(
        None,
        json_schema_extra=AS_GROUPS,
        description="Groups whose failures to list (their 20 newest, however many other "
        "groups failed since); omit for every group the token may use.",
    )


class GetEpisodesArgs(Args):
    group_ids: GroupIds = Field(
        None,
        json_schema_extra=AS_GROUPS,
        description="Groups to list; omit for every group the token may use.",
    )
    max_episodes: int = Field(10, ge=1, le=1000, description="Most recent episodes to return.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_names(cls, data: Any) -> Any:
        """Older Graphiti clients send ``group_id`` and ``last_n``."""
        if isinstance(data, dict) and ("group_id" in data or "last_n" in data):
            data = dict(data)
            group = data.pop("group_id", None)
            if group is not None and not data.get("group_ids"):
                data["group_ids"] = [group]  # "" too: an empty name is an error, not "all"
            last_n = data.pop("last_n", None)
            if last_n is not None and "max_episodes" not in data:
                data["max_episodes"] = last_n
        return data


class UuidArgs(Args):
    uuid: Uuid = Field(description="The uuid of the item.", json_schema_extra=AS_UUID)


class ClearGraphArgs(Args):
    group_ids: list[GroupName] = Field(
        min_length=1,
        max_length=MAX_GROUP_IDS,
        json_schema_extra=AS_GROUPS,
        description="Groups to erase completely (required: nothing is cleared "
        f"without naming its group; at most {MAX_GROUP_IDS} a call).",
    )


class RetryArgs(Args):
    episode_uuids: list[Uuid] | None = Field(
        None,
        json_schema_extra=AS_UUIDS,
        description="Failed episodes to re-queue; omit to re-queue every failed one.",
    )
    group_id: GroupName | None = Field(
        None, json_schema_extra=AS_GROUP, description="Only failed episodes of this group."
    )


class MaintenanceArgs(Args):
    dry_run: bool = Field(False, description="Report what would change without changing it.")


class ImportArgs(Args):
    lines: list[str | dict[str, Any]] = Field(
        min_length=1,
        max_length=5000,
        description="Lines of an import file: JSON strings or objects, each an entity "
        "({'type': 'entity', 'name', ...}) or a fact ({'type': 'fact', 'source', 'target', "
        "'fact', ...}).",
    )
    group_id: GroupName | None = Field(
        None, json_schema_extra=AS_GROUP, description="Group for lines that name none."
    )
    first_line: int = Field(
        1, ge=1, description="Line number of the first line (errors name file lines)."
    )
    format: Literal["facts", "chatgpt", "claude", "jsonl"] = Field(
        "facts",
        description="'facts': entities and facts (above). A conversation export instead: "
        "'chatgpt' or 'claude' (each line a conversation of its conversations.json) or "
        "'jsonl' (each line a message: conversation_id, role or speaker, text, time); each "
        "conversation (session) becomes a message episode, searchable by its words at once.",
    )
    extract: bool = Field(
        False,
        description="Conversations: queue the new episodes for extraction at low priority "
        "(LLM calls; the answer's estimate prices them). Without it they are stored only.",
    )
    dry_run: bool = Field(
        False, description="Conversations: write nothing; the counts and the estimate only."
    )
    session_gap_hours: float = Field(
        6.0,
        ge=0,
        description="Conversations: a new episode starts after a silence this long (0: never).",
    )
    file: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="The name of the file the lines come from: each imported fact's sources "
        "name it (default 'import_memories').",
    )


class TimelineArgs(Args):
    group_ids: GroupIds = Field(None, json_schema_extra=AS_GROUPS, description=_GROUPS)
    entity_uuid: Uuid | None = Field(
        None,
        json_schema_extra=AS_UUID,
        description="Only this entity: the episodes that mention it and its facts.",
    )
    after: str | None = Field(None, description="Only events at or after this time (ISO 8601).")
    before: str | None = Field(None, description="Only events before this time (ISO 8601).")
    max_items: int = Field(50, ge=1, le=500, description="Events per page.")
    cursor: str | None = Field(
        None, max_length=1000, description="The 'next' of the page before; omit for the first."
    )


RUN_ID_PATTERN = "^rx-[0-9a-f]{12}$"  # workbench.jobs.reextract names runs so


class ReextractArgs(Args):
    group_id: GroupName | None = Field(
        None,
        json_schema_extra=AS_GROUP,
        description="Group whose stored episodes to extract again into a shadow graph (or "
        "resume its open run); returns when the shadow is built.",
    )
    dry_run: bool = Field(
        False, description="With group_id: predict the calls, tokens and USD; spend nothing."
    )
    promote: str | None = Field(
        None,
        pattern=RUN_ID_PATTERN,
        description="Run id whose graph replaces its group's (one transaction).",
    )
    discard: str | None = Field(
        None, pattern=RUN_ID_PATTERN, description="Run id whose shadow graph to drop."
    )
    compare: str | None = Field(
        None,
        pattern=RUN_ID_PATTERN,
        description="Run id to compare with the live graph (added, removed, changed...).",
    )


class ClassifyArgs(Args):
    text: str = Field(
        min_length=1,
        max_length=MAX_CLASSIFY_CHARS,
        description=f"The memory text to rate (at most {MAX_CLASSIFY_CHARS} characters).",
    )


class ListGroupsArgs(Args):
    group_ids: GroupIds = Field(
        None,
        json_schema_extra=AS_GROUPS,
        description="Only these groups; omit for every group the caller may use.",
    )


_TOKEN_NAME = "The token's name (same rule as group names)."


class AddTokenArgs(Args):
    name: GroupName = Field(json_schema_extra=AS_GROUP, description=_TOKEN_NAME)
    groups: list[GroupName] = Field(
        [],
        max_length=MAX_GROUP_IDS,
        json_schema_extra=AS_GROUPS,
        description="The groups the token may use (required unless admin).",
    )
    read_only: bool = Field(False, description="The token may only read and search.")
    admin: bool = Field(
        False, description="The token may use every group and the admin-only tools."
    )


class TokenNameArgs(Args):
    name: GroupName = Field(json_schema_extra=AS_GROUP, description=_TOKEN_NAME)


# --- browsing one group page by page (the memory browser at /ui) -------------------------
_LIMIT = "Items a page (1-1000)."
_OFFSET = "Items to skip (the page's start)."


class GroupPageArgs(Args):
    group_id: GroupName = Field(json_schema_extra=AS_GROUP, description="The group to list.")
    limit: int = Field(50, ge=1, le=1000, description=_LIMIT)
    offset: int = Field(0, ge=0, description=_OFFSET)


class ListFactsArgs(GroupPageArgs):
    state: Literal["current", "superseded", "all"] = Field(
        "all", description="current (still true), superseded (invalidated or expired) or all."
    )


class ListEntitiesArgs(GroupPageArgs):
    name_contains: str | None = Field(
        None, max_length=200, description="Only entities whose name contains this (any case)."
    )


class GetEntityArgs(UuidArgs):
    max_facts: int = Field(50, ge=1, le=1000, description="Most facts touching it to return.")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[Args]
    method: str
    read_only: bool = False
    destructive: bool = False
    admin: bool = False  # only an admin token may call it
    audited: bool = False  # every call is written to audit_log (destructive ones always are)
    # what an omitted group argument means: every group ("all": narrowed to the caller's
    # groups) or the default group ("default")
    groups_omitted: Literal["all", "default"] = "all"

    @property
    def takes_args(self) -> bool:
        return bool(self.args.model_fields)

    @property
    def args_optional(self) -> bool:
        return all(not f.is_required() for f in self.args.model_fields.values())

    def input_schema(self) -> dict[str, Any]:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        schema.setdefault("properties", {})
        return schema

    def parse(self, arguments: Mapping[str, Any] | Args | None) -> Args:
        """Validate raw arguments (raises ``pydantic.ValidationError``)."""
        if isinstance(arguments, self.args):
            return arguments
        return self.args.model_validate(dict(arguments or {}))

    def invoke(
        self,
        workbench: ToolTarget,
        arguments: Mapping[str, Any] | Args | None,
        caller: Caller | None = None,
    ) -> dict[str, Any]:
        """Validate ``arguments`` and call the facade method within ``caller``'s scope
        (None: no token is configured, every group; see :mod:`service.api.access`). Blocking:
        run it in a thread."""
        return guarded_call(self, workbench, self.parse(arguments), caller)

    def call(self, workbench: ToolTarget, args: Args) -> dict[str, Any]:
        """The facade method on validated arguments (no scope: use :meth:`invoke`)."""
        result: dict[str, Any] = method_of(workbench, self.method)(
            **args.model_dump(exclude_none=True)
        )
        return result


def method_of(workbench: ToolTarget, method: str) -> Any:
    """The facade's ``method``, or its collaborator's: ``"pages.list_facts"`` is the
    ``list_facts`` of the facade's ``pages``. A stand-in (no such attribute of its own)
    answers the whole name."""
    owner, _, name = method.rpartition(".")
    held = vars(workbench).get(owner) if owner and hasattr(workbench, "__dict__") else None
    return getattr(held, name) if held is not None else getattr(workbench, method)


TOOLS: tuple[Tool, ...] = (
    Tool(
        "add_memory",
        "Remember something: store an episode (text, a conversation, or JSON) in the knowledge "
        "graph. Returns at once; entities and facts are extracted in the background by the LLM "
        "(see get_queue_status). Use one episode per coherent piece of information.",
        AddMemoryArgs,
        "add_memory",
        groups_omitted="default",
    ),
    Tool(
        "search_memory_nodes",
        "Search remembered entities (people, organisations, projects, concepts...) by meaning. "
        "Returns entity summaries with a relevance score and its parts (similarity, keyword, "
        "freshness, importance). Use for 'who/what is X'. No LLM call.",
        SearchNodesArgs,
        "search_memory_nodes",
        read_only=True,
    ),
    Tool(
        "search_memory_facts",
        "Search remembered facts (relationships between entities, e.g. 'Alice works at Acme') "
        "by meaning. Returns facts with validity dates, a relevance score and their sources "
        "(the episodes and passages that stated them). Use for questions about relationships "
        "and events. No LLM call.",
        SearchFactsArgs,
        "search_memory_facts",
        read_only=True,
    ),
    Tool(
        "search_memory",
        "Recall anything remembered: extracted facts and passages of what was said (the "
        "episodes' own words, searchable as soon as add_memory returns, even before "
        "extraction or with no LLM) in one list ranked by one score. Each result has a kind "
        "('fact' or 'passage'), a score and the episode(s) it came from. Start here for any "
        "question about the past. No LLM call.",
        SearchMemoryArgs,
        "search_memory",
        read_only=True,
    ),
    Tool(
        "get_episodes",
        "List the most recent episodes (the raw stored inputs) with their processing status.",
        GetEpisodesArgs,
        "get_episodes",
        read_only=True,
    ),
    Tool(
        "delete_episode",
        "Delete one episode and the entities and facts only it supports. Cannot be undone.",
        UuidArgs,
        "delete_episode",
        destructive=True,
    ),
    Tool(
        "get_entity_edge",
        "Get one fact (entity edge) by uuid, with its endpoints, validity, decay state and "
        "sources.",
        UuidArgs,
        "get_entity_edge",
        read_only=True,
    ),
    Tool(
        "get_sources",
        "Where a memory came from: for a fact, every episode that stated it (name, time) with "
        "the passages that say it, first and last time said, or the file it was imported "
        "from; for an entity, the episodes and passages that mention it. No LLM call.",
        UuidArgs,
        "get_sources",
        read_only=True,
    ),
    Tool(
        "get_timeline",
        "What happened, in time order: episodes, facts that became true and facts that "
        "stopped being true (with what superseded them), for some groups or one entity, "
        "within a window (after/before), a page at a time (pass 'next' as cursor). Use for "
        "'what changed since March' or 'how long before'. No LLM call.",
        TimelineArgs,
        "get_timeline",
        read_only=True,
    ),
    Tool(
        "delete_entity_edge",
        "Delete one fact (entity edge) by uuid. Cannot be undone.",
        UuidArgs,
        "delete_entity_edge",
        destructive=True,
    ),
    Tool(
        "clear_graph",
        "Erase everything (episodes, entities, facts) in the named groups. Cannot be undone; "
        "group_ids is required and must be non-empty.",
        ClearGraphArgs,
        "clear_graph",
        destructive=True,
    ),
    Tool(
        "get_status",
        "Service status: database, embedder, whether an LLM is configured, graph and queue counts.",
        NoArgs,
        "get_status",
        read_only=True,
    ),
    Tool(
        "get_queue_status",
        "Extraction queue status: episodes queued, processing, done and failed (with the "
        "failure reasons), workers running.",
        QueueStatusArgs,
        "get_queue_status",
        read_only=True,
    ),
    Tool(
        "retry_failed_episodes",
        "Re-queue failed episodes for extraction (all, some by uuid, or one group's).",
        RetryArgs,
        "retry_failed_episodes",
    ),
    Tool(
        "run_decay_maintenance",
        "Run one decay maintenance pass now: recompute decay scores, move memories through "
        "their lifecycle (ACTIVE, DORMANT, ARCHIVED, EXPIRED, SOFT_DELETED) and purge expired "
        "soft-deleted ones. dry_run reports without changing anything.",
        MaintenanceArgs,
        "run_decay_maintenance",
        admin=True,
        audited=True,
    ),
    Tool(
        "get_knowledge_health",
        "Health of the memory decay system: status, last maintenance run, memories per "
        "lifecycle state, average decay score, importance and stability.",
        NoArgs,
        "get_knowledge_health",
        read_only=True,
    ),
    Tool(
        "classify_memory",
        "Rate a piece of text for importance and stability (1-5 each) as the service would "
        "for a new memory; reports whether the LLM or the defaults were used. It spends an "
        "LLM call, so a read-only token may not call it.",
        ClassifyArgs,
        "classify_memory",
    ),
    Tool(
        "import_memories",
        "Import pre-extracted entities and facts (the JSON-lines import format), no LLM: "
        "facts name their endpoint entities, created when missing. Returns counts and the "
        "lines that were refused, with their line numbers. With 'format' chatgpt, claude or "
        "jsonl: conversations imported as episodes (again: nothing added twice).",
        ImportArgs,
        "import_memories",
        audited=True,
        groups_omitted="default",
    ),
    Tool(
        "export_snapshot",
        "Write a consistent Parquet snapshot of every table (episodes, entities, facts, LLM "
        "calls, queue, maintenance runs...) into a new private temporary folder on the "
        "service's host and return the file paths, for analysis while the service runs. "
        "Writes files: at most two snapshots are kept (an older one is removed), and all are "
        "removed when memories are deleted and when the service stops.",
        NoArgs,
        "export_snapshot",
        admin=True,
        audited=True,
    ),
    Tool(
        "reextract",
        "Admin: re-extract a group's stored episodes with the configured LLM into a shadow "
        "graph while searches keep using the live one; dry_run predicts the cost first. Then "
        "compare, promote (replaces the group's extracted entities and facts; cannot be "
        "undone) or discard the run. Name exactly one of group_id, promote, discard, compare.",
        ReextractArgs,
        "reextract",
        destructive=True,
        admin=True,
        audited=True,
    ),
    Tool(
        "recover_soft_deleted",
        "Recover a soft-deleted memory (entity or fact) by uuid before it is purged; it "
        "becomes ACTIVE again.",
        UuidArgs,
        "recover_soft_deleted",
        audited=True,
    ),
    Tool(
        "list_groups",
        "The groups (namespaces) you may use, with their episode, entity and fact counts.",
        ListGroupsArgs,
        "list_groups",
        read_only=True,
    ),
    Tool(
        "add_token",
        "Admin: create an API token for some groups (optionally read-only, or admin). The "
        "token is in the answer once; only its hash is stored.",
        AddTokenArgs,
        "add_token",
        admin=True,
        audited=True,
    ),
    Tool(
        "list_tokens",
        "Admin: the API tokens (names, groups, scopes, created and last used; never a token).",
        NoArgs,
        "list_tokens",
        read_only=True,
        admin=True,
    ),
    Tool(
        "revoke_token",
        "Admin: revoke an API token by name; a running service refuses it within seconds.",
        TokenNameArgs,
        "revoke_token",
        admin=True,
        audited=True,
    ),
)

TOOLS += (
    Tool(
        "get_group_stats",
        "Per group: episodes, entities, facts (and how many are current), passages, the "
        "extraction queue by state, the last activity and today's LLM cost in USD.",
        ListGroupsArgs,
        "pages.get_group_stats",
        read_only=True,
    ),
    Tool(
        "list_episodes",
        "A group's episodes by when they happened (reference_time), latest first, paged: "
        "name, source, status and a preview of each. Read one whole with get_episode.",
        GroupPageArgs,
        "pages.list_episodes",
        read_only=True,
    ),
    Tool(
        "get_episode",
        "One episode whole (its body and status) with its passages and the entities it mentions.",
        UuidArgs,
        "pages.get_episode",
        read_only=True,
    ),
    Tool(
        "list_facts",
        "A group's facts, current and superseded (state), paged, latest valid first: each "
        "with its validity, its endpoints and the episode it came from.",
        ListFactsArgs,
        "pages.list_facts",
        read_only=True,
    ),
    Tool(
        "list_entities",
        "A group's entities by name, paged (optionally those whose name contains a text), "
        "with their summaries and how many facts touch each.",
        ListEntitiesArgs,
        "pages.list_entities",
        read_only=True,
    ),
    Tool(
        "get_entity",
        "One entity with its neighbourhood: the facts that touch it (current first), the "
        "entities at their other ends and the episodes that mention it.",
        GetEntityArgs,
        "pages.get_entity",
        read_only=True,
    ),
    Tool(
        "delete_entity",
        "Delete one entity by uuid, with every fact that touches it. Cannot be undone; the "
        "episodes that mention it stay.",
        UuidArgs,
        "delete_entity",
        destructive=True,
    ),
)

TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}


def get_tool(name: str) -> Tool:
    try:
        return TOOLS_BY_NAME[name]
    except KeyError:
        raise NotFound(f"no tool named {name!r}; tools: {', '.join(TOOLS_BY_NAME)}") from None
