"""Every DECIMAL precision 1..38, with scales 0, 1, p/2 and p: MySQL -> parquet -> PostgreSQL
exactly, with both readers, and reconcile's text of each value alike on both sides.

Issue 16 item 10: MySQL types `CAST(v * 10^s AS SIGNED)` of a narrow DECIMAL as INT, so
connectorx handed int32 to the unscaled fast path (`types.decimal_from_unscaled`), which
wanted int64: Sakila's `film` (DECIMAL(4,2), DECIMAL(5,2)) failed every sync. One table with
a column per (precision, scale) keeps it cheap.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal, localcontext

import dagster as dg
import psycopg
import pyarrow as pa
import pytest

from s3rs_assets.source import describe
from s3rs_assets.types import decimal_from_unscaled
from s3rs_assets.verify import mysql_field, warehouse_field
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import resources, sync, table_cfg

T0 = datetime(2025, 3, 1, 8, 0)
SHAPES = sorted({(p, s) for p in range(1, 39) for s in (0, 1, p // 2, p) if s <= p})


def _values(p: int, s: int) -> list[str]:
    """Extremes, the smallest step, negatives and zero, as exact literals."""
    big = "9" * (p - s) if p > s else "0"
    frac = "9" * s
    top = f"{big}.{frac}" if s else big
    step = f"0.{'0' * (s - 1)}1" if s else "1"
    mid = "1" + "0" * (p - s - 1) if p > s else "0"
    return [top, f"-{top}", step, f"-{step}", "0", mid]


def _col(p: int, s: int) -> str:
    return f"d{p}_{s}"


@pytest.fixture(scope="module")
def decimals(mysql_db):
    import pymysql

    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True,
                           charset="utf8mb4")
    cols = ", ".join(f"`{_col(p, s)}` DECIMAL({p},{s}) NULL" for p, s in SHAPES)
    values = {(p, s): _values(p, s) for p, s in SHAPES}
    rows = max(len(v) for v in values.values()) + 1  # the last row: NULL everywhere
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS decimals")
        cur.execute(f"CREATE TABLE decimals (id INT NOT NULL PRIMARY KEY, update_at "
                    f"DATETIME(6) NOT NULL, {cols}, KEY (update_at))")
        for i in range(rows):
            vals = [values[k][i] if i < len(values[k]) else "NULL" for k in SHAPES]
            cur.execute(f"INSERT INTO decimals VALUES ({i}, '{T0 + timedelta(seconds=i)}', "
                        f"{', '.join(vals)})")
    yield conn, values, rows
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS decimals")
    conn.close()


def test_unscaled_path_takes_every_signed_width():
    typ = pa.decimal128(4, 2)
    for width in (pa.int8(), pa.int16(), pa.int32(), pa.int64()):
        got = decimal_from_unscaled(pa.array([-128, 127, None], width), typ)
        assert got.to_pylist() == [Decimal("-1.28"), Decimal("1.27"), None]
    with pytest.raises(TypeError):
        decimal_from_unscaled(pa.array([1], pa.uint64()), typ)


@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_every_precision_and_scale_round_trips(decimals, mysql_db, mysql_url, pg_url,
                                               s3_resource, spark_resource, reader):
    conn, values, rows = decimals
    schema = f"dw_dec_{reader}"
    cfg = table_cfg(mysql_db, "decimals", reader=reader, chunk_rows=3,
                    target=f"{schema}.decimals")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        assert sync(cfg, res, partition="2025-03-01", instance=instance).success
    names = ", ".join(f'"{_col(p, s)}"' for p, s in SHAPES)
    with psycopg.connect(pg_url) as pg:
        got = pg.execute(f'SELECT id, {names} FROM "{schema}".decimals ORDER BY id').fetchall()
        types = dict(pg.execute(
            "SELECT column_name, numeric_precision || ',' || numeric_scale FROM "
            "information_schema.columns WHERE table_schema = %s AND table_name = 'decimals'",
            (schema,)).fetchall())
    assert [r[0] for r in got] == list(range(rows))
    bad = []
    for p, s in SHAPES:
        assert types[_col(p, s)] == f"{p},{s}"
    for r in got:
        for j, (p, s) in enumerate(SHAPES):
            vals = values[(p, s)]
            with localcontext(prec=80):
                want = Decimal(vals[r[0]]).quantize(Decimal(1).scaleb(-s)) \
                    if r[0] < len(vals) else None
            have = r[1 + j]
            if have != want or (want is not None and have.as_tuple() != want.as_tuple()):
                bad.append(f"DECIMAL({p},{s}) row {r[0]}: {have!r} != {want!r}")
    assert not bad, "\n".join(bad[:20])
    if reader == "jdbc":
        return
    # reconcile's text of each value (both column modes hash it): alike on both sides
    src = describe(conn, cfg)
    cols = [c for c in src.columns if c.data_type == "decimal"]
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, {', '.join(mysql_field(c) for c in cols)} FROM decimals")
        mine = sorted(tuple(r) for r in cur.fetchall())
    with psycopg.connect(pg_url) as pg:
        fields = ", ".join(warehouse_field(c, "postgres") for c in cols)
        theirs = sorted(tuple(r) for r in
                        pg.execute(f'SELECT id, {fields} FROM "{schema}".decimals').fetchall())
    assert mine == theirs
