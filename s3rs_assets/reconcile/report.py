"""What one reconcile pass is asked (`ReconcileOptions`) and what it answers
(`ReconcileReport`): counts per kind, the repair, the exit decision (`ok`), and the stable
JSON document `s3rs reconcile --json` prints (`REPORT_VERSION`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from s3rs_assets.errors import ConfigError
from s3rs_assets.reconcile.diff import KINDS, DiffResult
from s3rs_assets.reconcile.repair import RepairPlan, RepairResult, describe_examples

#: JSON document version of `ReconcileReport.as_json` (bump on incompatible change)
REPORT_VERSION = 1
@dataclass(frozen=True)
class ReconcileOptions:
    columns: Literal["key", "all"] = "key"
    apply: bool = False
    from_key: int | None = None
    to_key: int | None = None
    threshold: int = 256
    workers: int = 2
    examples: int = 10
    max_repairs: int = 100_000

    def check(self, table: str) -> None:
        if self.columns not in ("key", "all"):
            raise ConfigError(f"{table}: --columns must be 'key' or 'all', not {self.columns!r}")
        if (
            self.from_key is not None
            and self.to_key is not None
            and self.from_key > self.to_key
        ):
            raise ConfigError(f"{table}: --from {self.from_key} is after --to {self.to_key}")
        for name, v, lo in (("threshold", self.threshold, 1), ("workers", self.workers, 1),
                            ("max_repairs", self.max_repairs, 1), ("examples", self.examples, 0)):
            if not isinstance(v, int) or v < lo:
                raise ConfigError(f"{table}: {name} must be an integer >= {lo}, not {v!r}")


@dataclass
class ReconcileReport:
    table: str
    target: str
    dialect: str
    columns: str
    applied: bool
    bound: datetime
    diff: DiffResult
    examples: int = 10
    plan: RepairPlan | None = None
    repairs: list[RepairResult] = field(default_factory=list)
    resumed: list[RepairResult] = field(default_factory=list)
    pending: str | None = None  # a repair left pending by a crashed run (not applied now)
    timings: dict[str, float] = field(default_factory=dict)
    pass_id: str = ""
    #: key text -> why, for planned repairs still different after the load (`confirm`)
    after_repair: dict[str, str] = field(default_factory=dict)
    #: a note on what the pass could not read (e.g. the watermark record, read-only)
    notes: list[str] = field(default_factory=list)

    @property
    def unrepaired(self) -> list[str]:
        """Keys (text) the repair should have fixed and did not, without a reason."""
        return sorted(k for k, why in self.after_repair.items() if why == "not_repaired")

    def not_yet(self) -> dict[str, int]:
        """Differences left for the next sync or pass because MySQL changed them meanwhile."""
        out = dict(self.plan.not_yet()) if self.plan else {}
        for why in self.after_repair.values():
            if why != "not_repaired":
                out[why] = out.get(why, 0) + 1
        return out

    def ok(self) -> bool:
        """Exit 0: nothing differs, or `--apply` repaired all of it (or MySQL changed what it
        left during the pass: "not yet", never a failure)."""
        if not self.applied:
            return self.total == 0
        if self.plan is None:
            return self.total == 0
        return not self.unrepaired and not self.plan.over_cap()

    def counts(self) -> dict[str, int]:
        return {k: self.diff.count(k) for k in KINDS}

    @property
    def total(self) -> int:
        return len(self.diff.differences)

    def repaired(self) -> dict[str, int]:
        r = self.repairs
        return {
            "upserted": sum(x.upserts for x in r if x.loaded),
            "deleted": sum(x.deletes for x in r if x.loaded and not x.soft),
            "soft_deleted": sum(x.rows_soft_deleted for x in r if x.loaded),
        }

    def as_json(self, *, full: bool = True) -> dict[str, Any]:
        """The stable document `s3rs reconcile --json` prints (REPORT_VERSION)."""
        d = self.diff
        doc: dict[str, Any] = {
            "version": REPORT_VERSION,
            "table": self.table,
            "target": self.target,
            "dialect": self.dialect,
            "columns": self.columns,
            "applied": self.applied,
            "safety_bound": self.bound.isoformat(timespec="microseconds"),
            "counts": self.counts(),
            "total_differences": self.total,
            "mysql_rows": d.mysql_rows,
            "warehouse_rows": d.warehouse_rows,
            "ranges_compared": d.segments_compared,
            "leaves_fetched": d.leaves_fetched,
            "rows_fetched": d.rows_fetched,
            "levels": d.levels,
            "queries": d.queries,
            "examples": describe_examples(d.differences, self.examples),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "pending_repair": self.pending,
        }
        if full:
            doc["differences"] = [x.as_json() for x in d.differences]
        if self.plan is not None:
            doc["repair"] = {
                "pass_id": self.pass_id,
                "planned_upserts": self.plan.upserts,
                "planned_deletes": self.plan.deletes,
                "skipped": dict(self.plan.skipped),
                "not_yet": self.not_yet(),
                "not_repaired": self.unrepaired,
                **self.repaired(),
                "files": [r.file for r in self.repairs],
            }
        doc["ok"] = self.ok()
        if self.notes:
            doc["notes"] = list(self.notes)
        if self.resumed:
            doc["resumed_repairs"] = [
                {"file": r.file, "loaded_now": r.loaded} for r in self.resumed
            ]
        return doc
