"""Faults of a PostgreSQL server, made by the server itself: what the driver then raises is
what it raises on the real fault (the same SQLSTATE over the wire, read by psycopg into its
own exception class), without filling a disk.

    with ServerFault(url, "53100"):    # every row written in the store's schema: disk_full
        ...
"""

from __future__ import annotations

from types import TracebackType

__all__ = ["DISK_FULL_MESSAGE", "ServerFault"]

# PostgreSQL's own words when a table file cannot grow
DISK_FULL_MESSAGE = 'could not extend file "base/16384/16385": No space left on device'
_FUNCTION = "wb_test_fault"


class ServerFault:
    """Until :meth:`clear`, every row inserted or updated in the schema of ``url`` (its
    ``search_path``) fails with ``sqlstate`` and ``message``: a ``BEFORE … FOR EACH ROW``
    trigger on each table raises it, so a statement that writes nothing still succeeds."""

    def __init__(self, url: str, sqlstate: str = "53100", message: str = DISK_FULL_MESSAGE):
        self.url = url
        self.sqlstate = sqlstate
        self.message = message

    def _tables(self, con) -> list[str]:
        rows = con.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
        return [name for (name,) in rows]

    def make(self) -> ServerFault:
        import psycopg

        message = self.message.replace("'", "''")
        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(
                f"CREATE OR REPLACE FUNCTION {_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION USING ERRCODE = '{self.sqlstate}', "
                f"MESSAGE = '{message}', HINT = 'Check free disk space.'; END $$"
            )
            for table in self._tables(con):
                con.execute(
                    f'CREATE TRIGGER {_FUNCTION} BEFORE INSERT OR UPDATE ON "{table}" '
                    f"FOR EACH ROW EXECUTE FUNCTION {_FUNCTION}()"
                )
        return self

    def clear(self) -> None:
        """The fault is gone (space freed)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as con:
            for table in self._tables(con):
                con.execute(f'DROP TRIGGER IF EXISTS {_FUNCTION} ON "{table}"')
            con.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}()")

    def __enter__(self) -> ServerFault:
        return self.make()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.clear()
