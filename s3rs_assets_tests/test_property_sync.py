"""Property-based end to end: random table shapes synced twice, MySQL == PostgreSQL after each.

Hypothesis draws a table (key column types and collations, composite keys, cursor
DATETIME(0..6) or TIMESTAMP(0..6), nullable non-key columns), rows with many ties on the
cursor, a chunk size, a parallelism and a reader; syncs it; updates and inserts rows (some
moved to a later partition, some onto an existing timestamp); syncs again; and after each
sync compares every column of every row between MySQL and PostgreSQL. Each table also has
one to four extra columns of random types the type map knows (`type_shapes.py`: every
integer width, DECIMAL(1..38, s), FLOAT/DOUBLE, DATE/DATETIME(n)/TIMESTAMP(n)/TIME(n) with
zero dates, YEAR, BIT(n), text and JSON in utf8mb4, ENUM/SET, UUID/INET, binary, points),
with NULLs and extremes.

Three examples run in the normal suite (10-30 s each on a 2-core machine, more when loaded);
`S3RS_HYPOTHESIS_EXAMPLES=50` runs more.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import dagster as dg
import psycopg
import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3rs_assets.assets import build_table_assets
from s3rs_assets.names import asset_key
from s3rs_assets.resources import S3Resource
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import resources, table_cfg
from s3rs_assets_tests.type_shapes import Col, column, with_null

EXAMPLES = int(os.environ.get("S3RS_HYPOTHESIS_EXAMPLES", "3"))
DAY = datetime(2025, 3, 1)
#: key column kinds: DDL, and a strategy for its values
KEY_KINDS: dict[str, tuple[str, st.SearchStrategy]] = {
    "int": ("INT NOT NULL", st.integers(-2**31, 2**31 - 1)),
    "bigint_u": ("BIGINT UNSIGNED NOT NULL", st.integers(0, 2**64 - 1)),
    "smallint": ("SMALLINT NOT NULL", st.integers(-5, 5)),
    **{
        f"varchar_{coll}": (
            f"VARCHAR(8) CHARACTER SET {coll.split('_')[0]} COLLATE {coll} NOT NULL",
            st.text(alphabet="aAbBeéÉ -_zZ", min_size=0, max_size=5),
        )
        for coll in ("utf8mb4_general_ci", "utf8mb4_bin", "utf8mb4_unicode_ci",
                     "latin1_swedish_ci")
    },
    "char_ci": ("CHAR(4) NOT NULL", st.text(alphabet="aAbB", min_size=1, max_size=4)),
}
#: nullable non-key columns: DDL and values
OTHER_KINDS: dict[str, tuple[str, st.SearchStrategy]] = {
    "int": ("INT NULL", st.integers(-2**31, 2**31 - 1)),
    "dec": ("DECIMAL(12,3) NULL", st.decimals(min_value=-999999999, max_value=999999999,
                                               places=3, allow_nan=False)),
    "dbl": ("DOUBLE NULL", st.floats(allow_nan=False, allow_infinity=False, width=64)),
    "txt": ("VARCHAR(30) NULL", st.text(max_size=10).filter(lambda s: "\x00" not in s)),
    "dt3": ("DATETIME(3) NULL", st.datetimes(min_value=datetime(1970, 1, 2),
                                             max_value=datetime(2100, 1, 1)).map(
        lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))),
    "flag": ("TINYINT(1) NULL", st.booleans()),
}


@dataclass
class Shape:
    keys: list[str]  # KEY_KINDS names, one per key column
    cursor: str  # DDL of the cursor column
    precision: int
    others: list[str]  # OTHER_KINDS names
    chunk_rows: int
    parallelism: int
    reader: str
    extras: list[Col]  # columns x0.. of random types (type_shapes)


@st.composite
def shapes(draw) -> Shape:
    precision = draw(st.integers(0, 6))
    kind = draw(st.sampled_from(["DATETIME", "TIMESTAMP"]))
    return Shape(
        keys=draw(st.lists(st.sampled_from(sorted(KEY_KINDS)), min_size=1, max_size=2)),
        cursor=f"{kind}({precision}) NULL" if kind == "TIMESTAMP" else f"{kind}({precision})",
        precision=precision,
        others=draw(st.lists(st.sampled_from(sorted(OTHER_KINDS)), max_size=3)),
        chunk_rows=draw(st.integers(1, 9)),
        parallelism=draw(st.integers(1, 3)),
        reader=draw(st.sampled_from(["connectorx", "jdbc"])),
        extras=draw(st.lists(column(), min_size=1, max_size=4)),
    )


def _stamp(draw, day: int, precision: int) -> datetime:
    """One of a handful of instants of `day` (ties), at the cursor's precision."""
    slot = draw(st.integers(0, 3))
    micro = (slot * 123457) % 1_000_000
    micro -= micro % 10 ** (6 - precision)
    return DAY + timedelta(days=day, hours=slot, microseconds=micro)


def _row(draw, shape: Shape, day: int) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for i, k in enumerate(shape.keys):
        row[f"k{i}"] = draw(KEY_KINDS[k][1])
    row["update_at"] = _stamp(draw, day, shape.precision)
    for i, o in enumerate(shape.others):
        row[f"c{i}"] = draw(st.none() | OTHER_KINDS[o][1])
    for i, col in enumerate(shape.extras):
        row[f"x{i}"] = Literal(draw(with_null(col)))
    return row


class Literal(str):
    """A value written into the INSERT as SQL text (bits, zero dates, geometries)."""


@st.composite
def scenarios(draw) -> tuple[Shape, list[dict], list[dict], list[int]]:
    shape = draw(shapes())
    first = [_row(draw, shape, draw(st.integers(0, 1)))
             for _ in range(draw(st.integers(1, 14)))]
    later = [_row(draw, shape, draw(st.integers(1, 2)))
             for _ in range(draw(st.integers(0, 6)))]
    updates = draw(st.lists(st.integers(0, len(first) - 1), max_size=6, unique=True))
    return shape, first, later, updates


def _insert(conn, table: str, rows: list[dict]) -> None:
    with conn.cursor() as cur:
        for r in rows:
            cols = ", ".join(f"`{c}`" for c in r)
            marks = ", ".join(v.replace("%", "%%") if isinstance(v, Literal) else "%s"
                              for v in r.values())
            cur.execute(f"INSERT IGNORE INTO `{table}` ({cols}) VALUES ({marks})",
                        [v for v in r.values() if not isinstance(v, Literal)])


def _materialize(cfg, res, start: str, end: str) -> None:
    selection = dg.AssetSelection.assets(
        asset_key(cfg, "s3_parquet"), asset_key(cfg, "redshift_table")
    ).without_checks()
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            build_table_assets(cfg), selection=selection, resources=res, instance=instance,
            tags={"dagster/asset_partition_range_start": start,
                  "dagster/asset_partition_range_end": end},
        )
    assert result.success


def _normal(v: Any) -> Any:
    if isinstance(v, Decimal) and v == v.to_integral_value() and v.as_tuple().exponent >= 0:
        return int(v)
    if isinstance(v, Decimal):
        return v.normalize()
    return v


def _compare(conn, table: str, pg_url: str, schema: str, shape: Shape, when: str) -> int:
    cols = [f"k{i}" for i in range(len(shape.keys))] + ["update_at"] + [
        f"c{i}" for i in range(len(shape.others))]
    extras = [f"x{i}" for i in range(len(shape.extras))]
    exprs = [f"`{c}`" for c in cols] + [c.mysql_expr(n) for c, n in zip(shape.extras, extras,
                                                                          strict=True)]
    cols += extras
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(exprs)} FROM `{table}`")
        mine = [tuple(r) for r in cur.fetchall()]
    with psycopg.connect(pg_url) as pg:
        theirs = pg.execute(
            f"SELECT {', '.join(f'{chr(34)}{c}{chr(34)}' for c in cols)} "
            f'FROM "{schema}"."{table}"').fetchall()
    flags = [i + len(shape.keys) + 1 for i, o in enumerate(shape.others) if o == "flag"]

    first_extra = len(cols) - len(shape.extras)

    def norm(row: tuple, mysql: bool) -> tuple:
        out = [_normal(v) for v in row[:first_extra]]
        if mysql:
            for i in flags:
                out[i] = None if out[i] is None else bool(out[i])
        out += [c.norm(v) for c, v in zip(shape.extras, row[first_extra:], strict=True)]
        return tuple(out)

    nk = len(shape.keys)
    want = {r[:nk]: norm(r, True) for r in mine}
    got: dict[tuple, tuple] = {}
    for r in theirs:
        key = tuple(_normal(v) for v in r[:nk])
        assert key not in got, f"{when}: key {key} twice in the warehouse"
        got[key] = norm(r, False)
    want = {tuple(_normal(v) for v in k): v for k, v in want.items()}
    assert len(mine) == len(want), "MySQL keys are unique"
    missing = sorted(set(want) - set(got), key=repr)
    extra = sorted(set(got) - set(want), key=repr)
    assert not missing and not extra, f"{when}: missing {missing[:5]}, extra {extra[:5]}"
    differ = [(want[k], got[k]) for k in want if want[k] != got[k]]
    assert not differ, f"{when}: rows differ (MySQL, warehouse): {differ[:3]}"
    return len(want)


@pytest.mark.timeout(3600)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_random_tables_sync_exactly_twice(scenario, mysql_db, pg_url, moto_endpoint,
                                          spark_resource):
    shape, first, later, updates = scenario
    table = f"hyp_{uuid.uuid4().hex[:10]}"
    schema = "dw_hyp"
    bucket = f"s3rs-hyp-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    mysql_url = f"mysql://root:@{MYSQL_HOST}:{MYSQL_PORT}/{mysql_db}"
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=mysql_db,
                           autocommit=True, charset="utf8mb4")
    keys = [f"k{i}" for i in range(len(shape.keys))]
    ddl = [f"`k{i}` {KEY_KINDS[k][0]}" for i, k in enumerate(shape.keys)]
    ddl.append(f"`update_at` {shape.cursor}")
    ddl += [f"`c{i}` {OTHER_KINDS[o][0]}" for i, o in enumerate(shape.others)]
    ddl += [f"`x{i}` {c.ddl}" for i, c in enumerate(shape.extras)]
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(
                f"CREATE TABLE `{table}` ({', '.join(ddl)}, PRIMARY KEY "
                f"({', '.join(f'`{k}`' for k in keys)}), KEY (`update_at`)) "
                "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            )
        _insert(conn, table, first)
        cfg = table_cfg(mysql_db, table, chunk_rows=shape.chunk_rows,
                        parallelism=shape.parallelism, reader=shape.reader,
                        target=f"{schema}.{table}")
        res = resources(mysql_url, S3Resource(bucket=bucket, prefix="s3rs"), spark_resource,
                        pg_url)
        _materialize(cfg, res, "2025-03-01", "2025-03-02")
        _compare(conn, table, pg_url, schema, shape, "after the first sync")

        # updates: a later cursor (the same day, the next, or onto an existing tie) and a
        # changed value; then new rows, some on days already synced
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(f'`{k}`' for k in keys)} FROM `{table}`")
            existing = list(cur.fetchall())
            for n, i in enumerate(updates):
                if i >= len(existing):
                    continue
                stamp = DAY + timedelta(days=1 + n % 2, hours=5, microseconds=0)
                sets = "`update_at` = %s" + (", `c0` = NULL" if shape.others else "")
                where = " AND ".join(f"`{k}` = %s" for k in keys)
                cur.execute(f"UPDATE `{table}` SET {sets} WHERE {where}",
                            [stamp, *existing[i]])
        _insert(conn, table, later)
        _materialize(cfg, res, "2025-03-02", "2025-03-03")
        _compare(conn, table, pg_url, schema, shape, "after the second sync")
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{table}`")
        conn.close()
        with psycopg.connect(pg_url, autocommit=True) as pg:
            pg.execute(f'DROP TABLE IF EXISTS "{schema}"."{table}"')
