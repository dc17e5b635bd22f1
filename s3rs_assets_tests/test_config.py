"""tables.yaml, identifiers and connection URLs: bad input is refused by name, before any write."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from s3rs_assets.config import DatabaseURL, TableConfig, find_table, load_tables, parse_duration
from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import check_identifier, mysql_quote, pg_quote, split_qualified


def test_defaults_match_the_readme():
    t = TableConfig.from_dict({"name": "settlement.settlement_normal_delivery_detail"})
    assert t.cursor == "update_at" and t.primary_key is None
    assert t.partition == "daily" and t.chunk_rows == 200_000
    assert t.lag == timedelta(minutes=5) and t.start == datetime(2025, 1, 1)
    assert (t.target_schema, t.target_table) == ("settlement", "settlement_normal_delivery_detail")
    assert t.reader == "connectorx" and t.parallelism == 2


def test_full_stanza(tmp_path):
    p = tmp_path / "tables.yaml"
    p.write_text(
        "tables:\n"
        "  - name: shop.orders\n"
        "    cursor: modified_at\n"
        "    primary_key: [shop_id, id]\n"
        "    start: '2025-02-03 04:00:00'\n"
        "    partition: hourly\n"
        "    chunk_rows: 5000\n"
        "    lag: 90s\n"
        "    target: dw.orders\n"
    )
    (t,) = load_tables(p)
    assert t.primary_key == ("shop_id", "id") and t.partition == "hourly"
    assert t.lag == timedelta(seconds=90) and t.start == datetime(2025, 2, 3, 4)
    assert (t.target_schema, t.target_table) == ("dw", "orders")
    assert find_table([t], "shop.orders") is t


@pytest.mark.parametrize(
    "name",
    ["orders", "a.b.c", "shop.ord'ers", 'shop."x"', "shop.x;drop", "shop/x.y", "../etc.passwd",
     "shop..x", "shop.x y", "shop.`x`", "", None, 5],
)
def test_malicious_or_malformed_table_names(name):
    with pytest.raises(ConfigError, match="invalid table|expected 'schema.table'"):
        TableConfig.from_dict({"name": name})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cursor", "update_at; DROP", "cursor column"),
        ("primary_key", ["id", "x'"], "primary key column"),
        ("primary_key", [], "primary_key must be"),
        ("partition", "yearly", "partition must be one of hourly, daily, weekly, monthly"),
        ("chunk_rows", 0, "chunk_rows"),
        ("chunk_rows", "many", "chunk_rows"),
        ("lag", "soon", "lag"),
        ("start", "2025-13-01", "start"),
        ("target", "dw/../x.y", "target"),
        ("reader", "odbc", "reader"),
        ("colour", "blue", "unknown setting"),
    ],
)
def test_bad_values_name_the_table_and_field(field, value, message):
    with pytest.raises(ConfigError, match=message) as e:
        TableConfig.from_dict({"name": "shop.orders", field: value})
    assert "shop.orders" in str(e.value) or field in ("target",)


def test_yaml_errors(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("tables: [ {name: shop.a}, {name: shop.a} ]")
    with pytest.raises(ConfigError, match="listed twice"):
        load_tables(p)
    p.write_text("tables: {")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_tables(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_tables(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="unknown table 'shop.b'"):
        find_table([TableConfig.from_dict({"name": "shop.a"})], "shop.b")


def test_durations():
    assert parse_duration("5m") == timedelta(minutes=5)
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("1week") == timedelta(weeks=1)
    assert parse_duration(30) == timedelta(seconds=30)
    for bad in ("banana", "-5m", "5 parsecs", True):
        with pytest.raises(ConfigError):
            parse_duration(bad)


def test_identifiers_are_quoted_only_after_validation():
    assert mysql_quote("order") == "`order`" and pg_quote("order") == '"order"'
    assert split_qualified("a.b") == ("a", "b")
    for bad in ("a`b", 'a"b', "a b", "1abc", "a" * 65, "a-b"):
        with pytest.raises(ConfigError):
            check_identifier(bad)


def test_database_urls_never_show_the_password():
    u = DatabaseURL.parse("mysql://etl:s3cr%40t@db.example:3307/shop", env="S3RS_MYSQL_URL",
                          schemes=("mysql",), default_port=3306)
    assert (u.user, u.password, u.host, u.port, u.database) == (
        "etl", "s3cr@t", "db.example", 3307, "shop")
    assert "s3cr" not in repr(u) and "s3cr" not in u.redacted()
    with pytest.raises(ConfigError, match="S3RS_MYSQL_URL must look like") as e:
        DatabaseURL.parse("ftp://etl:hunter2@x/y", env="S3RS_MYSQL_URL", schemes=("mysql",),
                          default_port=3306)
    assert "hunter2" not in str(e.value)
    with pytest.raises(ConfigError, match="is not set"):
        DatabaseURL.parse("", env="S3RS_MYSQL_URL", schemes=("mysql",), default_port=3306)


def test_resources_never_show_passwords_in_repr():
    from s3rs_assets.resources import MySQLResource
    from s3rs_assets.warehouse import WarehouseResource

    for r in (MySQLResource(url="mysql://u:SeCrEt@h:3306/d"),
              WarehouseResource(url="postgresql://u:SeCrEt@h:5432/d")):
        assert "SeCrEt" not in repr(r) and "SeCrEt" not in str(r)
