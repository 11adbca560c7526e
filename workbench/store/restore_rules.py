"""What a restored backup's rows must satisfy: the input rules ``add_memory`` and the import
apply, so a backup (edited, crafted, or from a buggy writer) cannot bring in what no tool
would have accepted.

* every text column holds no NUL character (PostgreSQL cannot store one);
* every ``group_id`` is a valid group name (:data:`workbench.names.GROUP_ID_RULE`);
* an episode's ``name`` holds at most ``MAX_NAME`` characters, its ``body`` at most the
  configured maximum (``SVC_KNOWLEDGE_MAX_EPISODE_CHARS``) and its ``source`` is one of
  ``text``, ``message``, ``json``;
* a fact's endpoints are entities the backup holds (no dangling fact);
* a re-extraction run's id has the form a run id has (its shadow's file name derives from it).

Each broken rule is reported by table file and row position (from 1), at most
:data:`SHOWN` of them, with their total: :class:`~workbench.errors.InvalidInput`, and nothing
is restored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import InvalidInput
from workbench.names import GROUP_ID_RULE, is_group_id
from workbench.store.reextract import RUN_ID

if TYPE_CHECKING:
    import pyarrow as pa

SHOWN = 10  # broken rows a refusal names
MAX_NAME = 500  # an episode name's characters (as add_memory)
SOURCES = ("text", "message", "json")


@dataclass
class RowProblems:
    """The broken rows found so far (the first :data:`SHOWN`, and how many in all)."""

    max_body_chars: int | None = None
    shown: list[str] = field(default_factory=list)
    total: int = 0

    def add(self, table: str, position: int, what: str) -> None:
        self.total += 1
        if len(self.shown) < SHOWN:
            self.shown.append(f"{table}.parquet row {position}: {what}")

    def check_batch(self, table: str, batch: pa.RecordBatch, first: int) -> None:
        """The rules of one batch of ``table`` whose first row is at ``first`` (from 1)."""
        import pyarrow as pa

        for name in batch.schema.names:
            column = batch.column(name)
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                self._text_rules(table, name, column, first)
        if table == "episodes":
            self._episode_rules(batch, first)
        if table == "reextract_runs" and "run_id" in batch.schema.names:
            for i, value in enumerate(batch.column("run_id").to_pylist()):
                if not (isinstance(value, str) and RUN_ID.fullmatch(value)):
                    self.add(table, first + i, f"run_id {str(value)[:60]!r} is no run id")

    def _text_rules(self, table: str, name: str, column: pa.Array, first: int) -> None:
        import pyarrow.compute as pc

        for i in _true(pc.match_substring(column, "\x00")):
            self.add(table, first + i, f"'{name}' contains a NUL character (U+0000)")
        if name == "group_id":
            for i, value in enumerate(column.to_pylist()):
                if value is not None and not is_group_id(value):
                    self.add(table, first + i, f"group_id {value[:60]!r} is not valid: "
                             f"{GROUP_ID_RULE}")  # fmt: skip

    def _episode_rules(self, batch: pa.RecordBatch, first: int) -> None:
        import pyarrow.compute as pc

        names = batch.schema.names
        if "name" in names:
            for i in _true(pc.greater(pc.utf8_length(batch.column("name")), MAX_NAME)):
                self.add("episodes", first + i, f"'name' has more than {MAX_NAME} characters")
        if "body" in names and self.max_body_chars is not None:
            most = self.max_body_chars
            for i in _true(pc.greater(pc.utf8_length(batch.column("body")), most)):
                self.add("episodes", first + i, f"'body' has more than {most} characters "
                         "(SVC_KNOWLEDGE_MAX_EPISODE_CHARS)")  # fmt: skip
        if "source" in names:
            for i, value in enumerate(batch.column("source").to_pylist()):
                if value not in SOURCES:
                    self.add("episodes", first + i, f"'source' {str(value)[:30]!r} is not one "
                             f"of {', '.join(SOURCES)}")  # fmt: skip

    def check_facts(self, files: dict[str, Path]) -> None:
        """Every fact's endpoints are entities of the backup."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        if "facts" not in files:
            return
        entities = (
            pq.read_table(files["entities"], columns=["uuid"]).column("uuid")
            if "entities" in files
            else None
        )
        facts = pq.read_table(files["facts"], columns=["uuid", "source_uuid", "target_uuid"])
        for end in ("source_uuid", "target_uuid"):
            column = facts.column(end)
            known = (
                pc.is_in(column, value_set=entities.combine_chunks())
                if entities is not None
                else pc.is_null(column)
            )
            for i in _true(pc.invert(known)):
                self.add("facts", i + 1, f"'{end}' names no entity of the backup (a dangling "
                         "fact)")  # fmt: skip

    def raise_any(self, folder: Path) -> None:
        if self.total:
            more = f" (and {self.total - len(self.shown)} more)" if self.total > SHOWN else ""
            raise InvalidInput(
                f"the backup {folder} holds {self.total} rows no tool would accept{more}; "
                "nothing was restored:\n  " + "\n  ".join(self.shown)
            )


def _true(mask: Any) -> list[int]:
    """The positions (from 0) where a boolean array is true."""
    import pyarrow.compute as pc

    return [int(i) for i in pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()]
