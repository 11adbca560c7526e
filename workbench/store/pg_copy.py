"""PostgreSQL's binary ``COPY`` format, written from an Arrow table column by column.

A bulk import writes rows of thousands at a time: one ``INSERT`` a row costs a round of the
statement's planning and triggers each, and psycopg's own ``write_row`` turns every value (and
every float of every vector: 384 a row) into text one at a time. Here each column is encoded
at once (numpy for numbers, times and vectors; one ``encode`` a text), and the rows are
joined into one payload for ``COPY … FROM STDIN (FORMAT BINARY)``: exact (the float32 vectors
as their bits, times as microseconds) and several times faster than either.

The format (PostgreSQL's ``COPY`` documentation): a header, then per row a 16-bit field count
and per field a 32-bit length (-1 for NULL) and the value in the type's binary form, then a
16-bit -1.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

__all__ = ["payload", "supported"]

HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"
NULL = b"\xff\xff\xff\xff"
FLOAT4_OID = 700
# microseconds from the Unix epoch to PostgreSQL's (2000-01-01)
PG_EPOCH_MICROS = 946_684_800 * 1_000_000

_TEXT = ("text", "character varying", "varchar")
_INTEGERS = {"smallint": ">i2", "integer": ">i4", "bigint": ">i8"}
_FLOATS = {"real": ">f4", "double precision": ">f8"}
_TIMES = ("timestamp with time zone", "timestamp without time zone")


def supported(pg_type: str) -> bool:
    """Whether a column of this type (``format_type``'s name) can be encoded here."""
    base = pg_type.split("(")[0]
    return (
        base in _TEXT
        or base in _INTEGERS
        or base in _FLOATS
        or base in _TIMES
        or base == "boolean"
        or pg_type == "real[]"
    )


def payload(frame: pa.Table, pg_types: Sequence[str]) -> bytes:
    """The whole ``COPY … (FORMAT BINARY)`` input of ``frame``'s rows, its columns in order
    of ``pg_types`` (the target columns' types, as ``format_type`` names them)."""
    n = frame.num_rows
    columns = [_encoder(t)(frame.column(i)) for i, t in enumerate(pg_types)]
    count = len(pg_types).to_bytes(2, "big")
    rows = itertools.chain.from_iterable(zip(itertools.repeat(count, n), *columns))
    return b"".join(itertools.chain((HEADER,), rows, (TRAILER,)))


def _encoder(pg_type: str) -> Callable[[pa.ChunkedArray], list[bytes]]:
    base = pg_type.split("(")[0]
    if base in _TEXT:
        return _texts
    if base in _INTEGERS:
        dtype = _INTEGERS[base]
        return lambda column: _fixed(column, dtype, lambda c: c)
    if base in _FLOATS:
        dtype = _FLOATS[base]
        return lambda column: _fixed(column, dtype, lambda c: c)
    if base in _TIMES:
        return lambda column: _fixed(column, ">i8", _micros_since_2000)
    if base == "boolean":
        return lambda column: _fixed(column, ">i1", lambda c: c.cast(pa.int8()))
    if pg_type == "real[]":
        return _float_arrays
    raise ValueError(f"no binary COPY encoding for a column of type {pg_type}")


def _texts(column: pa.ChunkedArray) -> list[bytes]:
    out = []
    for value in column.to_pylist():
        if value is None:
            out.append(NULL)
        else:
            data = str(value).encode()
            out.append(len(data).to_bytes(4, "big") + data)
    return out


def _micros_since_2000(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if not pa.types.is_timestamp(column.type):
        raise ValueError(f"a timestamp column is {column.type}")
    micros = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64())
    return pc.subtract(micros, PG_EPOCH_MICROS)


def _fixed(
    column: pa.ChunkedArray, dtype: str, convert: Callable[[pa.ChunkedArray], pa.ChunkedArray]
) -> list[bytes]:
    """A column of fixed-width values: length and big-endian value of every row built in
    one numpy array, then cut a row at a time (NULLs as -1)."""
    converted = convert(column)
    valid = np.asarray(pc.is_valid(converted).to_numpy(zero_copy_only=False), dtype=bool)
    values = np.asarray(pc.fill_null(converted, 0).to_numpy(zero_copy_only=False))
    width = np.dtype(dtype).itemsize
    cells = np.empty(len(values), dtype=[("length", ">i4"), ("value", dtype)])
    cells["length"] = width
    cells["value"] = values
    out = _cut(cells.tobytes(), 4 + width, len(values))
    for i in np.flatnonzero(~valid).tolist():
        out[i] = NULL
    return out


def _float_arrays(column: pa.ChunkedArray) -> list[bytes]:
    """A column of float32 vectors (a fixed-size list) as ``real[]`` values: each a
    one-dimension array header and (length 4, value) per element, all rows in one array."""
    array = column.combine_chunks()
    if not pa.types.is_fixed_size_list(array.type) or array.null_count:
        raise ValueError("vectors must be a fixed-size list column without NULLs")
    dim = array.type.list_size
    matrix: NDArray[np.float32] = np.asarray(
        array.flatten().to_numpy(zero_copy_only=False), dtype=np.float32
    ).reshape(-1, dim)
    words = np.empty((len(matrix), 6 + 2 * dim), dtype=">i4")
    words[:, 0] = 20 + 8 * dim  # the field's length: header (5 words) and the elements
    words[:, 1] = 1  # dimensions
    words[:, 2] = 0  # no NULLs
    words[:, 3] = FLOAT4_OID
    words[:, 4] = dim
    words[:, 5] = 1  # lower bound
    words[:, 6::2] = 4
    words[:, 7::2] = matrix.astype(">f4").view(">i4")
    return _cut(words.tobytes(), words.shape[1] * 4, len(matrix))


def _cut(data: bytes, width: int, n: int) -> list[bytes]:
    return [data[i : i + width] for i in range(0, width * n, width)]
