"""A deterministic, rule-based "LLM" for the fake chat-completions server.

It reads the prompt the workbench really sends and answers each structure the way a careful
model would for a small vocabulary: entities are the known names that occur in the CURRENT
EPISODE, facts come from a few sentence patterns, and an EXISTING FACT with the same source and
an exclusive relation (lives in, works at) but another target is invalidated.
"""

from __future__ import annotations

import re
from typing import Any

from workbench.fakes.chat_server import message_text, structure_name

KNOWN = {
    "Maria Keller": "Person",
    "Tom": "Person",
    "User": "Person",
    "Acme": "Organization",
    "Globex": "Organization",
    "Berlin": "Place",
    "Munich": "Place",
    "Neovim": "Tool",
    "VS Code": "Tool",
    "Atlas": "Project",
    "Python": "Tool",
}
PATTERNS = [
    (re.compile(r"(\w[\w ]*?) lives in (\w[\w ]*)"), "LIVES_IN", True),
    (re.compile(r"(\w[\w ]*?) moved to (\w[\w ]*)"), "LIVES_IN", True),
    (re.compile(r"(\w[\w ]*?) works at (\w[\w ]*)"), "WORKS_AT", True),
    (re.compile(r"(\w[\w ]*?) uses (\w[\w ]*)"), "USES", False),
    (re.compile(r"(\w[\w ]*?) leads (\w[\w ]*)"), "LEADS", False),
]
EXISTING = re.compile(r"^\[(\d+)\] (.+?) ([A-Z_]+) (.+?): ", re.M)


def episode_text(request: dict[str, Any]) -> str:
    text = message_text(request)
    return text.rsplit("CURRENT EPISODE", 1)[-1].split("):", 1)[-1]


def _entity(name: str, text: str) -> str | None:
    for known in KNOWN:
        if known.lower() in name.lower() and known in text:
            return known
    return None


def entities(text: str) -> dict[str, Any]:
    return {
        "entities": [
            {
                "name": n,
                "entity_type": t,
                "summary": f"{n} is mentioned: {text.strip()[:80]}",
                "importance": 4 if t == "Person" else 3,
                "stability": 3,
            }
            for n, t in KNOWN.items()
            if re.search(rf"\b{re.escape(n)}\b", text)
        ]
    }


def edges(request: dict[str, Any]) -> dict[str, Any]:
    text = episode_text(request)
    existing = EXISTING.findall(message_text(request).rsplit("EXISTING FACTS:", 1)[-1])
    out = []
    for sentence in re.split(r"[.!?]\s*", text):
        for pattern, relation, exclusive in PATTERNS:
            m = pattern.search(sentence)
            if not m:
                continue
            src, dst = _entity(m.group(1), text), _entity(m.group(2), text)
            if not src or not dst or src == dst:
                continue
            invalidates = [
                int(i)
                for i, s, r, t in existing
                if exclusive and s == src and r == relation and t != dst
            ]
            out.append(
                {
                    "source": src,
                    "target": dst,
                    "relation": relation,
                    "fact": f"{src} {relation.lower().replace('_', ' ')} {dst}.",
                    "importance": 3,
                    "stability": 4,
                    "invalidates": invalidates,
                }
            )
    return {"edges": out}


def respond(request: dict[str, Any]) -> dict[str, Any] | None:
    name = structure_name(request)
    if name == "ExtractedEntities":
        return entities(episode_text(request))
    if name == "ExtractedEdges":
        return edges(request)
    if name == "NodeResolutions":
        return {"entity_resolutions": []}
    return None
