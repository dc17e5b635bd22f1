"""RSS of this process tree, sampled every 0.2 s: driver, Spark JVM, Spark's Python workers.

Each part's high-water mark is kept per phase (`with sampler.measure("backup"): ...`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from benchmarks.harness import MB

SAMPLE_SECONDS = 0.2

def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, comm, rss bytes) for every process we can read."""
    page = os.sysconf("SC_PAGE_SIZE")
    out: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        lp, rp = stat.find("("), stat.rfind(")")
        comm = stat[lp + 1 : rp]
        fields = stat[rp + 2 :].split()
        # fields[0] is state, [1] ppid, ... [21] rss (pages)
        try:
            out[int(entry)] = (int(fields[1]), comm, int(fields[21]) * page)
        except (IndexError, ValueError):
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class MemSampler(threading.Thread):
    """Sums the RSS of this process's tree every 0.2 s, split into the driver (this
    process), the Spark JVM (java) and Spark's Python workers (pyspark.daemon and its
    forks); keeps high-water marks per phase."""

    def __init__(self, exclude: set[int] | None = None):
        super().__init__(daemon=True, name="bench-mem")
        self.root = os.getpid()
        self.exclude = exclude or set()
        self.phase: str | None = None
        self.peaks: dict[str, dict[str, float]] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self._kinds: dict[tuple[int, str], str] = {}

    def _kind(self, pid: int, comm: str) -> str:
        if pid == self.root:
            return "driver"
        # keyed on (pid, comm): spark-submit's shell script execs into java under its pid
        if (pid, comm) not in self._kinds:
            cmd = _cmdline(pid)
            exe = cmd.split(" ", 1)[0]
            if comm == "java" or exe.endswith("/java") or exe == "java":
                kind = "jvm"
            elif comm.startswith("python") and "pyspark" in cmd:
                kind = "workers"  # pyspark.daemon and the workers it forks
            else:
                kind = "other"
            self._kinds[(pid, comm)] = kind
        return self._kinds[(pid, comm)]

    def sample(self) -> dict[str, float]:
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _c, _r) in table.items():
            children.setdefault(ppid, []).append(pid)
        sums = {"driver": 0.0, "jvm": 0.0, "workers": 0.0, "other": 0.0}
        stack = [self.root]
        while stack:
            pid = stack.pop()
            if pid in self.exclude or pid not in table:
                continue
            _ppid, comm, rss = table[pid]
            sums[self._kind(pid, comm)] += rss
            stack.extend(children.get(pid, ()))
        sums["total"] = sum(sums.values())
        return sums

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                s = self.sample()
            except Exception:  # a process vanished mid-walk: try again next tick
                s = None
            with self.lock:
                if s is not None and self.phase is not None:
                    peak = self.peaks.setdefault(self.phase, {})
                    for k, v in s.items():
                        peak[k] = max(peak.get(k, 0.0), v)
            self.stop_event.wait(SAMPLE_SECONDS)

    @contextmanager
    def measure(self, phase: str) -> Iterator[None]:
        with self.lock:
            self.phase = phase
            self.peaks[phase] = {}
        try:
            yield
        finally:
            # one last sample so a short phase still has a reading
            try:
                s = self.sample()
                with self.lock:
                    peak = self.peaks.setdefault(phase, {})
                    for k, v in s.items():
                        peak[k] = max(peak.get(k, 0.0), v)
            except Exception:
                pass
            with self.lock:
                self.phase = None

    def peak_mb(self, phase: str, kind: str = "total") -> float | None:
        v = self.peaks.get(phase, {}).get(kind)
        return None if v is None else v / MB


