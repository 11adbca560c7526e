"""The latest processed episodes of each group, kept in memory: extraction's context.

Extraction shows the LLM an episode's previous episodes: the group's latest processed ones up
to the episode's reference time (:func:`workbench.store.graph.recent_episodes`). In SQL that
read is a scan of the group's whole history (DuckDB has no ordered index), so it grew with the
history (figures in ``docs/performance.md``, "A store that has grown"). Here each group keeps
its latest ``keep`` processed episodes, read once per group, then kept up to date by the
writes.

The answer is the same as the SQL one. A group's list is always the first ``keep`` of its
processed episodes in the SQL's order (reference time newest first, then uuid); ``complete``
says it holds all of them. An episode's context is the first ``k`` entries of that list at or
before its reference time; when fewer than ``k`` qualify and the list is not complete (an
episode older than the ones kept), the caller's exact ``fallback`` answers.

Whatever removes or un-processes episodes outside :meth:`add` (deleting an episode, clearing
a group) must call :meth:`forget` for their groups: the group is read again when next needed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# load(group_ids, keep) -> per group its first ``keep`` processed episodes, in SQL order
LoadFn = Callable[[list[str], int], dict[str, list[dict[str, Any]]]]
# fallback(episode) -> that episode's context, read exactly
FallbackFn = Callable[[Mapping[str, Any]], list[dict[str, Any]]]


def _in_order(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SQL order: reference time descending, then uuid ascending (a stable sort keeps
    the uuid order among equal times, reversed or not)."""
    by_uuid = sorted(entries, key=lambda e: e["uuid"])
    return sorted(by_uuid, key=lambda e: e["reference_time"], reverse=True)


@dataclass
class _Group:
    entries: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False


class RecentEpisodes:
    """Per group, its latest ``keep`` processed episodes (uuid, name, body, reference_time)."""

    def __init__(self, keep: int, max_groups: int = 1024):
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.keep = keep
        self.max_groups = max_groups
        self._groups: OrderedDict[str, _Group] = OrderedDict()
        self._lock = threading.Lock()
        self._version = 0  # bumped by every change: a load that raced one is not kept
        self.loads = 0  # groups read from the store (for tests and benchmarks)
        self.fallbacks = 0  # episodes answered by the exact fallback

    def contexts(
        self, episodes: Sequence[Mapping[str, Any]], k: int, load: LoadFn, fallback: FallbackFn
    ) -> dict[str, list[dict[str, Any]]]:
        """Per episode uuid its context: up to ``k`` (at most ``keep``) of its group's processed
        episodes at or before its reference time, itself excluded, newest first."""
        k = min(k, self.keep)
        with self._lock:
            missing = sorted({e["group_id"] for e in episodes} - self._groups.keys())
            version = self._version
        if missing:
            loaded = load(missing, self.keep)
            with self._lock:
                if self._version == version:  # nothing was added or forgotten meanwhile
                    for group_id in missing:
                        rows = loaded.get(group_id, [])
                        self._put(group_id, _Group(list(rows), len(rows) < self.keep))
        out: dict[str, list[dict[str, Any]]] = {}
        for episode in episodes:
            found = self._lookup(episode, k)
            if found is None:
                with self._lock:
                    self.fallbacks += 1
                found = fallback(episode)
            out[episode["uuid"]] = found
        return out

    def _lookup(self, episode: Mapping[str, Any], k: int) -> list[dict[str, Any]] | None:
        with self._lock:
            group = self._groups.get(episode["group_id"])
            if group is None:  # evicted or forgotten since the load: read exactly
                return None
            self._groups.move_to_end(episode["group_id"])
            before = episode["reference_time"]
            found = [
                dict(e)
                for e in group.entries
                if e["reference_time"] <= before and e["uuid"] != episode["uuid"]
            ][:k]
            if len(found) < k and not group.complete:
                return None
            return found

    def add(self, group_id: str, entries: Iterable[dict[str, Any]]) -> None:
        """Episodes of the group that were just processed (after their commit)."""
        with self._lock:
            self._version += 1
            group = self._groups.get(group_id)
            if group is None:  # not read yet: the first need reads them from the store
                return
            merged = {e["uuid"]: e for e in group.entries}
            merged.update({e["uuid"]: e for e in entries})
            ordered = _in_order(merged.values())
            group.complete = group.complete and len(ordered) <= self.keep
            group.entries = ordered[: self.keep]

    def forget(self, group_ids: Iterable[str]) -> None:
        """Episodes of these groups were deleted: read the groups again when needed."""
        with self._lock:
            self._version += 1
            for group_id in group_ids:
                self._groups.pop(group_id, None)

    def _put(self, group_id: str, group: _Group) -> None:
        self.loads += 1
        self._groups[group_id] = group
        self._groups.move_to_end(group_id)
        while len(self._groups) > self.max_groups:
            self._groups.popitem(last=False)
