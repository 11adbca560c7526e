"""SQL of access tracking: one batched UPDATE per memory kind for the hits of many searches.

A search that returns a memory counts as an access (``docs/decay.md``): ``last_accessed_at`` becomes
the access time, ``access_count`` grows, ``decay_score`` is reset to 0 (the decay formula at
zero days since the last access), and a DORMANT or ARCHIVED memory becomes ACTIVE.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from workbench.store import Store

__all__ = ["apply_accesses", "REACTIVATED_FROM"]

REACTIVATED_FROM = ("DORMANT", "ARCHIVED")

_TABLES = {"entity": "entities", "fact": "facts", "passage": "passages"}
_names = itertools.count()


def apply_accesses(
    store: Store,
    kind: str,
    uuids: Sequence[str],
    accessed_at: Sequence[datetime],
    counts: Sequence[int],
) -> None:
    """Record accesses of memories of ``kind``: one row per uuid with its latest access time
    and the number of accesses since the previous flush. Unknown uuids are ignored."""
    if not uuids:
        return
    table = _TABLES[kind]
    frame = pa.table(
        {
            "uuid": pa.array(list(uuids), pa.string()),
            "accessed_at": pa.array(list(accessed_at), pa.timestamp("us", tz="UTC")),
            "n": pa.array(list(counts), pa.int64()),
        }
    )
    name = f"_access_{kind}_{next(_names)}"
    reactivate = ", ".join(f"'{s}'" for s in REACTIVATED_FROM)
    with store.transaction():
        store.register(name, frame)
        try:
            store.execute(
                f"UPDATE {table} AS m SET "
                "last_accessed_at = greatest(coalesce(m.last_accessed_at, a.accessed_at), "
                "a.accessed_at), "
                "access_count = m.access_count + a.n, "
                "decay_score = 0.0, "
                f"lifecycle_state = CASE WHEN m.lifecycle_state IN ({reactivate}) "
                "THEN 'ACTIVE' ELSE m.lifecycle_state END "
                f"FROM {name} AS a WHERE m.uuid = a.uuid"
            )
        finally:
            store.unregister(name)
