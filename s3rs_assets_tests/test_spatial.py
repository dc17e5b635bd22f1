"""Spatial columns travel as WKB: MySQL's ST_AsBinary bytes land in PostgreSQL's BYTEA
unchanged, and Redshift's merge turns them into GEOMETRY (its SQL text is asserted)."""

from __future__ import annotations

import uuid

import dagster as dg
import psycopg
import pytest

from s3rs_assets.config import TableConfig
from s3rs_assets.io_manager import store_for
from s3rs_assets.load import LoadTarget
from s3rs_assets.load.ddl import create_table_sql
from s3rs_assets.load.sql import create_stage_sql, insert_sql, merge_sql
from s3rs_assets.names import CHECK_NAME
from s3rs_assets.reconcile import ReconcileOptions, reconcile_table
from s3rs_assets.resources import MySQLResource
from s3rs_assets.types import SourceColumn, column_type, select_expr
from s3rs_assets.verify import mysql_field, warehouse_field
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.helpers import resources, sync, table_cfg

SHAPES = [
    ("POINT(1 2)", "POLYGON((0 0,0 1,1 1,1 0,0 0))", "LINESTRING(0 0,1 1,2 0.5)"),
    ("POINT(-122.4194 37.7749)",
     "POLYGON((0 0,10 0,10 10,0 10,0 0),(2 2,2 3,3 3,3 2,2 2))",
     "MULTIPOLYGON(((0 0,1 0,1 1,0 0)),((5 5,6 5,6 6,5 5)))"),
    ("POINT(0 0)", "POLYGON((1 1,2 1,2 2,1 1))",
     "GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))"),
    (None, None, None),
]


def _target() -> LoadTarget:
    cols = [
        SourceColumn("id", "int", "int", nullable=False),
        SourceColumn("update_at", "datetime", "datetime(6)"),
        SourceColumn("g", "polygon", "polygon"),
    ]
    cfg = TableConfig.from_dict({"name": "shop.zones", "target": "dw.zones"})
    return LoadTarget.from_table_config(cfg, cols, ("id",))


def test_mapping_and_reader_expression():
    for t in ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
              "multipolygon", "geometrycollection"):
        ct = column_type(SourceColumn("g", t, t))
        assert (ct.warehouse, ct.postgres, str(ct.arrow)) == ("GEOMETRY", "BYTEA", "binary")
        for reader in ("connectorx", "jdbc"):
            assert select_expr(SourceColumn("g", t, t), reader) == "ST_AsBinary(`g`) AS `g`"


def test_redshift_sql_builds_geometry_from_the_staged_wkb():
    target = _target()
    assert '"g" GEOMETRY' in create_table_sql(target, "redshift")
    assert '"g" BYTEA' in create_table_sql(target, "postgres")
    assert '"g" VARBYTE(16777216)' in create_stage_sql(target, "redshift")
    assert '"g" BYTEA' in create_stage_sql(target, "postgres")
    assert insert_sql(target, dedupe=False, dialect="redshift") == (
        'INSERT INTO "dw"."zones" ("id", "update_at", "g")\n'
        """SELECT "id", "update_at", ST_GeomFromWKB(FROM_VARBYTE("g", 'hex'))\n"""
        'FROM "s3rs_stage" AS "newest"\n'
        'WHERE NOT EXISTS (SELECT 1 FROM "dw"."zones" AS "cur" WHERE "cur"."id" = '
        '"newest"."id")'
    )
    deduped = merge_sql(target, True, "redshift")[1]
    assert """SELECT "id", "update_at", ST_GeomFromWKB(FROM_VARBYTE("g", 'hex'))\nFROM (""" in (
        deduped)
    assert "ST_GeomFromWKB" not in "".join(merge_sql(target, True, "postgres"))
    g = target.columns[2]
    assert mysql_field(g) == "COALESCE(LOWER(HEX(ST_AsBinary(`g`))), 'N')"
    assert warehouse_field(g, "redshift") == "COALESCE(TO_HEX(ST_AsBinary(\"g\")), 'N')"
    assert warehouse_field(g, "postgres") == "COALESCE(ENCODE(\"g\", 'hex'), 'N')"


@pytest.fixture
def zones(mysql_conn, mysql_db):
    name = f"zones_{uuid.uuid4().hex[:8]}"
    with mysql_conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, update_at DATETIME(6) NOT NULL, "
                    "pt POINT NULL, poly POLYGON NULL, g GEOMETRY NULL, KEY (update_at))")
        for i, (pt, poly, g) in enumerate(SHAPES):
            vals = [f"ST_GeomFromText('{v}')" if v else "NULL" for v in (pt, poly, g)]
            cur.execute(f"INSERT INTO `{name}` VALUES ({i}, '2025-03-01 08:0{i}', "
                        f"{', '.join(vals)})")
    yield name
    with mysql_conn.cursor() as cur:
        cur.execute(f"DROP TABLE `{name}`")


@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_points_polygons_and_nulls_end_to_end(mysql_conn, mysql_db, mysql_url, pg_url,
                                              s3_resource, spark_resource, zones, reader):
    schema = f"dw_geo_{reader}"
    cfg = table_cfg(mysql_db, zones, reader=reader, chunk_rows=2, target=f"{schema}.{zones}")
    with dg.instance_for_test() as instance:
        result = sync(cfg, resources(mysql_url, s3_resource, spark_resource, pg_url),
                      partition="2025-03-01", instance=instance)
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == CHECK_NAME]
    assert check.passed
    with mysql_conn.cursor() as cur:
        cur.execute(f"SELECT id, ST_AsBinary(pt), ST_AsBinary(poly), ST_AsBinary(g) "
                    f"FROM `{zones}` ORDER BY id")
        expected = [tuple(r) for r in cur.fetchall()]
    with psycopg.connect(pg_url) as pg:
        got = pg.execute(f'SELECT id, pt, poly, g FROM "{schema}"."{zones}" ORDER BY id'
                         ).fetchall()
    assert got == expected
    assert expected[0][1][:5] == b"\x01\x01\x00\x00\x00"  # little-endian WKB point
    assert expected[-1][1:] == (None, None, None)
    report = reconcile_table(cfg, MySQLResource(url=mysql_url), WarehouseResource(url=pg_url),
                             s3_resource, store_for(s3_resource),
                             ReconcileOptions(columns="all"))
    assert report.total == 0
