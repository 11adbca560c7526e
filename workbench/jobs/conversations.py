"""Conversation exports read into conversations, cut into sessions: pure functions (the file
is read by :func:`read_records`, everything after it works on values).

Three forms (``FORMATS``), told apart by :func:`detect` or named by the caller:

* ``chatgpt``: ChatGPT's ``conversations.json``, a list of conversations, each a ``mapping``
  of nodes ``{message: {author: {role}, content: {parts}, create_time}, parent, children}``.
  The branch read is the one shown last: from ``current_node`` up through the parents (without
  ``current_node``, from the root down through each node's last child). System and tool
  messages, and parts that are not text (images, files), are left out.
* ``claude``: Claude's ``conversations.json``, a list of ``{uuid, name, created_at,
  chat_messages: [{sender, text | content: [{type: "text", text}], created_at}]}``.
* ``jsonl``: one message a line, ``{"conversation_id", "role" | "speaker", "text", "time"}``
  (``title`` optional, ``time`` ISO 8601 or epoch seconds, optional); a conversation's lines
  in the order they were said, conversations possibly interleaved.

A conversation becomes one or more **sessions** (:func:`sessions`): a new one starts where two
consecutive messages are more than ``gap_hours`` apart (0: never), or where the next message
would take the session's text past ``max_chars`` (a single longer message is cut into turns of
the same speaker). Each session is the body of one ``message`` episode: a ``speaker: text``
line a message, its whitespace folded to single spaces (so a line of the message is never
read as another speaker). Problems are reported by position (``conversation 3``, ``line
12``) and the rest goes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from workbench.errors import InvalidInput

__all__ = [
    "FORMATS",
    "Conversation",
    "Message",
    "Session",
    "decode_line",
    "detect",
    "is_conversations",
    "parse",
    "read_records",
    "sessions",
]

FORMATS = ("chatgpt", "claude", "jsonl")
GAP_HOURS = 6.0  # default session gap
ROLES = {"human": "user", "user": "user", "assistant": "assistant", "model": "assistant"}
_SKIPPED_ROLES = {"system", "tool", "function", "critic"}


@dataclass(frozen=True)
class Message:
    speaker: str
    text: str
    time: datetime | None = None


@dataclass(frozen=True)
class Conversation:
    """One conversation of an export: its id (stable across exports), title, where it was
    in the file (for messages), when it began (when known) and its messages in order."""

    key: str
    title: str
    position: str
    messages: tuple[Message, ...]
    created: datetime | None = None


@dataclass(frozen=True)
class Session:
    """A piece of a conversation that becomes one episode (``index`` from 0)."""

    conversation: Conversation
    index: int
    count: int  # sessions of its conversation
    messages: tuple[Message, ...]

    @property
    def name(self) -> str:
        title = self.conversation.title or self.conversation.key
        return title if self.count == 1 else f"{title} (part {self.index + 1}/{self.count})"

    @property
    def body(self) -> str:
        return "\n".join(f"{m.speaker}: {m.text}" for m in self.messages)

    @property
    def reference_time(self) -> datetime | None:
        times = [m.time for m in self.messages if m.time is not None]
        return times[0] if times else self.conversation.created


# --- reading ------------------------------------------------------------------------------
def read_records(path: str | Path) -> tuple[list[Any], bool]:
    """The records of an export file: a JSON list's items (``True``: numbered as
    conversations) or a JSON-lines file's lines (``False``: numbered as lines; a line that is
    not JSON is kept as a string, reported by :func:`parse`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InvalidInput(f"{path} cannot be read: {exc.strerror or exc}") from None
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput(
                f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
            ) from None
        return list(records), True
    return [decode_line(raw) for raw in text.splitlines()], False


def decode_line(raw: Any) -> Any:
    """A line's JSON value (a line that is not JSON stays a string: :func:`parse` reports
    it; a value that is not a string is taken as it is)."""
    if not isinstance(raw, str):
        return raw
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def is_conversations(path: str | Path) -> bool:
    """Whether a file looks like a conversation export rather than the entities-and-facts
    import format: a JSON list (an export's ``conversations.json``), or JSON lines whose first
    object has a ``text`` and a ``role`` or ``speaker``, not a ``type``."""
    path = Path(path)
    if not path.is_file() or path.suffix.lower() == ".parquet":
        return False
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as file:
            for raw in file:
                if raw.strip():
                    if raw.lstrip().startswith("["):
                        return True
                    record = decode_line(raw)
                    return isinstance(record, dict) and detect([record]) == "jsonl"
    except OSError:
        return False
    return False


def detect(records: Iterable[Any]) -> str | None:
    """The format of these records (the first that is an object decides), or None."""
    for record in records:
        if not isinstance(record, dict):
            continue
        if "mapping" in record:
            return "chatgpt"
        if "chat_messages" in record:
            return "claude"
        if ("role" in record or "speaker" in record) and "text" in record and "type" not in record:
            return "jsonl"
        return None
    return None


def parse(records: list[Any], fmt: str, first: int = 1) -> tuple[list[Conversation], list[str]]:
    """The conversations of ``records`` in ``fmt``, and a message for each one left out (by
    position, numbered from ``first``)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"'format' must be one of {', '.join(FORMATS)}")
    if fmt == "jsonl":
        return _generic(records, first)
    read = _chatgpt if fmt == "chatgpt" else _claude
    found: list[Conversation] = []
    problems: list[str] = []
    for number, record in enumerate(records, first):
        position = f"conversation {number}"
        try:
            conversation = read(record, position)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problems.append(f"{position}: {_reason(exc)}; skipped")
            continue
        if conversation.messages:
            found.append(conversation)
        else:
            problems.append(f"{position} ({conversation.key}): no text messages; skipped")
    return found, problems


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


# --- ChatGPT ------------------------------------------------------------------------------
def _chatgpt(record: Any, position: str) -> Conversation:
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    mapping = record["mapping"]
    if not isinstance(mapping, dict):
        raise ValueError("'mapping' is not an object")
    key = str(record.get("conversation_id") or record.get("id") or "")
    if not key:
        raise ValueError("no 'conversation_id' or 'id'")
    messages = []
    for node_id in _branch(mapping, record.get("current_node")):
        message = (mapping.get(node_id) or {}).get("message")
        if message:
            said = _chatgpt_message(message)
            if said is not None:
                messages.append(said)
    created = _time(record.get("create_time"))
    return Conversation(key, str(record.get("title") or ""), position, tuple(messages), created)


def _branch(mapping: dict[str, Any], current: Any) -> list[str]:
    """The node ids of the branch shown, root first."""
    if current is not None:
        if current not in mapping:
            raise ValueError(f"'current_node' {current!r} is not in 'mapping'")
        path, seen = [], set()
        node: Any = current
        while node is not None:
            if node in seen:
                raise ValueError("'mapping' has a cycle of parents")
            seen.add(node)
            path.append(node)
            node = (mapping.get(node) or {}).get("parent")
        return path[::-1]
    roots = [k for k, v in mapping.items() if not (v or {}).get("parent")]
    path = []
    node = roots[0] if roots else None
    while node is not None and node not in path and node in mapping:
        path.append(node)
        children = (mapping[node] or {}).get("children") or []
        node = children[-1] if children else None
    return path


def _chatgpt_message(message: dict[str, Any]) -> Message | None:
    role = ((message.get("author") or {}).get("role") or "").lower()
    if role in _SKIPPED_ROLES or (message.get("metadata") or {}).get(
        "is_visually_hidden_from_conversation"
    ):
        return None
    content = message.get("content") or {}
    parts = content.get("parts")
    if parts is None and isinstance(content.get("text"), str):
        parts = [content["text"]]
    text = _folded(" ".join(p for p in parts or [] if isinstance(p, str)))
    if not text:
        return None
    return Message(ROLES.get(role, role or "unknown"), text, _time(message.get("create_time")))


# --- Claude -------------------------------------------------------------------------------
def _claude(record: Any, position: str) -> Conversation:
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    key = str(record.get("uuid") or "")
    if not key:
        raise ValueError("no 'uuid'")
    chat = record["chat_messages"]
    if not isinstance(chat, list):
        raise ValueError("'chat_messages' is not a list")
    messages = []
    for item in chat:
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            text = " ".join(
                str(c.get("text") or "")
                for c in item.get("content") or []
                if isinstance(c, dict) and c.get("type") == "text"
            )
        text = _folded(text)
        if text:
            sender = str(item.get("sender") or "unknown").lower()
            messages.append(Message(ROLES.get(sender, sender), text, _time(item.get("created_at"))))
    created = _time(record.get("created_at"))
    return Conversation(key, str(record.get("name") or ""), position, tuple(messages), created)


# --- generic JSON lines -------------------------------------------------------------------
def _generic(records: list[Any], first: int) -> tuple[list[Conversation], list[str]]:
    by_key: dict[str, list[Message]] = {}
    titles: dict[str, str] = {}
    starts: dict[str, int] = {}
    problems: list[str] = []
    for number, record in enumerate(records, first):
        if record is None:
            continue
        try:
            key, message, title = _generic_line(record)
        except (TypeError, ValueError) as exc:
            problems.append(f"line {number}: {exc}; skipped")
            continue
        starts.setdefault(key, number)
        by_key.setdefault(key, []).append(message)
        if title and key not in titles:
            titles[key] = title
    found = [
        Conversation(key, titles.get(key, ""), f"line {starts[key]}", tuple(messages))
        for key, messages in by_key.items()
    ]
    return found, problems


def _generic_line(record: Any) -> tuple[str, Message, str]:
    if isinstance(record, str):
        raise ValueError("not valid JSON")
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    key = record.get("conversation_id", record.get("conversation"))
    if key is None or not str(key).strip():
        raise ValueError("no 'conversation_id'")
    speaker = record.get("speaker") or record.get("role")
    if not isinstance(speaker, str) or not speaker.strip():
        raise ValueError("no 'role' or 'speaker'")
    text = record.get("text")
    if not isinstance(text, str) or not _folded(text):
        raise ValueError("no 'text'")
    speaker = " ".join(speaker.replace(":", " ").split())
    time = _time(record.get("time"))
    if record.get("time") is not None and time is None:
        raise ValueError(f"'time' {record['time']!r} is not ISO 8601 or epoch seconds")
    title = record.get("title")
    message = Message(ROLES.get(speaker.lower(), speaker), _folded(text), time)
    return str(key), message, str(title) if title else ""


# --- sessions -----------------------------------------------------------------------------
def sessions(
    conversation: Conversation, gap_hours: float = GAP_HOURS, max_chars: int = 50_000
) -> list[Session]:
    """The sessions of a conversation (see the module doc)."""
    groups: list[list[Message]] = []
    size = 0
    last: datetime | None = None
    for message in _fitted(conversation.messages, max_chars):
        line = len(message.speaker) + len(message.text) + 3
        gap = (
            gap_hours > 0
            and last is not None
            and message.time is not None
            and (message.time - last).total_seconds() > gap_hours * 3600
        )
        if not groups or gap or size + line > max_chars:
            groups.append([])
            size = 0
        groups[-1].append(message)
        size += line
        last = message.time or last
    return [Session(conversation, i, len(groups), tuple(g)) for i, g in enumerate(groups)]


def _fitted(messages: Iterable[Message], max_chars: int) -> Iterator[Message]:
    """Messages, one longer than a session may hold cut into several of the same speaker."""
    for message in messages:
        room = max(max_chars - len(message.speaker) - 3, 1)
        if len(message.text) <= room:
            yield message
            continue
        for start in range(0, len(message.text), room):
            yield Message(message.speaker, message.text[start : start + room], message.time)


# --- values -------------------------------------------------------------------------------
def _folded(text: Any) -> str:
    return " ".join(str(text or "").split())


def _time(value: Any) -> datetime | None:
    """An ISO 8601 text or epoch seconds as an aware UTC time; None when missing or unreadable
    (a message without a time belongs to the session it follows)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(float(value), UTC)
        if isinstance(value, str) and value.strip():
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None
