"""pgbinary: Arrow -> PostgreSQL binary COPY, exact for every type types.py produces.

Each test COPYs the encoded stream into a real PostgreSQL table of the matching types and
reads it back; exactness is never traded for speed.
"""

from __future__ import annotations

import math
import random
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from s3rs_assets.load.pgbinary import HEADER, TRAILER, binary_chunks, encode_column

#: (name, Arrow type, PostgreSQL type, values); every type in types.py's mapping
EDGES: list[tuple[str, pa.DataType, str, list[Any]]] = [
    ("i16", pa.int16(), "smallint", [-32768, 32767, 0, None]),
    ("i32", pa.int32(), "integer", [-(2**31), 2**31 - 1, 0, None]),
    ("i64", pa.int64(), "bigint", [-(2**63), 2**63 - 1, 0, None]),
    ("b", pa.bool_(), "boolean", [True, False, None, True]),
    ("f4", pa.float32(), "real", [-0.0, float("inf"), float("nan"), None]),
    ("f8", pa.float64(), "double precision", [-0.0, 0.1 + 0.2, float("-inf"), None]),
    ("d", pa.date32(), "date", [date(1000, 1, 1), date(9999, 12, 31), date(1970, 1, 1), None]),
    (
        "ts",
        pa.timestamp("us"),
        "timestamp",
        [
            datetime(9999, 12, 31, 23, 59, 59, 999999),
            datetime(1000, 1, 1, 0, 0, 0, 1),
            datetime(1999, 12, 31, 23, 59, 59, 999999),
            None,
        ],
    ),
    (
        "n38_4",
        pa.decimal128(38, 4),
        "numeric(38,4)",
        [Decimal("9" * 34 + ".9999"), Decimal("-" + "9" * 34 + ".9999"), Decimal("-0.0001"), None],
    ),
    (
        "n38_38",
        pa.decimal128(38, 38),
        "numeric(38,38)",
        [Decimal("0." + "9" * 38), Decimal("-0." + "0" * 37 + "1"), Decimal("0E-38"), None],
    ),
    ("n38_0", pa.decimal128(38, 0), "numeric(38,0)", [Decimal("9" * 38), Decimal(-1), None, 0]),
    (
        "n20_0",
        pa.decimal128(20, 0),
        "numeric(20,0)",
        [Decimal(18446744073709551615), Decimal(0), Decimal(1), None],
    ),
    (
        "n18_4",
        pa.decimal128(18, 4),
        "numeric(18,4)",
        [Decimal("12345678901234.5678"), Decimal("-0.0000"), Decimal("-12345678901234.5678"), None],
    ),
    (
        "n18_8",
        pa.decimal128(18, 8),
        "numeric(18,8)",
        [Decimal("1234567890.12345678"), Decimal("-0.00000001"), Decimal("0.50000000"), None],
    ),
    ("n5_3", pa.decimal128(5, 3), "numeric(5,3)", [Decimal("12.345"), Decimal("-0.001"), None, 0]),
    ("s", pa.string(), "varchar(400)", ['Zoë 😀 "q",\n\\.\r\t', "", "\\N", None]),
    ("bt", pa.binary(), "bytea", [b"\x00\xff'\",\n\\", b"", b"\\x00", None]),
]


@pytest.fixture
def pg_conn(pg_url: str):
    with psycopg.connect(pg_url) as conn:
        yield conn
        conn.rollback()  # temp tables go with the session


def roundtrip(conn: psycopg.Connection, table: pa.Table, pg_types: list[str]) -> list[tuple]:
    cols = ", ".join(f'"{n}" {t}' for n, t in zip(table.column_names, pg_types, strict=True))
    conn.execute(f"CREATE TEMP TABLE rt ({cols})")
    with conn.cursor().copy("COPY rt FROM STDIN (FORMAT binary)") as copy:
        copy.write(HEADER)
        for chunk in binary_chunks(table, batch_rows=3):  # several batches
            copy.write(chunk)
        copy.write(TRAILER)
    rows = conn.execute("SELECT * FROM rt").fetchall()
    conn.execute("DROP TABLE rt")
    return rows


def same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)  # -0.0 stays
    if isinstance(want, Decimal):
        return got == want and got.as_tuple().exponent == want.as_tuple().exponent  # scale
    if isinstance(want, bytes):
        return bytes(got) == want
    return type(got) is type(want) and got == want


@pytest.mark.parametrize("piece", ["whole", "sliced"])
def test_every_type_round_trips_exactly(pg_conn, piece):
    table = pa.table({n: pa.array(v, t) for n, t, _, v in EDGES})
    table = table if piece == "whole" else pa.concat_tables([table, table]).slice(1, 6)
    got = roundtrip(pg_conn, table, [pg for _, _, pg, _ in EDGES])
    want = [tuple(r.values()) for r in table.to_pylist()]
    assert len(got) == len(want)
    bad = [
        (name, g, w)
        for grow, wrow in zip(got, want, strict=True)
        for (name, *_), g, w in zip(EDGES, grow, wrow, strict=True)
        if not (g is None and w is None) and not same(g, w)
    ]
    assert bad == []
    signs = pg_conn.execute("SELECT '-0'::float8::text").fetchall()
    assert signs == [("-0",)]  # PostgreSQL itself keeps the sign this test checks


def test_columns_a_file_lacks_are_all_null(pg_conn):
    """conform() fills columns written before they existed with pa.nulls."""
    n = 5
    types = [(pa.decimal128(18, 4), "numeric(18,4)"), (pa.string(), "varchar(10)"),
             (pa.timestamp("us"), "timestamp"), (pa.bool_(), "boolean"),
             (pa.binary(), "bytea"), (pa.int64(), "bigint")]
    table = pa.table({f"c{i}": pa.nulls(n, t) for i, (t, _) in enumerate(types)})
    assert roundtrip(pg_conn, table, [pg for _, pg in types]) == [(None,) * len(types)] * n


def test_random_decimals_of_every_width(pg_conn):
    rnd = random.Random(11)
    specs = [(38, 0), (38, 10), (38, 37), (30, 15), (22, 2), (20, 0), (19, 1), (18, 4),
             (18, 8), (17, 3), (9, 2), (6, 6), (1, 0)]
    cols = {}
    for p, s in specs:
        values = []
        for i in range(500):
            digits = rnd.randint(0, p)
            v = rnd.randint(0, 10**digits - 1) * rnd.choice((1, -1))
            values.append(None if i % 41 == 0 else Decimal(v).scaleb(-s))
        cols[f"n{p}_{s}"] = pa.array(values, pa.decimal128(p, s))
    table = pa.table(cols)
    got = roundtrip(pg_conn, table, [f"numeric({p},{s})" for p, s in specs])
    want = [tuple(r.values()) for r in table.to_pylist()]
    assert [[same(g, w) or g is w is None for g, w in zip(gr, wr, strict=True)]
            for gr, wr in zip(got, want, strict=True)] == [[True] * len(specs)] * len(want)


def test_a_type_s3rs_never_loads_is_refused():
    with pytest.raises(TypeError, match="no binary COPY encoding for Arrow type time64"):
        encode_column(pa.array([1], pa.time64("us")))


def test_batches_with_and_without_nulls_between_strings(pg_conn):
    """binary_chunks lays NULL-free fixed-width fields and string length headers side by
    side in blocks and joins them with the variable pieces: every mix of a batch (a column
    with NULLs in one batch and none in the next, strings between, first and last) reads
    back exactly, and is the same stream as one complete field per column joined row by
    row (`encode_column`, the plain layout)."""
    rnd = random.Random(5)
    n = 40

    def maybe(values: list[Any], every: int) -> list[Any]:
        # NULLs only in the first half: batches of 8 rows see them, then none
        return [None if i < n // 2 and i % every == 0 else v for i, v in enumerate(values)]

    cols = {
        "s0": pa.array(maybe([f"k{rnd.randint(0, 10**6)}" for _ in range(n)], 3)),
        "i": pa.array([rnd.randint(-(2**63), 2**63 - 1) for _ in range(n)], pa.int64()),
        "d": pa.array(maybe([Decimal(rnd.randint(-10**17, 10**17)).scaleb(-4)
                             for _ in range(n)], 5), pa.decimal128(18, 4)),
        "w": pa.array([Decimal(rnd.randint(-10**37, 10**37)).scaleb(-10) for _ in range(n)],
                      pa.decimal128(38, 10)),
        "s1": pa.array(["" if i % 4 else "Zoë 😀" for i in range(n)]),
        "b": pa.array(maybe([rnd.random() < 0.5 for _ in range(n)], 2)),
        "ts": pa.array([datetime(2026, 11, 28, 1, 2, 3, i) for i in range(n)], pa.timestamp("us")),
        "bt": pa.array(maybe([bytes([i % 256]) * (i % 5) for i in range(n)], 7), pa.binary()),
    }
    pg = ["varchar(40)", "bigint", "numeric(18,4)", "numeric(38,10)", "varchar(10)", "boolean",
          "timestamp", "bytea"]
    table = pa.table(cols).slice(1, n - 2)
    got = roundtrip(pg_conn, table, pg)
    want = [tuple(r.values()) for r in table.to_pylist()]
    assert [[same(g, w) or g is w is None for g, w in zip(gr, wr, strict=True)]
            for gr, wr in zip(got, want, strict=True)] == [[True] * len(pg)] * len(want)
    for size in (1, 8, 1000):
        plain = b""
        for batch in table.to_batches(max_chunksize=size):
            count = pa.scalar(batch.num_columns.to_bytes(2, "big"), pa.large_binary())
            fields = [encode_column(c) for c in batch.columns]
            plain += pa.compute.binary_join_element_wise(
                count, *fields, pa.scalar(b"", pa.large_binary())
            ).buffers()[2].to_pybytes()
        assert b"".join(bytes(c) for c in binary_chunks(table, batch_rows=size)) == plain
