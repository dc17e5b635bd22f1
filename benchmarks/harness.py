"""What every suite shares: timing, result lines with rows/s, the printed table, JSON output.

A suite appends `Line`s (stage, tool, rows, seconds) and free-form `notes`/`details` to a
`Report`; `render_lines` prints them as one aligned table; `Report.write_json` saves the
whole report. rows/s is rows divided by wall-clock seconds; `x floor` divides by the
floor of the same stage (the raw command-line tools), so runs on different machines
compare by ratio.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MB = 1024 * 1024


def say(msg: str = "") -> None:
    """Progress and results go to stdout at once (the smoke test and `tee` read them)."""
    print(msg, flush=True)


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    """`with timed() as t: ...` then `t["s"]`: wall-clock seconds of the block."""
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["s"] = time.perf_counter() - t0


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's ended and reaped children: taken
    around one subprocess, its own CPU (a server started earlier, a child too, is reaped
    only at the end). On a shared machine CPU compares code trees better than wall time."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def uptime() -> str:
    """`uptime`'s line (load averages): printed at a suite's start and end, since this
    machine is shared and figures taken under load are not comparable."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        la = os.getloadavg()
        return f"load average: {la[0]:.2f}, {la[1]:.2f}, {la[2]:.2f}"


@dataclass
class Line:
    """One row of the printed table."""

    stage: str
    tool: str
    rows: int | None
    seconds: float | None
    floor_rps: float | None = None
    peak_mb: float | None = None
    key: str = ""

    @property
    def rows_per_s(self) -> float | None:
        if not self.rows or not self.seconds or self.seconds <= 0:
            return None
        return self.rows / self.seconds

    @property
    def x_floor(self) -> float | None:
        rps = self.rows_per_s
        return rps / self.floor_rps if rps and self.floor_rps else None

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "stage": self.stage,
            "tool": self.tool,
            "rows": self.rows,
            "seconds": self.seconds,
            "rows_per_s": self.rows_per_s,
            "x_floor": self.x_floor,
            "peak_mb": self.peak_mb,
        }


@dataclass
class Report:
    """Everything one suite measured: printed lines, notes and any JSON-able details."""

    suite: str
    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)  # printed under the table
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, stage: str, tool: str, rows: int | None, seconds: float | None,
            floor_rps: float | None = None, peak_mb: float | None = None,
            key: str = "") -> Line:
        line = Line(stage, tool, rows, seconds, floor_rps, peak_mb, key)
        self.lines.append(line)
        return line

    def line(self, key: str) -> Line | None:
        return next((ln for ln in self.lines if ln.key == key), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "lines": [ln.as_json() for ln in self.lines],
            "notes": self.notes,
            "summary": self.summary,
            **self.details,
        }


def fmt_num(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def render_lines(lines: list[Line]) -> str:
    """The aligned table: stage, tool, rows, seconds, rows/s, x floor, peak RSS."""
    head = ("stage", "tool", "rows", "seconds", "rows/s", "x floor", "peak RSS MB")
    rows = [
        (
            ln.stage,
            ln.tool,
            fmt_num(ln.rows),
            fmt_num(ln.seconds, ".1f" if (ln.seconds or 0) >= 0.1 else ".3f"),
            fmt_num(ln.rows_per_s),
            fmt_num(ln.x_floor, ".2f"),
            fmt_num(ln.peak_mb),
        )
        for ln in lines
    ]
    return render_grid(head, rows, right={2, 3, 4, 5, 6})


def render_grid(head: tuple[str, ...], rows: list[tuple[str, ...]], right: set[int]) -> str:
    """Columns padded to their widest cell; the `right` ones right-aligned."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def print_report(report: Report) -> None:
    say("")
    say(f"== suite {report.suite}")
    if report.lines:
        say(render_lines(report.lines))
    for s in report.summary:
        say(s)
    for n in report.notes:
        say(f"note: {n}")


def machine_info() -> dict[str, Any]:
    """Date, cores, RAM, Python: printed once per run beside the figures."""
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_mb"] = int(f.readline().split()[1]) // 1024
    except OSError:
        pass
    return info


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str))
    say(f"wrote {path}")
