"""Both hash modes print every type of the type mapping byte for byte alike in MySQL and
PostgreSQL: one test per type, with the values that break naive canonical forms."""

from __future__ import annotations

import pytest

from s3rs_assets.verify import (
    mysql_field,
    mysql_hash_field,
    warehouse_field,
    warehouse_hash_field,
)
from s3rs_assets_tests.reconcile_fixtures import Env, copy_to_warehouse, make_env, new_table

#: MySQL column type -> SQL literals inserted (NULL always added)
TYPES = {
    "tinyint(1)": ["0", "1", "2", "-1"],
    "bit(1)": ["b'0'", "b'1'"],
    "bit(12)": ["b'0'", "b'111111111111'", "5"],
    "bit(64)": ["b'" + "1" * 64 + "'", "0"],
    "tinyint": ["-128", "127", "0"],
    "smallint": ["-32768", "32767"],
    "smallint unsigned": ["65535"],
    "mediumint": ["-8388608", "8388607"],
    "int": ["-2147483648", "2147483647"],
    "int unsigned": ["4294967295"],
    "bigint": ["-9223372036854775808", "9223372036854775807"],
    "bigint unsigned": ["18446744073709551615", "0"],
    "decimal(18,4)": ["99999999999999.9999", "-0.0001", "0", "12.5"],
    "decimal(38,10)": ["9999999999999999999999999999.9999999999", "-1"],
    "decimal(5,0)": ["-99999", "7"],
    "int(6) zerofill": ["42", "0", "4294967295"],
    "decimal(8,3) zerofill": ["1.5", "0", "99999.999"],
    "bigint(20) unsigned zerofill": ["18446744073709551615", "7"],
    "float": ["0.1", "1.5e38", "-3.25", "1e-30", "16777216"],
    "double": ["1/7", "1.5e300", "1e-300", "1e15", "123456789012345678", "-0.5", "100000",
               "0.000123"],
    "date": ["'1970-01-01'", "'1969-12-31'", "'1900-03-01'", "'9999-12-31'", "'2024-02-29'",
             "'2024-00-00'", "'2024-02-00'"],
    "datetime(6)": ["'2024-03-10 02:30:00.000001'", "'9999-12-31 23:59:59.999999'",
                    "'2000-01-01 00:00:00'", "'2024-03-10 02:30:10.100000'",
                    "'2024-03-10 02:30:10'", "'1969-12-31 23:59:59.500000'",
                    "'1900-01-01 00:00:00.000001'"],  # negative: floor, not truncation
    "datetime(3)": ["'2024-03-10 02:30:00.120'", "'2024-03-10 02:30:00'"],
    "datetime": ["'2024-03-10 02:30:00'", "'2024-00-15 10:00:00'"],
    "timestamp(6)": ["'2024-03-10 02:30:00.123456'", "'1970-01-02 00:00:00'"],
    "time": ["'838:59:59'", "'-12:00:00'", "'00:00:00'"],
    "time(6)": ["'12:34:56.000001'"],
    "year": ["1901", "2155"],
    "char(3)": ["'abc'", "''", "'a|'"],
    "varchar(100)": ["''", "'a|b'", "'x '", "'🚚 𠮷 é'", "'N'", "'1:N'", "'tab\\tnl\\n'"],
    "text": ["REPEAT('long ', 2000)", "'back\\\\slash'"],
    "json": ["'{\"a\": [1, 2.5, null], \"b\": \"🚚\"}'", "'[]'"],
    "enum('a','b c')": ["'a'", "'b c'"],
    "set('x','y')": ["'x,y'", "''"],
    "binary(4)": ["x'00ff00ff'", "'ab'"],
    "varbinary(16)": ["x''", "x'00'", "x'deadbeef'"],
    "blob": ["x'0102'"],
    "longblob": ["x'00ff'", "REPEAT('ab', 40000)"],
    "uuid": ["'123e4567-e89b-12d3-a456-426614174000'"],
    "inet6": ["'::1'", "'::ffff:192.0.2.128'", "'2001:db8::1'"],
    "inet4": ["'192.0.2.1'"],
    "enum('a','')": ["'a'", "''", "'no such value'"],
    "varchar(10) character set latin1": ["'é€Š'"],
    "varchar(10) character set utf8mb3": ["'é€中'"],
}


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


def _texts(env, cfg, target, side: str, hashed: bool = False) -> dict[int, str]:
    """The key's text of column v per row (with `hashed`, the row hash's: dates and times
    as integers)."""
    col = next(c for c in target.columns if c.name == "v")
    if side == "mysql":
        f = mysql_hash_field(col) if hashed else mysql_field(col)
        # as the row hash's CONCAT_WS prints it (a NOT NULL number enters it bare)
        rows = env.mysql_exec(f"SELECT id, CONCAT_WS('|', {f}) FROM `{cfg.table}`")
    else:
        f = warehouse_hash_field(col, "postgres") if hashed else warehouse_field(col, "postgres")
        rows = env.pg(f'SELECT id, {f} FROM "{target.schema}"."{target.table}"')
    return {int(i): t for i, t in rows}


@pytest.mark.parametrize("mysql_type", list(TYPES))
def test_type_prints_alike_and_hashes_alike(env, mysql_type):
    env.mysql_exec("SET SESSION sql_mode = ''")  # zero dates below
    cfg = new_table(
        env, f"id INT NOT NULL PRIMARY KEY, update_at DATETIME(6) NULL, v {mysql_type} NULL"
    )
    values = [*TYPES[mysql_type], "NULL"]
    for i, v in enumerate(values):
        env.mysql_exec(
            f"INSERT INTO `{cfg.table}` (id, update_at, v) VALUES ({i}, '2025-03-01', {v})"
        )
    if mysql_type.startswith(("date", "datetime")):  # a zero date travels as NULL
        env.mysql_exec(f"INSERT INTO `{cfg.table}` VALUES (99, '2025-03-01', 0)")
    target = copy_to_warehouse(env, cfg)
    mine, theirs = _texts(env, cfg, target, "mysql"), _texts(env, cfg, target, "pg")
    assert mine == theirs
    assert mine[len(values) - 1] == "N"
    hashed = _texts(env, cfg, target, "mysql", True)
    assert hashed == _texts(env, cfg, target, "pg", True)
    assert hashed[len(values) - 1] == "N"
    if mysql_type.startswith(("date", "datetime", "timestamp")):  # one integer per value
        assert len({t for t in hashed.values() if t != "N"}) == len(
            {t for t in mine.values() if t != "N"}
        )
    for columns in ("key", "all"):
        report = env.reconcile(cfg, columns=columns, threshold=2)
        assert report.total == 0, (columns, report.as_json()["differences"])

# The arithmetic key-mode hash, type by type: test_reconcile_hash.py


#: NOT NULL numbers: the row hash takes them bare (no CAST, no COALESCE)
NOT_NULL = ["tinyint", "bigint unsigned", "int(6) zerofill", "decimal(18,4)", "decimal(5,0)",
            "double", "tinyint(1)", "bit(12)", "year"]


@pytest.mark.parametrize("mysql_type", NOT_NULL)
def test_not_null_number_hashes_alike(env, mysql_type):
    cfg = new_table(
        env, f"id INT NOT NULL PRIMARY KEY, update_at DATETIME(6) NULL, v {mysql_type} NOT NULL"
    )
    for i, v in enumerate(TYPES[mysql_type]):
        env.mysql_exec(
            f"INSERT INTO `{cfg.table}` (id, update_at, v) VALUES ({i}, '2025-03-01', {v})"
        )
    target = copy_to_warehouse(env, cfg)
    assert _texts(env, cfg, target, "mysql", True) == _texts(env, cfg, target, "pg", True)
    report = env.reconcile(cfg, columns="all", threshold=2)
    assert report.total == 0, report.as_json()["differences"]
