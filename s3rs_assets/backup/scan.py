"""Where a sync has backup work, found with index probes only (no Spark, no writes), and
the closing of the empty stretches the probes proved empty.

A stretch of partitions the record has never seen costs one `first_row` probe, which names
the first of them holding a row and proves those before it empty; the empty ones past the
safety bound are folded into the record's closed ranges with one compare-and-swap write.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from s3rs_assets.source import first_row
from s3rs_assets.watermark import Position, WatermarkRecord


@dataclass
class Scan:
    """Where a sync has backup work, found with index probes only (no Spark, no writes)."""

    work: list[str]  # incomplete partitions with rows below the bound, or partial ones
    empty: list[tuple[str, datetime, datetime]]  # fresh, empty and past the bound: closable
    probes: int = 0


def scan(
    conn: Any,
    src: Any,
    record: WatermarkRecord | None,
    windows: list[tuple[str, datetime, datetime]],
    upper: datetime,
) -> Scan:
    """Walk `windows` (oldest first) below `upper`. A partial partition is work when a probe
    from its cursor finds a row or its window is past the bound (it can be closed); a stretch
    of fresh partitions costs one `first_row` probe, which names the first of them holding a
    row (work) and proves those before it empty."""
    record = record or WatermarkRecord.new("")
    out = Scan([], [])
    fresh = [
        w[2] > w[1] and w[0] not in record.partitions and not record.is_complete(*w)
        for w in windows
    ]
    starts = [w[1] for w in windows]
    i = 0
    while i < len(windows) and windows[i][1] < upper:
        key, start, end = windows[i]
        if not fresh[i]:
            state = record.partitions.get(key)
            if state is not None and state.status != "complete":
                # partial: work if it has new rows, or if its window can now be closed
                resume = state.cursor or Position(c=start, pk=None)
                out.probes += 1
                if end <= upper or first_row(conn, src, resume, min(end, upper)) is not None:
                    out.work.append(key)
            i += 1
            continue
        k = i
        while k < len(windows) and fresh[k] and windows[k][1] < upper:
            k += 1
        hi = min(windows[k - 1][2], upper)
        row = first_row(conn, src, Position(c=start, pk=None), hi)
        out.probes += 1
        target = k if row is None else bisect.bisect_right(starts, row.c) - 1
        out.empty += [w for w in windows[i:target] if w[2] <= upper]
        if row is None:
            i = k
        else:
            out.work.append(windows[target][0])
            i = target + 1
    return out


def close_empty(store: Any, table: str, empty: list[tuple[str, datetime, datetime]]) -> None:
    """Fold partitions a scan proved empty (and complete: past the bound) into the record's
    closed ranges with one compare-and-swap write, unless another run touched them since."""
    if not empty:
        return

    def change(rec: WatermarkRecord) -> None:
        for key, start, end in empty:
            if key not in rec.partitions:
                rec.close_empty(key, start, end)

    store.update(table, change)
