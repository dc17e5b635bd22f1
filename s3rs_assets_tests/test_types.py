"""Every column type of the demo table round-trips exactly, through both readers."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from s3rs_assets import demo_data
from s3rs_assets.errors import SourceSchemaError
from s3rs_assets.io_manager import store_for
from s3rs_assets.types import (
    SourceColumn,
    column_type,
    count_zero_dates,
    select_expr,
    zero_date_columns,
    zero_dates_expr,
)
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import backup, manifest_keys, read_parquet, resources, table_cfg

END = datetime(2025, 5, 1, 18, 0)


@pytest.fixture(scope="module")
def demo(mysql_db):
    import pymysql

    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True,
                           charset="utf8mb4")
    demo_data.create_table(conn, mysql_db, "demo_types", drop=True)
    demo_data.seed(conn, mysql_db, "demo_types", 3000, end=END, span=timedelta(hours=6))
    with conn.cursor() as cur:
        # the extremes, on top of what the seed generates
        cur.execute(
            "INSERT INTO demo_types (id, order_no, partner_id, partner_ref, receiver_name, "
            "receiver_city, address, amount, fee, tax_rate, currency, weight_kg, quantity, "
            "status, is_paid, attrs, delivery_date, delivery_window, created_at, update_at, "
            "paid_at, remark) VALUES (900001, 'X', -2147483648, 18446744073709551615, "
            "'𠀋 🚚 é', '', 'a\\tb\\nc\\\\d \"q\" ''s''', -99999999999999.9999, -0.01, 0.0001, "
            "'EUR', 1e-300, -32768, -128, 1, '{\"k\": [1, \"ü\"]}', '1970-01-01', '838:59:59', "
            "'1970-01-01 00:00:00.000001', '2025-05-01 13:00:00.999999', "
            "'2038-01-19 03:14:07.999999', '')"
        )
    yield conn
    conn.close()


def _mysql_rows(conn, table: str) -> dict[int, dict]:
    cols = demo_data.COLUMNS
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(cols)}, CAST(delivery_window AS CHAR) FROM `{table}` ORDER BY id"
        )
        rows = cur.fetchall()
    out = {}
    for r in rows:
        row = dict(zip(cols, r[:-1], strict=True))
        row["delivery_window"] = r[-1]
        row["is_paid"] = None if row["is_paid"] is None else bool(row["is_paid"])
        out[row["id"]] = row
    return out


def _normalize(row: dict) -> dict:
    out = dict(row)
    if out["partner_ref"] is not None:
        out["partner_ref"] = int(out["partner_ref"])  # DECIMAL(20,0) in parquet
    return out


@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_demo_table_round_trips_exactly(demo, mysql_db, mysql_url, s3_resource, s3_client,
                                        spark_resource, reader):
    cfg = table_cfg(mysql_db, "demo_types", chunk_rows=1200, reader=reader)
    backup(cfg, resources(mysql_url, s3_resource, spark_resource), partition="2025-05-01")
    store = store_for(s3_resource)
    table = read_parquet(s3_client, s3_resource.bucket, manifest_keys(store, cfg.name))
    schema = table.schema
    assert schema.field("amount").type == pa.decimal128(18, 4)
    assert schema.field("partner_ref").type == pa.decimal128(20, 0)
    assert schema.field("is_paid").type == pa.bool_()
    assert schema.field("update_at").type == pa.timestamp("us")
    assert schema.field("paid_at").type == pa.timestamp("us")
    assert schema.field("delivery_date").type == pa.date32()
    assert schema.field("delivery_window").type == pa.string()
    assert schema.field("attrs").type == pa.string()
    expected = _mysql_rows(demo, "demo_types")
    got = {r["id"]: _normalize(r) for r in table.to_pylist()}
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        assert got[key] == row, f"row {key} differs"
    edge = got[900001]
    assert edge["amount"] == Decimal("-99999999999999.9999")
    assert edge["partner_ref"] == 18446744073709551615
    assert edge["receiver_name"] == "𠀋 🚚 é"
    assert edge["address"] == "a\tb\nc\\d \"q\" 's'"
    assert edge["delivery_window"] == "838:59:59"
    assert edge["update_at"] == datetime(2025, 5, 1, 13, 0, 0, 999999)
    assert edge["delivery_date"] == date(1970, 1, 1)
    assert edge["remark"] == "" and edge["fee"] == Decimal("-0.01")


@pytest.mark.parametrize(
    ("data_type", "column_type_", "arrow", "warehouse"),
    [
        ("tinyint", "tinyint(1)", pa.bool_(), "BOOLEAN"),
        ("tinyint", "tinyint(4)", pa.int16(), "SMALLINT"),
        ("bigint", "bigint(20) unsigned", pa.decimal128(20, 0), "DECIMAL(20,0)"),
        ("int", "int(10) unsigned", pa.int64(), "BIGINT"),
        ("datetime", "datetime(6)", pa.timestamp("us"), "TIMESTAMP"),
        ("time", "time", pa.string(), "VARCHAR(20)"),
        ("longtext", "longtext", pa.string(), "VARCHAR(65535)"),
        ("json", "json", pa.string(), "VARCHAR(65535)"),
    ],
)
def test_mapping_table(data_type, column_type_, arrow, warehouse):
    t = column_type(SourceColumn("c", data_type, column_type_))
    assert (t.arrow, t.warehouse) == (arrow, warehouse)


def test_varchar_is_sized_in_bytes_and_capped():
    assert column_type(SourceColumn("c", "varchar", "varchar(100)", char_length=100)).warehouse == (
        "VARCHAR(400)")
    assert column_type(SourceColumn("c", "varchar", "varchar(20000)", char_length=20000)
                       ).warehouse == "VARCHAR(65535)"
    assert column_type(SourceColumn("c", "decimal", "decimal(18,4)", precision=18, scale=4)
                       ).warehouse == "DECIMAL(18,4)"


def test_unmappable_types_are_refused_by_name():
    with pytest.raises(SourceSchemaError, match="'shape'.*'vector.*cannot map"):
        column_type(SourceColumn("shape", "vector", "vector(3)"))
    with pytest.raises(SourceSchemaError, match="DECIMAL\\(65,2\\)"):
        column_type(SourceColumn("big", "decimal", "decimal(65,2)", precision=65, scale=2))


def test_readers_select_what_they_can_decode_exactly():
    dec = SourceColumn("amount", "decimal", "decimal(18,4)", precision=18, scale=4)
    tm = SourceColumn("t", "time", "time")
    dt = SourceColumn("d", "datetime", "datetime(6)")
    assert select_expr(dec) == "`amount`"
    # up to 18 digits: the exact unscaled integer (an integer literal keeps MySQL's DECIMAL
    # arithmetic exact); wider: text, cast back in Arrow
    assert select_expr(dec, "connectorx") == "CAST(`amount` * 10000 AS SIGNED) AS `amount`"
    wide = SourceColumn("w", "decimal", "decimal(65,30)", precision=65, scale=30)
    assert select_expr(wide, "connectorx") == "CAST(`w` AS CHAR) AS `w`"
    whole = SourceColumn("n", "decimal", "decimal(18,0)", precision=18, scale=0)
    assert select_expr(whole, "connectorx") == "CAST(`n` * 1 AS SIGNED) AS `n`"
    assert select_expr(tm) == "CAST(`t` AS CHAR) AS `t`"
    invalid = ("IF((MONTH(`d`) = 0 OR DAYOFMONTH(`d`) = 0 OR (DAYOFMONTH(`d`) > 28 AND "
               "DAYOFMONTH(`d`) > DAYOFMONTH(LAST_DAY(`d`)))), NULL, `d`) AS `d`")
    assert select_expr(dt) == invalid
    # connectorx's non-key dates: one function per value (NULL for every date that is none)
    assert select_expr(dt, "connectorx") == "(`d` + INTERVAL 0 SECOND) AS `d`"
    day = SourceColumn("e", "date", "date")
    assert select_expr(day, "connectorx") == "(`e` + INTERVAL 0 DAY) AS `e`"
    # a key column keeps the test; the cursor, which `KeyColumns.readable` screens in every
    # read's predicate (test_zero_dates: connectorx panics on what it would let through),
    # is read bare
    assert select_expr(dt, "connectorx", key=True) == invalid
    assert select_expr(dt, "connectorx", key=True, screened=True) == "`d`"
    assert select_expr(dt, "jdbc", key=True) == "`d`"  # JDBC predicates must hit the index
    bit1 = SourceColumn("b", "bit", "bit(1)")
    assert select_expr(bit1, "connectorx") == "CAST(`b` AS UNSIGNED) AS `b`"


def test_zero_dates_are_counted_in_non_key_date_columns():
    cols = [SourceColumn("id", "int", "int"), SourceColumn("u", "datetime", "datetime(6)"),
            SourceColumn("d", "date", "date"), SourceColumn("n", "varchar", "varchar(3)"),
            SourceColumn("m", "datetime", "datetime", nullable=False)]
    assert zero_date_columns(cols, ("u", "id")) == ["d", "m"]
    # MySQL's own NULLs of the nullable ones: no second date check per row on the server
    assert zero_dates_expr(cols, ("u", "id")) == "((`d` IS NULL)) AS `s3rs_null_dates`"
    assert zero_dates_expr(cols, ("u", "d", "id")) == "(0) AS `s3rs_null_dates`"
    assert zero_dates_expr(cols[:3], ("u", "d")) is None


def test_zero_dates_are_the_nulls_read_beyond_mysqls_own():
    """d: 1 real NULL + 2 zero dates read as NULL; m (NOT NULL): 1 zero date."""
    batch = pa.table({
        "d": pa.array([None, None, None, date(2025, 1, 1)], pa.date32()),
        "m": pa.array([None, datetime(2025, 1, 1), datetime(2025, 1, 2), None],
                      pa.timestamp("us")),
        "s3rs_null_dates": pa.array([1, 0, 0, 0], pa.int16()),
    })
    assert count_zero_dates(batch, ["d", "m"]) == 4
    assert count_zero_dates(batch.drop_columns(["s3rs_null_dates"]), ["d", "m"]) == 0


@pytest.mark.parametrize(
    ("data_type", "column_type_", "arrow", "warehouse"),
    [
        ("bit", "bit(64)", pa.decimal128(20, 0), "DECIMAL(20,0)"),
        ("bit", "bit(63)", pa.int64(), "BIGINT"),
        ("uuid", "uuid", pa.string(), "VARCHAR(36)"),
        ("inet6", "inet6", pa.string(), "VARCHAR(45)"),
        ("inet4", "inet4", pa.string(), "VARCHAR(15)"),
        ("blob", "blob", pa.binary(), "VARBYTE(65535)"),
        ("longblob", "longblob", pa.binary(), "VARBYTE(16777216)"),
    ],
)
def test_mapping_of_wide_and_mariadb_types(data_type, column_type_, arrow, warehouse):
    t = column_type(SourceColumn("c", data_type, column_type_))
    assert (t.arrow, t.warehouse) == (arrow, warehouse)


DECIMAL_EDGES = [
    # (d18_4, d18_8, d18_0, d38_10): limits, negative zero, the smallest steps, NULL
    ("99999999999999.9999", "9999999999.99999999", "999999999999999999",
     "9999999999999999999999999999.9999999999"),
    ("-99999999999999.9999", "-9999999999.99999999", "-999999999999999999",
     "-9999999999999999999999999999.9999999999"),
    ("-0.0000", "-0.00000000", "-0", "-0.0000000000"),
    ("0.0001", "-0.00000001", "1", "0.0000000001"),
    (None, None, None, None),
]


@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_decimals_at_their_limits_round_trip_exactly(mysql_conn, mysql_db, mysql_url,
                                                     s3_resource, s3_client, spark_resource,
                                                     reader):
    """DECIMAL(p<=18) read as unscaled integers and wider ones as text give the same
    exact values, negative zero (stored by MySQL as -0) included."""
    table = f"dec_edges_{reader}"
    with mysql_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{table}`")
        cur.execute(
            f"CREATE TABLE `{table}` (id INT PRIMARY KEY, update_at DATETIME(6) NOT NULL, "
            "a DECIMAL(18,4), b DECIMAL(18,8), c DECIMAL(18,0), d DECIMAL(38,10), "
            "KEY (update_at, id))"
        )
        for i, row in enumerate(DECIMAL_EDGES, start=1):
            cur.execute(
                f"INSERT INTO `{table}` VALUES (%s, '2025-05-01 10:00:00', "
                "CAST(%s AS DECIMAL(18,4)), CAST(%s AS DECIMAL(18,8)), "
                "CAST(%s AS DECIMAL(18,0)), CAST(%s AS DECIMAL(38,10)))",
                (i, *row),
            )
        cur.execute(f"SELECT id, a, b, c, d FROM `{table}` ORDER BY id")
        want = {r[0]: r[1:] for r in cur.fetchall()}
    cfg = table_cfg(mysql_db, table, reader=reader)
    backup(cfg, resources(mysql_url, s3_resource, spark_resource), partition="2025-05-01")
    got = read_parquet(s3_client, s3_resource.bucket, manifest_keys(store_for(s3_resource),
                                                                      cfg.name))
    assert got.schema.field("a").type == pa.decimal128(18, 4)
    assert got.schema.field("c").type == pa.decimal128(18, 0)
    rows = {r["id"]: (r["a"], r["b"], r["c"], r["d"]) for r in got.to_pylist()}
    assert rows == want
    for key, values in want.items():  # same digits, not only equal values
        assert [str(v) for v in rows[key]] == [str(v) for v in values], key
    assert rows[2][0] == Decimal("-99999999999999.9999") and rows[5] == (None,) * 4
