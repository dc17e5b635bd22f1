"""What one Dagster run costs the watermark in S3, counted on the real boto3 clients.

Every client s3rs builds through `S3Resource.client` gets a botocore hook recording each
API call as (operation, key or prefix); the Spark tasks' own clients (data files, other
processes) are not seen, and only watermark keys are asserted. A backup run reads the
record once, writes the primary once per batch it checkpoints, and writes the daily and session
backups once, at its end or when it fails.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import pytest
from botocore.awsrequest import AWSResponse

from s3rs_assets.names import metadata_facts
from s3rs_assets.resources import S3Resource
from s3rs_assets.watermark import WatermarkRecord
from s3rs_assets_tests.helpers import backup, make_ties_table, resources, table_cfg, ties

D = datetime(2025, 3, 3)


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any):
        yield self._body


class S3Calls:
    """Records the API calls of every client s3rs builds; can refuse one primary PUT."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.fail_primary_put: int | None = None  # the n-th PUT of a primary gets a 403
        self._primary_puts = 0
        self._clients: set[int] = set()

    def attach(self, client: Any) -> None:
        if id(client) in self._clients:  # S3Resource hands out one client per instance
            return
        self._clients.add(id(client))
        client.meta.events.register("before-parameter-build.s3", self.record)
        client.meta.events.register("before-send.s3.PutObject", self.refuse)

    def record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.seen.append((model.name, params.get("Key") or params.get("Prefix") or ""))

    def refuse(self, request: Any, **_: Any) -> AWSResponse | None:
        if "/watermarks/tables/" not in request.url:
            return None
        self._primary_puts += 1
        if self._primary_puts != self.fail_primary_put:
            return None
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
            b"<Message>injected by test</Message><RequestId>test</RequestId></Error>"
        )
        headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
        return AWSResponse(request.url, 403, headers, _Raw(body))

    def count(self, op: str, key: str) -> int:
        return sum(1 for o, k in self.seen if o == op and k == key)


@pytest.fixture
def s3_calls(monkeypatch) -> S3Calls:
    calls = S3Calls()
    build = S3Resource.client

    def client(self: S3Resource) -> Any:
        c = build(self)
        calls.attach(c)
        return c

    monkeypatch.setattr(S3Resource, "client", client)
    return calls


def _body(s3_client, bucket: str, key: str) -> bytes:
    return s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_a_backup_run_reads_the_watermark_once_and_backs_it_up_at_its_end(
    s3_calls, mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    # a brand-new table: 900 rows on day 1, nothing on day 2, 300 on day 3, nothing on day 4
    make_ties_table(mysql_conn, "wmr_runs", ties(900, D, 3) + ties(300, D + timedelta(2), 2, 1001))
    cfg = table_cfg(mysql_db, "wmr_runs", chunk_rows=250, start="2025-03-03")
    layout, bucket = s3_resource.layout, s3_resource.bucket
    primary = layout.watermark_primary(cfg.name)
    with dg.instance_for_test() as instance:
        result = backup(
            cfg,
            resources(mysql_url, s3_resource, spark_resource),
            start="2025-03-03",
            end="2025-03-06",
            instance=instance,
        )
    events = {e.partition: metadata_facts(e.materialization.metadata)
              for e in result.get_asset_materialization_events()}
    assert sorted(events) == ["2025-03-03", "2025-03-04", "2025-03-05", "2025-03-06"]
    chunks = sum(md["chunks"] for md in events.values() if "chunks" in md)
    assert chunks == 4 + 2
    md = events["2025-03-06"]  # the run's last partition carries the run's summary
    daily = layout.watermark_daily(cfg.name, datetime.now(UTC).date())
    session = layout.watermark_session(cfg.name, result.run_id)

    # one read of the primary for the whole run (it is missing: one look at the backups too)
    assert s3_calls.count("GetObject", primary) == 1
    assert [c for c in s3_calls.seen if c[0] == "GetObject"] == [
        ("GetObject", primary),
        ("GetObject", daily),
    ]
    # one PUT per batch of 250 rows (a batch may span partitions; the empty days are
    # closed in those same writes) and the stage's close in the IO manager
    assert s3_calls.count("PutObject", primary) == 5 + 1
    # the backups once, at the run's end
    assert s3_calls.count("PutObject", daily) == 1
    assert s3_calls.count("PutObject", session) == 1
    assert md["watermark_saved"] == "daily, primary, session written"
    body = _body(s3_client, bucket, primary)
    assert _body(s3_client, bucket, daily) == body == _body(s3_client, bucket, session)
    rec = WatermarkRecord.from_json(body, table_name=cfg.name)
    assert rec.mysql_rows_extracted == 1200 and rec.mysql_status == "success"


def test_a_failed_run_backs_up_the_progress_it_made(
    s3_calls, mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    make_ties_table(mysql_conn, "wmr_fail", ties(900, D, 3))
    cfg = table_cfg(mysql_db, "wmr_fail", chunk_rows=250, start="2025-03-03")
    s3_calls.fail_primary_put = 3  # the third checkpoint cannot be saved
    with dg.instance_for_test() as instance:
        result = backup(
            cfg,
            resources(mysql_url, s3_resource, spark_resource),
            partition="2025-03-03",
            instance=instance,
            raise_on_error=False,
        )
    assert not result.success
    layout, bucket = s3_resource.layout, s3_resource.bucket
    primary = layout.watermark_primary(cfg.name)
    body = _body(s3_client, bucket, primary)
    rec = WatermarkRecord.from_json(body, table_name=cfg.name)
    assert rec.mysql_status == "failed" and "AccessDenied" in rec.last_error
    part = rec.partitions["2025-03-03"]
    assert part.status == "partial" and part.rows == 500  # two checkpoints landed
    # the failure path wrote the backups: a lost primary costs no more than this run
    daily = layout.watermark_daily(cfg.name, datetime.now(UTC).date())
    session = layout.watermark_session(cfg.name, result.run_id)
    assert _body(s3_client, bucket, daily) == body == _body(s3_client, bucket, session)
    assert s3_calls.count("PutObject", daily) == 1
