"""The Redshift SQL of reconcile, as text (like the load's statements), and the key-space
splitting it is built on."""

from __future__ import annotations

from s3rs_assets.load import LoadTarget
from s3rs_assets.reconcile.keys import Segment, restrict, root, split
from s3rs_assets.reconcile.sql import (
    TableSQL,
    add_deleted_at_sql,
    create_keys_sql,
    delete_keys_sql,
    first_key_is_integer,
    insert_keys_sql,
    soft_delete_sql,
)
from s3rs_assets.types import SourceColumn
from s3rs_assets.verify import warehouse_hash_expr

COLS = [
    SourceColumn("id", "bigint", "bigint", nullable=False),
    SourceColumn("code", "varchar", "varchar(8)", nullable=False, char_length=8),
    SourceColumn("update_at", "datetime", "datetime(6)"),
]
T = LoadTarget("dw", "orders", COLS, ("id", "code"), "update_at", "shop.orders")
KEY = (
    "COALESCE(CAST(\"id\" AS VARCHAR), 'N') || '|' || "
    "COALESCE(CAST(OCTET_LENGTH(\"code\") AS VARCHAR) || ':' || \"code\", 'N')"
)
#: the row hash has the cursor as microseconds since 1970 (verify.warehouse_hash_field)
CURSOR_US = (
    "CAST(CAST(DATEDIFF(second, CAST('1970-01-01' AS TIMESTAMP), \"update_at\") AS BIGINT) "
    "* 1000000 + DATEDIFF(microsecond, DATE_TRUNC('second', \"update_at\"), \"update_at\") "
    "AS VARCHAR)"
)
HASH = (
    f"CAST(STRTOL(SUBSTRING(SHA2({KEY} || '|' || "
    f"COALESCE({CURSOR_US}, 'N'), 256), 1, 15), 16) "
    "AS DECIMAL(38,0))"
)
SCOPE = '("update_at" IS NULL OR "update_at" < %s) AND "_s3rs_deleted_at" IS NULL'
W = TableSQL("redshift", "dw", "orders", T, "key", soft_deletes=True)


def test_redshift_checksum_of_an_interval_split():
    sp = split(Segment(lo=0, hi=100), 4)
    assert W.split_checksums(sp, "B") == (
        'SELECT LEAST(GREATEST((CAST("id" AS BIGINT) - %s) / %s, 0), %s) AS "s3rs_child", '
        "COUNT(*), "
        f"COALESCE(CAST(SUM({HASH}) AS DECIMAL(38,0)), 0) "
        f'FROM "dw"."orders" WHERE 1 = 1 AND {SCOPE} GROUP BY 1',
        [1, 25, 3, "B"],
    )


def test_redshift_checksum_of_a_hash_split_inside_one_key_value():
    sp = split(Segment(lo=5, hi=6, open_lo=False, open_hi=False, prefix="a"), 16)
    sql, params = W.split_checksums(sp, "B")
    assert sql == (
        f'SELECT LOWER(SUBSTRING(SHA2({KEY}, 256), 2, 1)) AS "s3rs_child", COUNT(*), '
        f"COALESCE(CAST(SUM({HASH}) AS DECIMAL(38,0)), 0) "
        f'FROM "dw"."orders" WHERE "id" > %s AND "id" <= %s AND '
        f"LOWER(SUBSTRING(SHA2({KEY}, 256), 1, 1)) = %s AND {SCOPE} GROUP BY 1"
    )
    assert params == [5, 6, "a", "B"]


def test_redshift_leaf_rows_and_lookup():
    seg = split(Segment(lo=0, hi=100), 4).child(1)
    assert W.leaf_rows(seg, "B") == (
        f'SELECT {KEY}, "id", "code", "update_at", {HASH} FROM "dw"."orders" '
        f'WHERE "id" > %s AND "id" <= %s AND {SCOPE}',
        [25, 50, "B"],
    )
    assert W.lookup([(1, "a"), (2, "b")], W.key_cursor_select()) == (
        f'SELECT {KEY}, "update_at", "_s3rs_deleted_at" FROM "dw"."orders" '
        'WHERE (("id" = %s AND "code" = %s) OR ("id" = %s AND "code" = %s))',
        [1, "a", 2, "b"],
    )


def test_redshift_prefix_segments_share_one_scan():
    """Hash-prefix segments of one length: their splits and their leaves, many per query."""
    assert W.prefix_split_checksums(["ab", "cd"], 1, "B") == (
        f'SELECT LOWER(SUBSTRING(SHA2({KEY}, 256), 1, 3)) AS "s3rs_child", COUNT(*), '
        f"COALESCE(CAST(SUM({HASH}) AS DECIMAL(38,0)), 0) "
        f'FROM "dw"."orders" WHERE LOWER(SUBSTRING(SHA2({KEY}, 256), 1, 2)) IN (%s, %s) '
        f"AND {SCOPE} GROUP BY 1",
        ["ab", "cd", "B"],
    )
    assert W.prefix_leaf_rows(["a0f"], "B") == (
        f'SELECT {KEY}, "id", "code", "update_at", {HASH} FROM "dw"."orders" '
        f"WHERE LOWER(SUBSTRING(SHA2({KEY}, 256), 1, 3)) IN (%s) AND {SCOPE}",
        ["a0f", "B"],
    )


MATCH = (
    'WHERE "dw"."orders"."id" = "s3rs_reconcile_keys"."id" AND '
    '"dw"."orders"."code" = "s3rs_reconcile_keys"."code"\n'
    '  AND ("dw"."orders"."update_at" = "s3rs_reconcile_keys"."s3rs_seen" OR '
    '("dw"."orders"."update_at" IS NULL AND "s3rs_reconcile_keys"."s3rs_seen" IS NULL))\n'
)


def test_redshift_delete_and_soft_delete_merge():
    assert create_keys_sql(T, "redshift") == (
        'CREATE TEMP TABLE "s3rs_reconcile_keys" (\n    "id" BIGINT,\n    "code" VARCHAR(32),\n'
        '    "s3rs_seen" TIMESTAMP,\n    "s3rs_action" VARCHAR(8)\n)'
    )
    assert insert_keys_sql(T, 2) == (
        'INSERT INTO "s3rs_reconcile_keys" ("id", "code", "s3rs_seen", "s3rs_action") '
        "VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)"
    )
    assert delete_keys_sql(T, soft=False) == (
        'DELETE FROM "dw"."orders"\nUSING "s3rs_reconcile_keys"\n'
        + MATCH
        + '  AND "s3rs_reconcile_keys"."s3rs_action" IN (\'replace\', \'delete\')'
    )
    assert delete_keys_sql(T, soft=True).endswith("IN ('replace')")
    assert soft_delete_sql(T) == (
        'UPDATE "dw"."orders" SET "_s3rs_deleted_at" = %s\nFROM "s3rs_reconcile_keys"\n'
        + MATCH
        + '  AND "s3rs_reconcile_keys"."s3rs_action" IN (\'delete\')\n'
        '  AND "dw"."orders"."_s3rs_deleted_at" IS NULL'
    )
    assert add_deleted_at_sql(T) == (
        'ALTER TABLE "dw"."orders" ADD COLUMN "_s3rs_deleted_at" TIMESTAMP'
    )


def test_mysql_checksum_uses_div_and_the_same_canonical_text():
    m = TableSQL("mysql", "shop", "orders", T, "all")
    sql, params = m.split_checksums(split(Segment(lo=0, hi=100), 4), "B")
    assert sql.startswith(
        "SELECT LEAST(GREATEST((GREATEST(`id`, %s) - %s) DIV %s, 0), %s) AS `s3rs_child`"
    )
    code = "CONVERT(`code` USING utf8mb4)"
    assert f"CONCAT(LENGTH({code}), ':', {code})" in sql
    assert "`_s3rs_deleted_at`" not in sql and params == [1, 1, 25, 3, "B"]


def test_postgres_numbers_children_of_an_integer_key_in_bigint():
    """BIGINT `/` truncates like DIV (the clamp makes any negative 0), without NUMERIC
    per row; BIGINT UNSIGNED (NUMERIC in the warehouse) keeps DIV."""
    w = TableSQL("postgres", "dw", "orders", T, "all")
    sp = split(Segment(lo=0, hi=100), 4)
    assert w.child_index(sp) == (
        'LEAST(GREATEST((CAST("id" AS BIGINT) - %s) / %s, 0), %s)',
        [1, 25, 3],
    )
    ucol = SourceColumn("id", "bigint", "bigint(20) unsigned", nullable=False)
    u = LoadTarget("dw", "orders", [ucol, COLS[2]], ("id",), "update_at", "shop.orders")
    assert TableSQL("postgres", "dw", "orders", u, "all").child_index(sp)[0] == (
        'LEAST(GREATEST(DIV("id" - %s, %s), 0), %s)'
    )


def test_postgres_joins_the_all_columns_text_with_concat_ws():
    """Every field is COALESCEd, so CONCAT_WS prints what `||` would; Redshift and verify's
    key hash (fields that may be NULL) keep `||`."""
    pg = TableSQL("postgres", "dw", "orders", T, "all").row_hash()
    assert pg.startswith("('x' || SUBSTR(encode(substring(sha256(convert_to(CONCAT_WS('|', ")
    mine = TableSQL("mysql", "dw", "orders", T, "all").row_hash()
    assert mine.startswith("CAST(CONV(SUBSTRING(SHA2(CONCAT_WS('|', ")
    assert "CONCAT_WS" not in TableSQL("redshift", "dw", "orders", T, "all").row_hash()
    assert "CONCAT_WS" not in warehouse_hash_expr(T, "postgres")


def test_splitting_the_key_space():
    r = root(True, (1, 1000))
    assert (r.lo, r.hi, r.open_lo, r.open_hi) == (0, 1000, True, True)
    sp = split(r, 10)
    assert sp.width == 100 and sp.count == 10
    first, last = sp.child(0), sp.child(9)
    assert first.open_lo and not first.open_hi and (first.lo, first.hi) == (0, 100)
    assert last.open_hi and not last.open_lo and (last.lo, last.hi) == (900, 1000)
    one = Segment(lo=4, hi=5, open_lo=False, open_hi=False)
    assert split(one, 300).digits == 2 and split(one, 300).child("0f").prefix == "0f"
    assert root(False, None) == Segment()
    r2 = restrict(r, 10, 20)
    assert (r2.lo, r2.hi, r2.open_lo, r2.open_hi) == (9, 20, False, False)
    assert first_key_is_integer(T)


def test_redshift_arithmetic_hash_for_an_integer_key_and_a_time_cursor():
    """int_hash.py's products of (digit + offset) modulo 2^31-1, as Redshift receives them:
    three digits of the BIGINT key, two of the cursor's microseconds (NULL: -2^57)."""
    one = LoadTarget("dw", "orders", [COLS[0], COLS[2]], ("id",), "update_at", "shop.orders")
    w = TableSQL("redshift", "dw", "orders", one, "key")
    assert w.arithmetic and W.arithmetic is False  # W's key has a VARCHAR column
    assert not TableSQL("redshift", "dw", "orders", one, "all").arithmetic
    sec = "DATEDIFF(second, CAST('1970-01-01' AS TIMESTAMP), \"update_at\")"
    us = "DATEDIFF(microsecond, DATE_TRUNC('second', \"update_at\"), \"update_at\")"
    digits = [
        'MOD("id", 536870912)',
        'MOD(("id" / 536870912), 536870912)',
        '(("id" / 288230376151711744))',
        f"COALESCE(MOD({sec}, 512) * 1000000 + {us}, 0)",
        f"COALESCE({sec} / 512, -268435456)",
    ]
    offsets = [[1043823035, 983985458, 924147881, 864310304, 804472727],
               [1550815661, 1490978084, 1431140507, 1371302930, 1311465353]]
    parts = []
    for j in range(2):
        h = f"({digits[0]} + CAST({offsets[j][0]} AS BIGINT))"
        for d, t in zip(digits[1:], offsets[j][1:], strict=True):
            h = f"MOD({h} * ({d} + {t}), 2147483647)"
        parts.append(h)
    assert w.row_hash() == f"CAST(({parts[0]} + 2147483648 * {parts[1]}) AS DECIMAL(38,0))"
    sp = split(Segment(lo=-(2**63) - 1, hi=2**63 - 1), 4)  # a span past BIGINT: in DECIMAL
    assert w.child_index(sp) == (
        'LEAST(GREATEST(FLOOR((CAST("id" AS DECIMAL(20,0)) - %s) / %s), 0), %s)',
        [-(2**63), 2**62, 3],
    )
