"""The CPU seconds a command costs the whole machine, split by who spent them (issue 19: on a
2-core machine a whole command cannot finish faster than its CPU seconds / 2).

    python -m benchmarks.cpu_split [--label NAME] -- COMMAND ARGS...

Every process is read from /proc before and after the command: user + system time of itself
and of the children it has reaped (a pyspark daemon's finished workers, the s3rs server's
finished sync workers, the command's own JVM), grouped by what it is: the command (its
rusage, with everything it started and waited for; or "this process" when the work runs
in the measuring process itself), mariadbd, postgres, java, the pyspark
daemon and workers, moto, the s3rs server, other. Processes that start and end inside the
command and are reaped by a process outside these groups are missed (init reaps orphans);
those started during the command and still there at its end (or zombies not reaped yet)
count whole. The machine's busy time from /proc/stat is printed beside it: the sum of the
groups should come close to it on an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def _group(pid: int, parent: int | None = None) -> str:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    if not raw and parent:  # a zombie (a finished sync worker not reaped yet): its parent's
        return _group(parent)
    cmd = raw.replace(b"\0", b" ").decode(errors="replace")
    if comm in ("mariadbd", "mysqld"):
        return "mariadbd"
    if comm == "postgres" or comm.startswith("postgres"):
        return "postgres"
    if comm == "java":
        return "java (Spark)"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return "pyspark workers"
    if "moto" in cmd:
        return "moto (S3)"
    if "s3rs" in cmd and " server " in f" {cmd} ":
        return "s3rs server + its sync workers"
    return "other"


def snapshot() -> dict[tuple[int, str], tuple[str, float]]:
    """(pid, start time) -> (group, CPU seconds incl. reaped children)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            text = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        rest = text[text.rindex(")") + 2:].split()
        cpu = sum(int(rest[i]) for i in (11, 12, 13, 14)) / HZ
        out[(int(d), rest[19])] = (_group(int(d), int(rest[1])), cpu)
    return out


def busy() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / HZ


class Split:
    """`with Split() as cpu:` ... then `cpu.groups` (core-seconds per group), `cpu.busy` (the
    machine's busy core-seconds) and `cpu.wall`; `str(cpu)` is one line."""

    def __enter__(self) -> Split:
        self.load = os.getloadavg()[0]
        self._a, self._b0 = snapshot(), busy()
        self._ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._me0 = resource.getrusage(resource.RUSAGE_SELF)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        me1 = resource.getrusage(resource.RUSAGE_SELF)
        self.busy = busy() - self._b0
        b = snapshot()
        self.groups: dict[str, float] = {
            "the command": ru1.ru_utime + ru1.ru_stime - self._ru0.ru_utime - self._ru0.ru_stime,
            "this process": me1.ru_utime + me1.ru_stime - self._me0.ru_utime - self._me0.ru_stime,
        }
        for key, (group, cpu) in b.items():
            if key[0] == os.getpid():
                continue
            # a process started during the command and still there (or a zombie not reaped
            # yet: the s3rs server's finished sync worker) counts whole; one reaped already
            # is in its parent's children time
            before = self._a[key][1] if key in self._a else 0.0
            self.groups[group] = self.groups.get(group, 0.0) + cpu - before
        self.total = sum(self.groups.values())

    def __str__(self) -> str:
        parts = ", ".join(f"{g} {s:.1f}" for g, s in sorted(self.groups.items(),
                                                             key=lambda x: -x[1]) if s >= 0.05)
        return (f"{self.total:.1f} core-s in {self.wall:.1f} s wall (>= {self.total / CORES:.1f} s "
                f"on {CORES} cores; machine busy {self.busy:.1f}; load {self.load:.2f}): {parts}")

    def as_dict(self) -> dict[str, object]:
        return {"wall": self.wall, "total": self.total, "busy": self.busy, "load": self.load,
                "groups": {g: round(s, 2) for g, s in self.groups.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command after --")
    with Split() as cpu:
        rc = subprocess.run(cmd, check=False).returncode
    print(f"{args.label + ': ' if args.label else ''}exit {rc}, {cpu}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
