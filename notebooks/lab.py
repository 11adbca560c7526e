"""Shared set-up for the notebooks in this folder (not part of the package).

The notebooks hold no logic of their own: they call ``workbench`` and, through this module,
open a workbench whose LLM is chosen by configuration:

* ``WORKBENCH_NOTEBOOK_LLM=configured`` — the LLM the environment / the repository's ``.env``
  configures (``SVC_KNOWLEDGE_COMPAT_BASE_URL`` and ``SVC_KNOWLEDGE_MODEL_NAME``);
* ``WORKBENCH_NOTEBOOK_LLM=recorded`` — offline: the fake chat-completions server of
  ``workbench/fakes/chat_server.py`` (real HTTP on 127.0.0.1, real wire format) answering from the
  labelled set ``data/extraction_labelled.jsonl``, i.e. the answers a careful model gives;
* ``auto`` (the default) — ``configured`` when an LLM is configured, else ``recorded``.

The recorded fake bills as ``gpt-4o-mini`` would (its token counts are the real prompt sizes
/ 4), and it behaves like a provider with automatic prefix caching: a system prompt it has seen
before is reported as cached input when it is at least 1,024 tokens long (the minimum the
spec gives for a cache marker to take effect). The embedder is always the local model.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench import Workbench, load_settings
from workbench.clock import utcnow
from workbench.eval.extraction import LabelledEpisode, load_labelled, loose_name_key
from workbench.fakes.chat_server import FakeLLMServer, FakeReply, message_text, structure_name

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


RECORDED_MODEL = "gpt-4o-mini"
CACHE_MIN_TOKENS = 1024
ENTITY_SCORES = {
    "Person": (4, 4),
    "Organization": (3, 4),
    "Place": (3, 4),
    "Project": (3, 3),
    "Tool": (2, 3),
    "Preference": (3, 4),
    "Event": (2, 2),
    "Concept": (3, 3),
}
FACT_SCORES = {
    "PARTNER_OF": (5, 5),
    "LIVES_IN": (4, 3),
    "WORKS_AT": (4, 3),
    "REPORTS_TO": (3, 3),
    "PREFERS": (3, 4),
    "DISLIKES": (3, 4),
    "USES": (2, 3),
    "ATTENDS": (2, 1),
    "SPEAKS_AT": (3, 1),
    "ABOUT": (2, 2),
    "LOCATED_IN": (2, 5),
}
USERS = {"Alex Morgan", "Nadia Okafor", "Aiko Tanaka"}  # the people the notes are about

_embedder_lock = threading.Lock()
_embedder: Any = None


def shared_embedder():
    """One local embedder per kernel (loading the model takes seconds). Offline: the model
    comes from its installed package; loading progress bars and deprecation chatter are
    silenced so that the rendered notebooks show results, not logs."""
    global _embedder
    with _embedder_lock:
        if _embedder is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            warnings.filterwarnings("ignore", category=FutureWarning)
            try:
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                hf_logging.set_verbosity_error()
            except ImportError:  # pragma: no cover - transformers comes with the embedder
                pass
            from workbench.embedding import build_embedder

            _embedder = build_embedder(load_settings(environ={}))
        return _embedder


def sample_episodes() -> list[dict]:
    with open(DATA / "sample_episodes.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def labelled_set() -> list[LabelledEpisode]:
    return load_labelled(DATA / "extraction_labelled.jsonl")


# --- the recorded-responses fake ---------------------------------------------------------
class LabelledResponder:
    """Answers the extraction prompts from the labelled set (see the module docstring).

    ``drop_every=k`` drops every k-th entity and fact and turns another fact in every k into
    ``RELATES_TO``: a deliberately worse "model", so that a comparison has something to find.
    """

    def __init__(self, labelled: list[LabelledEpisode], drop_every: int = 0):
        self.labelled = labelled
        self.drop_every = drop_every
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, request: dict) -> FakeReply | None:
        answer = {
            "ExtractedEntities": self._entities,
            "ExtractedEdges": self._edges,
            "NodeResolutions": self._resolutions,
            "MemoryClassifications": self._classifications,
        }.get(structure_name(request) or "")
        if answer is None:
            return None
        return FakeReply.ok(answer(request), cached_tokens=self._cached(request))

    def _cached(self, request: dict) -> int:
        """Automatic prefix caching: a system prompt seen before is read from the cache."""
        system = [m for m in request.get("messages") or [] if m.get("role") == "system"]
        key = json.dumps(system)
        with self._lock:
            hit = key in self._seen
            self._seen.add(key)
        tokens = len(key) // 4
        return tokens if hit and system and tokens >= CACHE_MIN_TOKENS else 0

    def _episode(self, request: dict) -> LabelledEpisode | None:
        current = _user_text(request).rsplit("CURRENT EPISODE", 1)[-1]
        return next((ep for ep in self.labelled if ep.episode_body in current), None)

    def _keep(self, index: int) -> bool:
        return not self.drop_every or (index + 1) % self.drop_every != 0

    def _entities(self, request: dict) -> dict:
        ep = self._episode(request)
        out = []
        for i, ent in enumerate(ep.gold.entities if ep else ()):
            if self._keep(i):
                imp, stab = (
                    (5, 5)
                    if ent.name in USERS
                    else ENTITY_SCORES.get(ent.entity_type or "", (3, 3))
                )
                out.append(
                    {
                        "name": ent.name,
                        "entity_type": ent.entity_type,
                        "summary": f"{ent.name} ({ent.entity_type}) in '{ep.name}'.",
                        "importance": imp,
                        "stability": stab,
                    }
                )
        return {"entities": out}

    def _edges(self, request: dict) -> dict:
        ep = self._episode(request)
        text = _user_text(request)
        listed = {
            loose_name_key(line[2:].rsplit(" (", 1)[0]): line[2:].rsplit(" (", 1)[0]
            for line in text.split("EXISTING FACTS:", 1)[0].splitlines()
            if line.startswith("- ")
        }
        ended = [f for f in (ep.gold.facts if ep else ()) if f.ended]
        edges = []
        for i, fact in enumerate(f for f in (ep.gold.facts if ep else ()) if not f.ended):
            src, dst = (
                listed.get(loose_name_key(fact.source)),
                listed.get(loose_name_key(fact.target)),
            )
            if not (src and dst and self._keep(i)):
                continue
            renamed = self.drop_every and (i + 2) % self.drop_every == 0
            relation = "RELATES_TO" if renamed else fact.relation
            imp, stab = FACT_SCORES.get(relation, (3, 3))
            edges.append(
                {
                    "source": src,
                    "target": dst,
                    "relation": relation,
                    "fact": fact.fact,
                    "valid_at": fact.valid_at,
                    "invalid_at": fact.invalid_at,
                    "importance": imp,
                    "stability": stab,
                    "invalidates": [],
                }
            )
        ids = _existing_ids(text, ended)
        if edges and ids:
            edges[0]["invalidates"] = ids
        return {"edges": edges}

    def _resolutions(self, request: dict) -> dict:
        answers, current = [], None
        for line in _user_text(request).splitlines():
            kind, _, rest = line.strip().partition(" id=")
            if kind not in ("NEW", "EXISTING"):
                continue
            ident, _, tail = rest.partition(": ")
            name = loose_name_key(tail.rsplit(" (", 1)[0] if " (" in tail else tail)
            if kind == "NEW":
                current = {"id": int(ident), "duplicate_of": None, "name": name}
                answers.append(current)
            elif current and current["duplicate_of"] is None and name == current["name"]:
                current["duplicate_of"] = int(ident)
        return {
            "entity_resolutions": [
                {"id": a["id"], "duplicate_of": a["duplicate_of"]} for a in answers
            ]
        }

    def _classifications(self, request: dict) -> dict:
        count = sum(1 for line in _user_text(request).splitlines() if line.startswith("MEMORY "))
        return {
            "classifications": [
                {"index": i, "importance": 3, "stability": 3} for i in range(1, count + 1)
            ]
        }


def _user_text(request: dict) -> str:
    """The text of the last user message (the system prompt is instructions only)."""
    users = [m for m in request.get("messages") or [] if m.get("role") == "user"]
    return message_text({"messages": users[-1:]})


def _existing_ids(text: str, ended: list) -> list[int]:
    """Ids of EXISTING FACTS lines that state one of the episode's ended facts."""
    if "EXISTING FACTS:" not in text:
        return []
    block = text.split("EXISTING FACTS:", 1)[1].split("CURRENT EPISODE", 1)[0]
    ids = []
    for line in block.splitlines():
        if not line.startswith("["):
            continue
        ident, _, rest = line[1:].partition("] ")
        head = loose_name_key(rest.split(": ", 1)[0])
        for fact in ended:
            wanted = loose_name_key(f"{fact.source} {fact.relation} {fact.target}")
            if head == wanted and ident.isdigit():
                ids.append(int(ident))
    return ids


# --- opening a workbench ------------------------------------------------------------------
@dataclass
class Lab:
    """A workbench plus what it runs on; ``close()`` stops both."""

    workbench: Workbench
    mode: str
    server: FakeLLMServer | None = None

    def close(self) -> None:
        self.workbench.close()
        if self.server is not None:
            self.server.stop()


def llm_mode(requested: str | None = None) -> str:
    mode = (requested or os.environ.get("WORKBENCH_NOTEBOOK_LLM") or "auto").lower()
    if mode not in ("auto", "recorded", "configured"):
        raise ValueError("WORKBENCH_NOTEBOOK_LLM must be auto, recorded or configured")
    if mode == "auto":
        configured = load_settings(env_file=ROOT / ".env").llm_configured
        mode = "configured" if configured else "recorded"
    return mode


def open_lab(
    db_path: str = ":memory:",
    llm: str | None = None,
    clock=utcnow,
    drop_every: int = 0,
    **overrides: Any,
) -> Lab:
    """A workbench on ``db_path`` with the local embedder and the LLM ``llm`` selects."""
    mode = llm_mode(llm)
    server = None
    settings = load_settings(env_file=ROOT / ".env", db_path=db_path, **overrides)
    if mode == "recorded":
        server = FakeLLMServer(model=RECORDED_MODEL).start()
        server.set_responder(LabelledResponder(labelled_set(), drop_every=drop_every))
        settings = settings.model_copy(
            update={
                "llm_provider": "compat",
                "model_name": RECORDED_MODEL,
                "compat_base_url": server.base_url,
                "llm_requests_per_minute": 0,
            }
        )
    workbench = Workbench.open(settings, embedder=shared_embedder(), clock=clock)
    return Lab(workbench, mode, server)


def variant(session: Lab, drop_every: int = 0, **overrides: Any):
    """(settings, server): another extraction variant for ``session``'s store, for
    ``workbench.reextraction(settings)``. Recorded: a second recorded fake (``drop_every`` as in
    :func:`open_lab`), to stop when done; configured: the LLM's settings with ``overrides``
    (another model, structured-output mode) and no server."""
    settings = session.workbench.settings.model_copy(update=overrides)
    if session.mode != "recorded":
        return settings, None
    server = FakeLLMServer(model=RECORDED_MODEL).start()
    server.set_responder(LabelledResponder(labelled_set(), drop_every=drop_every))
    return settings.model_copy(update={"compat_base_url": server.base_url}), server


def ingest(workbench: Workbench, episodes: list[dict], progress: bool = True) -> int:
    """``add_memory`` every episode, then process the queue inline; returns episodes done."""
    from tqdm.auto import tqdm

    for episode in tqdm(episodes, desc="add_memory", disable=not progress):
        workbench.add_memory(**episode)
    return workbench.process_pending()


def tables_of(workbench: Workbench):
    """A DuckDB connection with a view per table of ``workbench``'s store (a snapshot written
    to a temporary folder): what :func:`live_tables` gives for the live database."""
    import tempfile

    import duckdb

    folder = tempfile.mkdtemp(prefix="lab-tables-")
    con = duckdb.connect()
    for table, path in workbench.export_parquet(folder).items():
        literal = str(path).replace("'", "''")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{literal}')")
    return con


SEARCH_LIMITS = {"search_memory_facts": "max_facts", "search_memory_nodes": "max_nodes"}
SEARCH_RESULTS = {"search_memory_facts": "facts", "search_memory_nodes": "nodes"}


def live_search(
    query: str, max_results: int = 10, tool: str = "search_memory_facts", db_path=None
) -> list[dict]:
    """Search the live database with the tool ``tool``: through the running service that holds
    it (what any MCP client gets), or, when none does (a stdio-only user between sessions),
    the file itself, read-only, in this kernel (``service.client.live.search``)."""
    from service.client.live import search

    overrides = {"db_path": db_path} if db_path else {}
    settings = load_settings(env_file=ROOT / ".env", **overrides)
    arguments = {"query": query, SEARCH_LIMITS.get(tool, "max_results"): max_results}
    answer = search(settings, tool, arguments, embedder=_embedder_for(settings))
    return answer[SEARCH_RESULTS.get(tool, "results")]


def _embedder_for(settings):
    """The kernel's shared local embedder when ``settings`` ask for the default local model
    (loading one takes seconds), else None: the workbench builds the one they configure."""
    default = load_settings(environ={})
    same = (
        settings.embedder_kind == "local"
        and not settings.embedder_model
        and settings.local_embedder_model == default.local_embedder_model
    )
    return shared_embedder() if same else None


def live_tables(db_path: str | None = None):
    """A DuckDB connection over the live database: a fresh, consistent snapshot written by the
    running ``workbench serve`` that holds it, or the file itself (read-only) when none does.

        con = lab.live_tables()                      # SVC_KNOWLEDGE_DB_PATH or the default
        con.sql("SELECT status, count(*) FROM episodes GROUP BY 1").df()
    """
    from service.client.live import snapshot

    overrides = {"db_path": db_path} if db_path else {}
    return snapshot(load_settings(env_file=ROOT / ".env", **overrides))


# --- a variant on the user's own episodes -----------------------------------------------------
@dataclass
class LiveSample:
    """A sample of one group of the live database: its episodes (``add_memory`` arguments, in
    their original order), the entities and facts the live extraction made of them (``old``),
    and every entity of the group (what those facts name)."""

    group: str
    episodes: list[dict]
    old: tuple[list[dict], list[dict]]
    names: list[dict]


def live_sample(group: str | None = None, size: int = 8, db_path=None) -> LiveSample | None:
    """The ``size`` newest processed episodes of ``group`` (default: the group with the most)
    of the live database (:func:`live_tables`), with what its extraction made of them; None
    when there is no live database or it has no processed episode."""
    try:
        con = live_tables(db_path)
    except Exception as exc:  # noqa: BLE001 - no database here: the caller falls back
        warnings.warn(f"no live database to sample ({type(exc).__name__}: {exc})", stacklevel=2)
        return None
    try:
        return _sample(con, group, size)
    finally:
        con.close()


def _sample(con, group: str | None, size: int) -> LiveSample | None:
    def rows(sql: str, params: list) -> list[dict]:
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    if group is None:
        top = con.execute(
            "SELECT group_id FROM episodes WHERE status = 'done' GROUP BY group_id "
            "ORDER BY count(*) DESC, group_id LIMIT 1"
        ).fetchone()
        if top is None:
            return None
        group = top[0]
    episodes = rows(
        "SELECT * FROM episodes WHERE group_id = ? AND status = 'done' "
        "ORDER BY created_at DESC, uuid LIMIT ?",
        [group, size],
    )[::-1]
    if not episodes:
        return None
    uuids = [e["uuid"] for e in episodes]
    entities = rows(
        "SELECT * FROM entities WHERE uuid IN (SELECT entity_uuid FROM mentions "
        "WHERE list_contains(?, episode_uuid))",
        [uuids],
    )
    facts = rows("SELECT * FROM facts WHERE list_contains(?, episode_uuid)", [uuids])
    names = rows("SELECT * FROM entities WHERE group_id = ?", [group])
    arguments = [
        {
            "name": e["name"],
            "episode_body": e["body"],
            "group_id": group,
            "source": e["source"],
            "source_description": e["source_description"],
            "reference_time": e["reference_time"],
        }
        for e in episodes
    ]
    return LiveSample(group, arguments, (entities, facts), names)


def sample_variant(mode: str, **overrides: Any):
    """(settings, server): an extraction variant for a :class:`LiveSample`, on a scratch
    in-memory store (the live database is only read). Configured: the LLM's settings with
    ``overrides``; recorded: the rule-based fake (the labelled answers know only the labelled
    episodes), to stop when done."""
    from workbench.fakes import rule_llm

    settings = load_settings(env_file=ROOT / ".env", db_path=":memory:", **overrides)
    settings = settings.model_copy(update={"database_url": None})
    if mode != "recorded":
        return settings, None
    server = FakeLLMServer(model=RECORDED_MODEL).start()
    server.set_responder(rule_llm.respond)
    update = {
        "llm_provider": "compat",
        "model_name": RECORDED_MODEL,
        "compat_base_url": server.base_url,
        "llm_requests_per_minute": 0,
    }
    return settings.model_copy(update=update), server


def extract_sample(settings, sample: LiveSample) -> tuple[list[dict], list[dict]]:
    """The (entities, facts) the variant ``settings`` extracts from the sample's episodes, in
    a scratch in-memory workbench."""
    from workbench.store.reextract import group_graph

    workbench = Workbench.open(settings, embedder=shared_embedder())
    try:
        ingest(workbench, sample.episodes, progress=False)
        return group_graph(workbench.store, sample.group)
    finally:
        workbench.close()
