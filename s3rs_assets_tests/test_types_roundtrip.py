"""Every type MySQL/MariaDB can store, end to end: MySQL -> S3 -> PostgreSQL, value by value.

Each column lists (SQL literal, the value PostgreSQL must hold). Rows are filled column by
column; the last row is NULL everywhere. Both readers run. Types s3rs cannot carry are
refused by name before anything is read (`test_refused_before_any_io`).
"""

from __future__ import annotations

import math
import os
import uuid
from datetime import date, datetime, timedelta
from decimal import Decimal

import dagster as dg
import psycopg
import pytest

from s3rs_assets.errors import SourceSchemaError
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import CHECK_NAME, metadata_facts
from s3rs_assets.source import describe
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import read_parquet, resources, sync, table_cfg

T0 = datetime(2025, 3, 1, 8, 0)
BLOB_64K = os.urandom(65535)
#: MariaDB's types, as (column DDL, [(literal, value in PostgreSQL)])
COLUMNS: dict[str, tuple[str, list[tuple[str, object]]]] = {
    "bit1": ("BIT(1)", [("b'0'", False), ("b'1'", True)]),
    "bit12": ("BIT(12)", [("b'111111111111'", 4095), ("5", 5), ("0", 0)]),
    "bit64": ("BIT(64)", [("b'" + "1" * 64 + "'", 2**64 - 1), ("b'1'", 1)]),
    "yr": ("YEAR", [("1901", 1901), ("2155", 2155), ("0", 0)]),
    "en": ("ENUM('a','b c','')", [("'a'", "a"), ("'b c'", "b c"), ("''", "")]),
    "en_err": ("ENUM('a','b')", [("'zzz'", ""), ("'b'", "b")]),  # lax mode: error value ''
    "st": ("SET('x','y')", [("'x,y'", "x,y"), ("''", ""), ("'y'", "y")]),
    "tm6": ("TIME(6)", [("'-838:59:59.000000'", "-838:59:59.000000"),
                        ("'838:59:59'", "838:59:59.000000"),
                        ("'-00:00:00.500000'", "-00:00:00.500000"),
                        ("'12:34:56.000001'", "12:34:56.000001")]),
    "tm0": ("TIME", [("'-01:02:03'", "-01:02:03"), ("'00:00:00'", "00:00:00")]),
    "dec38": ("DECIMAL(38,30)", [("'99999999.999999999999999999999999999999'",
                                  Decimal("99999999.999999999999999999999999999999")),
                                 ("'-0.000000000000000000000000000001'",
                                  Decimal("-0.000000000000000000000000000001"))]),
    # MariaDB stores -0.0 as +0.0 (ATAN2(v, -1) is +pi): what it holds arrives
    # values whose float32 needs more than the 6 digits MariaDB's text protocol prints
    # FLOAT with (16777216 would arrive as 16777200): each must arrive exactly
    "flt": ("FLOAT", [("-0e0", 0.0), ("16777216", 16777216.0),
                      ("3.4028234663852886e38", 3.4028234663852886e38),
                      ("1.1754943508222875e-38", 1.1754943508222875e-38),
                      ("0.1", 0.10000000149011612)]),
    "dbl": ("DOUBLE", [("-0e0", 0.0), ("0e0", 0.0),
                       ("1.7976931348623157e308", 1.7976931348623157e308),
                       ("4.9406564584124654e-324", 5e-324),
                       ("-0.3333333333333333e0", -1 / 3)]),  # "-1/3" is a DECIMAL: 9 digits
    "dt": ("DATETIME(6)", [("'0000-00-00 00:00:00'", None), ("'2024-00-15 10:00:00'", None),
                           ("'2024-02-00 00:00:00'", None),
                           ("'1000-01-01 00:00:00'", datetime(1000, 1, 1)),
                           ("'9999-12-31 23:59:59.999999'",
                            datetime(9999, 12, 31, 23, 59, 59, 999999))]),
    "dte": ("DATE", [("'0000-00-00'", None), ("'2024-00-00'", None),
                     ("'1000-01-01'", date(1000, 1, 1)), ("'9999-12-31'", date(9999, 12, 31))]),
    "ts": ("TIMESTAMP(6) NULL", [("'0000-00-00 00:00:00'", None),
                                 ("'2038-01-19 03:14:07.999999'",
                                  datetime(2038, 1, 19, 3, 14, 7, 999999))]),
    "lat": ("VARCHAR(20) CHARACTER SET latin1",
            [("'é€ŠÿŽ‰'", "é€ŠÿŽ‰"), ("''", ""), ("' x '", " x ")]),
    "lat_txt": ("TEXT CHARACTER SET latin1", [("'Grüße €5'", "Grüße €5")]),
    "u3": ("VARCHAR(20) CHARACTER SET utf8mb3", [("'é€中'", "é€中")]),
    "u4": ("VARCHAR(20) CHARACTER SET utf8mb4", [("'𠀋🚚'", "𠀋🚚")]),
    "uid": ("UUID", [("'123e4567-e89b-12d3-a456-426614174000'",
                      "123e4567-e89b-12d3-a456-426614174000"),
                     ("'00000000-0000-0000-0000-000000000000'",
                      "00000000-0000-0000-0000-000000000000")]),
    "ip6": ("INET6", [("'::1'", "::1"), ("'2001:db8::ff00:42:8329'", "2001:db8::ff00:42:8329"),
                      ("'::ffff:192.0.2.128'", "::ffff:192.0.2.128")]),
    "ip4": ("INET4", [("'192.0.2.1'", "192.0.2.1"), ("'255.255.255.255'", "255.255.255.255")]),
    "txt": ("TEXT CHARACTER SET utf8mb4", [("REPEAT('a', 65535)", "a" * 65535),
                                           ("REPEAT('é', 32767)", "é" * 32767)]),
    "blb": ("BLOB", [(f"x'{BLOB_64K.hex()}'", BLOB_64K), ("x''", b"")]),
}
#: columns whose value MySQL computes: name -> (DDL, value for row id)
COMPUTED = {
    "inv": ("INT NULL INVISIBLE DEFAULT 7", lambda i: 7),
    "gv": ("BIGINT AS (id * 2) VIRTUAL", lambda i: i * 2),
    "gs": ("VARCHAR(30) AS (CONCAT('x', id)) STORED", lambda i: f"x{i}"),
}
ROWS = max(len(v) for _, v in COLUMNS.values()) + 1  # the last row is NULL everywhere


@pytest.fixture(scope="module")
def wide(mysql_db):
    import pymysql

    name = f"types_{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True,
                           charset="utf8mb4")
    cols = ", ".join(f"`{n}` {ddl}" for n, (ddl, _) in COLUMNS.items())
    computed = ", ".join(f"`{n}` {ddl}" for n, (ddl, _) in COMPUTED.items())
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, the ENUM error value
        cur.execute(
            f"CREATE TABLE `{name}` (id INT NOT NULL PRIMARY KEY, update_at DATETIME(6) NOT "
            f"NULL, {cols}, {computed}, KEY (update_at)) ENGINE=InnoDB DEFAULT CHARSET=latin1"
        )
        for i in range(ROWS):
            names = ["id", "update_at"]
            values = [str(i), f"'{T0 + timedelta(seconds=i)}'"]
            for n, (_, vals) in COLUMNS.items():
                names.append(f"`{n}`")
                values.append(vals[i][0] if i < len(vals) else "NULL")
            if i == ROWS - 1:
                names.append("inv")
                values.append("NULL")
            cur.execute(f"INSERT INTO `{name}` ({', '.join(names)}) VALUES ({', '.join(values)})")
    yield conn, name
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
    conn.close()


def _same(got: object, want: object) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        if want == 0.0:
            return got == 0.0 and math.copysign(1, got) == math.copysign(1, want)
        return got == want  # FLOAT's values are exact float32s widened: no tolerance
    if isinstance(got, memoryview):
        got = bytes(got)
    if isinstance(got, Decimal) and isinstance(want, int):
        return got == want
    return got == want and type(got) is type(want)


def _synced_zero_dates(cfg, res: dict) -> int:
    """Sync partition 2025-03-01 of `cfg`; its `matches_mysql` passed; the zero dates the
    backup read as NULL (its metadata)."""
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, partition="2025-03-01", instance=instance)
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == CHECK_NAME]
    assert check.passed, check.description
    (backup,) = [m for m in result.get_asset_materialization_events()
                 if m.asset_key.path[-1] == "s3_parquet"]
    return metadata_facts(backup.materialization.metadata)["zero_dates_as_null"]


@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_every_type_round_trips_to_postgres(wide, mysql_db, mysql_url, pg_url, s3_resource,
                                            spark_resource, reader):
    conn, name = wide
    schema = f"dw_types_{reader}"
    cfg = table_cfg(mysql_db, name, reader=reader, chunk_rows=4, target=f"{schema}.{name}")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    assert _synced_zero_dates(cfg, res) == 6  # dt 3, dte 2, ts 1: reported, never silent
    with psycopg.connect(pg_url) as pg:
        cur = pg.execute(f'SELECT * FROM "{schema}"."{name}" ORDER BY id')
        names = [d.name for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        # REAL as the exact DOUBLE it widens to (psycopg parses its shortest text otherwise)
        exact = pg.execute(f'SELECT "flt"::float8 FROM "{schema}"."{name}" ORDER BY id')
        for r, (flt,) in zip(rows, exact.fetchall(), strict=True):
            r["flt"] = flt
    assert [r["id"] for r in rows] == list(range(ROWS))
    bad = []
    for r in rows:
        i = r["id"]
        for n, (_, vals) in COLUMNS.items():
            want = vals[i][1] if i < len(vals) else None
            if not _same(r[n], want):
                bad.append(f"{n} row {i}: {r[n]!r:.80} != {want!r:.80}")
        for n, (_, fn) in COMPUTED.items():
            want = None if (n == "inv" and i == ROWS - 1) else fn(i)
            if r[n] != want:
                bad.append(f"{n} row {i}: {r[n]!r} != {want!r}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("DECIMAL(65,30)", r"'v' is DECIMAL\(65,30\)"),
    ],
)
def test_refused_before_any_io(mysql_conn, mysql_db, ddl, message):
    name = f"refused_{uuid.uuid4().hex[:8]}"
    with mysql_conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, update_at DATETIME, v {ddl})")
    try:
        with pytest.raises(SourceSchemaError, match=message):
            describe(mysql_conn, table_cfg(mysql_db, name))
    finally:
        with mysql_conn.cursor() as cur:
            cur.execute(f"DROP TABLE `{name}`")


def test_large_text_and_blob(mysql_conn, mysql_db, mysql_url, pg_url, s3_resource, s3_client,
                             spark_resource):
    """A 3 MB LONGBLOB reaches the warehouse intact (Redshift VARBYTE holds 16 MB); a 3 MB
    LONGTEXT reaches S3 intact, and its load stops naming the column and the row, since no
    Redshift VARCHAR holds more than 65535 bytes (nothing is truncated, nothing loaded)."""
    name = f"large_{uuid.uuid4().hex[:8]}"
    blob = os.urandom(3 * 1024 * 1024)
    text = "€ü" * (3 * 1024 * 1024 // 5)
    with mysql_conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, update_at DATETIME(6) NOT NULL, "
                    "lb LONGBLOB, lt LONGTEXT) DEFAULT CHARSET=utf8mb4")
        cur.execute(f"INSERT INTO `{name}` VALUES (1, '2025-03-01 08:00', %s, 'small')", (blob,))
        cur.execute(f"INSERT INTO `{name}` VALUES (2, '2025-03-01 08:01', NULL, NULL)")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    cfg = table_cfg(mysql_db, name, target=f"dw_large.{name}")
    try:
        with dg.instance_for_test() as instance:
            sync(cfg, res, partition="2025-03-01", instance=instance)
        with psycopg.connect(pg_url) as pg:
            rows = pg.execute(f'SELECT id, lb, lt FROM "dw_large"."{name}" ORDER BY id').fetchall()
        assert rows == [(1, blob, "small"), (2, None, None)]

        with mysql_conn.cursor() as cur:
            cur.execute(f"UPDATE `{name}` SET lt = %s, update_at = '2025-03-01 09:00' "
                        "WHERE id = 2", (text,))
        with dg.instance_for_test() as instance:
            result = sync(cfg, res, partition="2025-03-01", instance=instance,
                          raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        message = failure.step_failure_data.error.to_string()
        assert "column 'lt'" in message and "id=2" in message, message
        with psycopg.connect(pg_url) as pg:
            (lt,) = pg.execute(f'SELECT lt FROM "dw_large"."{name}" WHERE id = 2').fetchone()
        assert lt is None  # the long value was not loaded, truncated or otherwise
        store = store_for(s3_resource)
        keys = [f.key for p in store.read(cfg.name, fresh=True).partitions.values()
                for f in p.files]
        table = read_parquet(s3_client, s3_resource.bucket, keys)
        got = {r["id"]: r for r in table.to_pylist()}
        assert got[2]["lt"] == text and got[1]["lb"] == blob
    finally:
        with mysql_conn.cursor() as cur:
            cur.execute(f"DROP TABLE `{name}`")


def test_a_day_its_month_lacks_is_null_counted_and_named_by_reconcile(
    mysql_conn, mysql_db, mysql_url, pg_url, s3_resource, spark_resource
):
    """ALLOW_INVALID_DATES lets '2024-02-30' into DATE and DATETIME columns; connectorx
    reads such a non-key value as NULL (`types.null_if_invalid`; it panicked on it before)
    and counts it with the zero dates; `reconcile --columns all`, whose MySQL side still
    reads a date there, names the row."""
    from s3rs_assets.reconcile.report import ReconcileOptions
    from s3rs_assets.reconcile.run import reconcile_table

    name = f"invalid_{uuid.uuid4().hex[:8]}"
    with mysql_conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, update_at DATETIME(6) NOT NULL, "
                    "d DATETIME(6) NULL, e DATE NULL, KEY (update_at))")
        cur.execute(f"INSERT INTO `{name}` VALUES "
                    f"(1, '{T0}', '2024-02-30 10:00:00.5', '2023-02-29'), "
                    f"(2, '{T0 + timedelta(seconds=1)}', '2024-02-29 10:00:00.5', '2023-02-28'), "
                    f"(3, '{T0 + timedelta(seconds=2)}', NULL, NULL)")
        cur.execute("SET SESSION sql_mode = DEFAULT")
    schema = "dw_invalid_dates"
    cfg = table_cfg(mysql_db, name, target=f"{schema}.{name}")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    try:
        assert _synced_zero_dates(cfg, res) == 2
        with psycopg.connect(pg_url) as pg:
            rows = pg.execute(f'SELECT id, d, e FROM "{schema}"."{name}" ORDER BY id').fetchall()
        assert rows == [(1, None, None), (2, datetime(2024, 2, 29, 10, 0, 0, 500000),
                                          date(2023, 2, 28)), (3, None, None)]
        report = reconcile_table(cfg, res["mysql"], res["warehouse"], s3_resource,
                                 store_for(s3_resource), ReconcileOptions(columns="all"))
        assert report.counts() == {"missing": 0, "extra": 0, "differs": 1}
    finally:
        with mysql_conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
