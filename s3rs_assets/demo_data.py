"""The demo table, generated inside MariaDB.

One table shaped like the settlement table s3rs was written for, filled with
`INSERT ... SELECT` from MariaDB's Sequence engine, so a million rows take seconds and
no row ever passes through Python. Used by `make demo`, by the tests and by the
benchmark.

Every value is a deterministic function of the row's id (and of its timestamp group),
so two seeds with the same arguments produce the same table. Rows share `update_at`
values in groups of `tie_min`..`tie_max` rows (the case a plain `update_at > watermark`
gets wrong), the groups' timestamps spread evenly over `[end - span, end]`, and the
columns carry the values that break naive pipelines: 4-byte UTF-8 (CJK extension B,
emoji), NULLs next to empty strings, tabs, newlines, backslashes and quotes, BIGINT
UNSIGNED near 2**64, DECIMAL(18,4) at its limits, SMALLINT/TINYINT extremes, JSON,
DATE/TIME/TIMESTAMP columns and microsecond timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from s3rs_assets.identifiers import mysql_table

DEMO_SCHEMA = "s3rs_demo"
DEMO_TABLE = "settlement_normal_delivery_detail"

CREATE_SQL = """\
CREATE TABLE IF NOT EXISTS `{schema}`.`{table}` (
  id BIGINT NOT NULL AUTO_INCREMENT,
  order_no VARCHAR(32) NOT NULL,
  partner_id INT NOT NULL,
  partner_ref BIGINT UNSIGNED NULL,
  receiver_name VARCHAR(100) NULL,
  receiver_city VARCHAR(64) NOT NULL,
  address TEXT NULL,
  amount DECIMAL(18,4) NOT NULL,
  fee DECIMAL(12,2) NULL,
  tax_rate DECIMAL(5,4) NOT NULL,
  currency CHAR(3) NOT NULL,
  weight_kg DOUBLE NULL,
  quantity SMALLINT NOT NULL,
  status TINYINT NOT NULL,
  is_paid TINYINT(1) NOT NULL,
  attrs JSON NULL,
  delivery_date DATE NULL,
  delivery_window TIME NULL,
  created_at DATETIME(6) NOT NULL,
  update_at DATETIME(6) NOT NULL,
  paid_at TIMESTAMP(6) NULL DEFAULT NULL,
  remark VARCHAR(255) NULL,
  PRIMARY KEY (id),
  KEY idx_update_at (update_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
"""

COLUMNS = (
    "id",
    "order_no",
    "partner_id",
    "partner_ref",
    "receiver_name",
    "receiver_city",
    "address",
    "amount",
    "fee",
    "tax_rate",
    "currency",
    "weight_kg",
    "quantity",
    "status",
    "is_paid",
    "attrs",
    "delivery_date",
    "delivery_window",
    "created_at",
    "update_at",
    "paid_at",
    "remark",
)

# Edge values, exported so tests can look for them.
MAX_UNSIGNED_BIGINT = 18446744073709551615
MAX_AMOUNT = "99999999999999.9999"
NAMES = (
    "Alice Martin",
    "José Álvarez-Núñez",
    "Zoë Brontë",
    "王小明",
    "山田 太郎",
    "김민준",
    "Ça va 🚚 Express",
    "O'Brien & Sons",
    "Mỹ Nguyễn",
    "Ελένη Παπαδοπούλου",
    "𠮷野家 配送",
    "🚚📦 Lieferung",
)
CITIES = (
    "Shanghai",
    "Beijing",
    "São Paulo",
    "München",
    "Zürich",
    "New York",
    "Tōkyō",
    "Kraków",
    "深圳",
    "Reykjavík",
)
STREETS = ("Nanjing Rd", "Rue de Rivoli", "Hauptstraße", "Calle de Alcalá", "中山路")
# Remarks as SQL expressions (control characters built with CHAR() so nothing is lost to
# escaping between Python, the wire and the server).
_T, _N, _R, _B = (f"CHAR({c} USING utf8mb4)" for c in (9, 10, 13, 92))
REMARKS_SQL = (
    "NULL",
    f"CONCAT('tab', {_T}, 'separated', {_T}, 'value')",
    f"CONCAT('line one', {_N}, 'line two', {_R}, {_N}, 'line three')",
    f"CONCAT('back', {_B}, 'slash C:', {_B}, 'temp', {_B}, {_B}, 'x ', {_B}, 'N')",
    "CONCAT('it''s \"quoted\" `twice`')",
    "''",
    "CONCAT('delivered ok #', r.id)",
    "'comma, semicolon; pipe| caret^ 🚚'",
)


@dataclass(frozen=True)
class SeedInfo:
    rows: int
    first_id: int
    last_id: int
    min_update_at: datetime
    max_update_at: datetime
    distinct_update_at: int


def _sql_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"


def _case(index_sql: str, values: tuple[str, ...]) -> str:
    """`CASE index WHEN 0 THEN v0 ... END` with `values` already SQL expressions."""
    whens = " ".join(f"WHEN {i} THEN {v}" for i, v in enumerate(values))
    return f"CASE {index_sql} {whens} END"


def _select_sql() -> str:
    """Column expressions in terms of `r.id` and `r.ts` (the group's update_at).
    Long on purpose: one SQL statement, one line per generated column."""
    names = _case("r.id % 13", (*map(_sql_str, NAMES), "NULL"))
    cities = _case("(r.id * 31) % 10", tuple(map(_sql_str, CITIES)))
    streets = _case("r.id % 5", tuple(map(_sql_str, STREETS)))
    channels = _case("r.id % 3", ("'web'", "'app'", "'partner'"))
    exprs = {
        "id": "r.id",
        "order_no": "CONCAT('SO', DATE_FORMAT(r.ts, '%Y%m%d'), LPAD(r.id, 12, '0'))",
        "partner_id": "1000 + (r.id * 7919) % 5000",
        "partner_ref": (
            f"CASE WHEN r.id % 997 = 0 THEN {MAX_UNSIGNED_BIGINT}"
            f" WHEN r.id % 97 = 0 THEN {MAX_UNSIGNED_BIGINT} - (r.id % 1000)"
            " WHEN r.id % 13 = 0 THEN NULL"
            " ELSE (r.id * 2654435761) % 1000000007 END"
        ),
        "receiver_name": names,
        "receiver_city": cities,
        "address": (
            "CASE WHEN r.id % 11 = 0 THEN NULL"
            " WHEN r.id % 500 = 0 THEN REPEAT('a very long address line, ', 120)"
            f" ELSE CONCAT(1 + r.id % 9999, ' ', {streets}, ', Apt ', r.id % 300) END"
        ),
        "amount": (
            f"CASE WHEN r.id % 1009 = 0 THEN {MAX_AMOUNT}"
            f" WHEN r.id % 1013 = 0 THEN -{MAX_AMOUNT}"
            " WHEN r.id % 1019 = 0 THEN 0"
            " WHEN r.id % 10 = 0 THEN -CAST(((r.id * 37) % 10000000) / 100 AS DECIMAL(18,4))"
            " ELSE CAST(((r.id * 7907) % 1000000000) / 10000 AS DECIMAL(18,4)) END"
        ),
        "fee": (
            "CASE WHEN r.id % 7 = 0 THEN NULL WHEN r.id % 1021 = 0 THEN 9999999999.99"
            " ELSE CAST(((r.id * 131) % 100000) / 100 AS DECIMAL(12,2)) END"
        ),
        "tax_rate": _case("r.id % 5", ("0", "0.0600", "0.0900", "0.1300", "0.2000")),
        "currency": _case("r.id % 4", ("'CNY'", "'USD'", "'EUR'", "'JPY'")),
        "weight_kg": (
            "CASE WHEN r.id % 17 = 0 THEN NULL WHEN r.id % 2017 = 0 THEN 1.5e300"
            " WHEN r.id % 2027 = 0 THEN 1e-300"
            " ELSE CAST((r.id % 100000) AS DOUBLE) / 7 END"
        ),
        "quantity": (
            "CASE WHEN r.id % 2003 = 0 THEN 32767 WHEN r.id % 2011 = 0 THEN -32768"
            " ELSE 1 + r.id % 50 END"
        ),
        "status": (
            "CASE WHEN r.id % 3001 = 0 THEN 127 WHEN r.id % 3011 = 0 THEN -128 ELSE r.id % 6 END"
        ),
        "is_paid": "IF(r.id % 3 = 0, 0, 1)",
        "attrs": (
            "CASE WHEN r.id % 9 = 0 THEN NULL ELSE JSON_OBJECT("
            f"'channel', {channels},"
            " 'priority', r.id % 3, 'fragile', IF(r.id % 4 = 0, TRUE, FALSE),"
            " 'tags', JSON_ARRAY('a', CONCAT('t', r.id % 10)),"
            " 'note', IF(r.id % 5 = 0, '🚚 fast \"express\"', 'std')) END"
        ),
        "delivery_date": (
            "CASE WHEN r.id % 19 = 0 THEN NULL WHEN r.id % 4001 = 0 THEN DATE '9999-12-31'"
            " WHEN r.id % 4003 = 0 THEN DATE '1970-01-01'"
            " ELSE DATE(r.ts) + INTERVAL (r.id % 5) DAY END"
        ),
        "delivery_window": (
            "CASE WHEN r.id % 23 = 0 THEN NULL WHEN r.id % 29 = 0 THEN TIME '23:59:59'"
            " ELSE SEC_TO_TIME((r.id * 97) % 86400) END"
        ),
        "created_at": (
            "r.ts - INTERVAL (r.id % 86400) SECOND - INTERVAL (r.id % 7) * 142857 MICROSECOND"
        ),
        "update_at": "r.ts",
        "paid_at": (
            "IF(r.id % 3 = 0, NULL,"
            " r.ts - INTERVAL (r.id % 3600) SECOND + INTERVAL (r.id % 2) * 250000 MICROSECOND)"
        ),
        "remark": _case("r.id % 8", REMARKS_SQL),
    }
    assert tuple(exprs) == COLUMNS
    return ",\n  ".join(exprs.values())


_SELECT = _select_sql()
_GROUPS = "_s3rs_seed_groups"
_BATCH_ROWS = 100_000


def create_table(conn, schema: str, table: str, *, drop: bool = False) -> None:
    """Create the demo table (schema must exist); with `drop`, recreate it empty."""
    name = mysql_table(schema, table)  # validates both identifiers
    with conn.cursor() as cur:
        if drop:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(CREATE_SQL.format(schema=schema, table=table))


def _mix(n: int) -> int:
    """A small deterministic integer hash (no Python `hash()`: that is salted per process)."""
    n = (n * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
    n ^= n >> 15
    n = (n * 0x2C1B3C6D) & 0xFFFFFFFF
    return n ^ (n >> 12)


def group_sizes(rows: int, tie_min: int, tie_max: int) -> list[int]:
    """Sizes of the equal-`update_at` groups, each in [tie_min, tie_max], summing to rows.

    Exact whenever rows >= tie_min and tie_max >= 2 * tie_min - 1 (true for the
    defaults); otherwise the last group may fall outside the bounds.
    """
    if tie_min < 1 or tie_max < tie_min:
        raise ValueError(f"need 1 <= tie_min <= tie_max, got {tie_min}, {tie_max}")
    sizes: list[int] = []
    left = rows
    while left > 0:
        if left <= tie_max:
            size = left
        else:
            size = tie_min + _mix(len(sizes)) % (tie_max - tie_min + 1)
            if left - size < tie_min:  # keep the remainder big enough for one more group
                size = max(1, left - tie_min)
        sizes.append(size)
        left -= size
    return sizes


def group_timestamps(groups: int, end: datetime, span: timedelta) -> list[datetime]:
    """`groups` increasing timestamps spread evenly over [end - span, end], both ends exact.

    Inner timestamps are cut to whole seconds except every third one, so the table has
    both kinds (cut only when the spacing is at least 2 s, to keep them distinct).
    """
    start = end - span
    if groups == 1:
        return [end]
    step_us = (span // timedelta(microseconds=1)) / (groups - 1)
    out = []
    for g in range(groups):
        ts = start + timedelta(microseconds=round(step_us * g))
        if 0 < g < groups - 1 and g % 3 != 0 and step_us >= 2_000_000:
            ts = ts.replace(microsecond=0)
        out.append(ts)
    out[-1] = end
    return out


def seed(
    conn,
    schema: str,
    table: str,
    rows: int,
    *,
    end: datetime,
    span: timedelta = timedelta(days=3),
    first_id: int = 1,
    tie_min: int = 50,
    tie_max: int = 400,
) -> SeedInfo:
    """Insert `rows` rows with ids first_id.. and update_at in [end - span, end].

    `end` is a naive datetime in the server's time zone, or an aware one (converted to
    UTC). The table must exist and hold none of these ids. `conn` is an autocommit
    pymysql connection; its session time zone is set to UTC for the inserts and restored.
    Long on purpose: the generation steps in order, each timed for the report.
    """
    if rows < 1:
        raise ValueError(f"rows must be positive, got {rows}")
    if first_id < 1:
        raise ValueError(f"first_id must be positive, got {first_id}")
    if span <= timedelta(0):
        raise ValueError(f"span must be positive, got {span}")
    if end.tzinfo is not None:
        end = end.astimezone(UTC).replace(tzinfo=None)
    target = mysql_table(schema, table)
    groups_table = mysql_table(schema, _GROUPS)
    sizes = group_sizes(rows, tie_min, tie_max)
    stamps = group_timestamps(len(sizes), end, span)
    seq = f"`{schema}`.seq_0_to_{max(sizes) - 1}"

    # (group, first row offset, size, timestamp) per group; few thousand rows at most.
    groups, lo = [], 0
    for g, (n, ts) in enumerate(zip(sizes, stamps, strict=True)):
        groups.append((g, lo, n, ts))
        lo += n

    with conn.cursor() as cur:
        cur.execute("SELECT @@session.time_zone")
        saved_tz = cur.fetchone()[0]
        cur.execute("SET time_zone = '+00:00'")
        try:
            cur.execute(f"DROP TEMPORARY TABLE IF EXISTS {groups_table}")
            cur.execute(
                f"CREATE TEMPORARY TABLE {groups_table} (g INT NOT NULL PRIMARY KEY,"
                " lo BIGINT NOT NULL, n INT NOT NULL, ts DATETIME(6) NOT NULL) ENGINE=InnoDB"
            )
            cur.executemany(
                f"INSERT INTO {groups_table} (g, lo, n, ts) VALUES (%s, %s, %s, %s)", groups
            )
            # Batches of whole groups, about _BATCH_ROWS rows each.
            batch_start, batch_rows = 0, 0
            for g, _lo, n, _ts in groups:
                batch_rows += n
                if batch_rows >= _BATCH_ROWS or g == len(groups) - 1:
                    cur.execute(
                        f"INSERT INTO {target} ({', '.join(COLUMNS)})\n"
                        f"SELECT\n  {_SELECT}\n"
                        f"FROM (SELECT grp.lo + o.seq + {int(first_id)} AS id, grp.ts AS ts\n"
                        f"      FROM {groups_table} grp STRAIGHT_JOIN {seq} o ON o.seq < grp.n\n"
                        f"      WHERE grp.g BETWEEN {batch_start} AND {g}) r"
                    )  # no parameters: the SQL holds literal '%' signs
                    batch_start, batch_rows = g + 1, 0
        finally:
            cur.execute(f"DROP TEMPORARY TABLE IF EXISTS {groups_table}")
            cur.execute("SET time_zone = %s", (saved_tz,))

    return SeedInfo(
        rows=rows,
        first_id=first_id,
        last_id=first_id + rows - 1,
        min_update_at=stamps[0],
        max_update_at=stamps[-1],
        distinct_update_at=len(set(stamps)),
    )
