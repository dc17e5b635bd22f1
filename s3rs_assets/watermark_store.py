"""Where watermark records live in S3, and the only code that writes them.

Every change is a read-modify-write through `update()`, made compare-and-swap with S3
conditional writes: `If-None-Match: *` when the primary does not exist yet, `If-Match:
<etag read>` otherwise. A writer that loses the race (412, or 409 from a concurrent
conditional write) re-reads and re-applies its change function to the newer record, so two
runs working on different partitions merge; the change function itself raises
WatermarkConflict when the newer record is incompatible with what the run did.

Layout under the configured prefix:
    watermarks/tables/<table>.json      primary
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from s3rs_assets.errors import WatermarkConflict, WatermarkError
from s3rs_assets.watermark import WatermarkRecord

CAS_ATTEMPTS = 8
_RACE_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


class WatermarkStore:
    """Read and compare-and-swap watermark records for one bucket and prefix."""

    def __init__(self, client: Any, bucket: str, prefix: str, session_id: str | None = None):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.session_id = session_id

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def primary_key(self, table: str) -> str:
        return self._key("watermarks", "tables", f"{table}.json")

    def read_versioned(self, table: str) -> tuple[WatermarkRecord | None, str | None]:
        """The primary record and its ETag, or (None, None) when there is none yet."""
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.primary_key(table))
        except ClientError as e:
            if _code(e) in ("NoSuchKey", "404"):
                return None, None
            raise
        body = obj["Body"].read()
        return WatermarkRecord.from_json(body, table_name=table), obj["ETag"]

    def read(self, table: str) -> WatermarkRecord | None:
        return self.read_versioned(table)[0]

    def update(
        self, table: str, change: Callable[[WatermarkRecord], None]
    ) -> WatermarkRecord:
        """Apply `change` to the latest record and store it compare-and-swap.

        `change` mutates the record in place and may be called more than once (after a lost
        race); it raises WatermarkConflict when it cannot be applied to the newer record.
        """
        for attempt in range(CAS_ATTEMPTS):
            current, etag = self.read_versioned(table)
            record = current.model_copy(deep=True) if current else WatermarkRecord.new(table)
            change(record)
            record.refresh()
            body = record.to_json().encode()
            cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=self.primary_key(table),
                    Body=body,
                    ContentType="application/json",
                    **cond,
                )
            except ClientError as e:
                if _code(e) in _RACE_CODES:
                    time.sleep(min(0.05 * 2**attempt, 1.0))
                    continue
                raise
            return record
        raise WatermarkConflict(
            f"watermark of {table} changed {CAS_ATTEMPTS} times while saving; "
            "another run keeps writing it"
        )

    def put_unconditional(self, record: WatermarkRecord) -> None:
        """Overwrite the primary (operator `watermark set`, recovery); validates first."""
        WatermarkRecord.from_json(record.to_json(), table_name=record.table_name)
        self.client.put_object(
            Bucket=self.bucket,
            Key=self.primary_key(record.table_name),
            Body=record.to_json().encode(),
            ContentType="application/json",
        )


def require(record: WatermarkRecord | None, table: str) -> WatermarkRecord:
    if record is None:
        raise WatermarkError(f"no watermark for {table}")
    return record
