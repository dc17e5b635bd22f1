"""The benchmark tables in MySQL schema `s3rs_bench`, deterministic, reused when present.

* `demo_table`: the demo shape (`demo_data.seed`, 22 columns, ties of 50-400 rows per
  `update_at`), every row in one daily partition;
* `decimal_table`: a settlement shape (issue 13): 20 columns, seven DECIMAL(18,4) /
  DECIMAL(18,8), ties of 300 rows per timestamp, all rows dated the day before today;
* `history_table`: 20 years of daily partitions with rows on about 1 day in 100 (issue 8);
* `small_table`: a composite key (INT, VARCHAR) and a quarter of its rows per timestamp;
* `add_rows`: an increment stamped a little before the server's clock.

Bulk rows come from MariaDB's sequence engine (`seq_1_to_N`): one INSERT ... SELECT per
batch, no rows through Python.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

from benchmarks.harness import say
from benchmarks.services import SCHEMA, ensure_mysql_schema, mysql_connect, mysql_exec
from s3rs_assets.config import DatabaseURL
from s3rs_assets.demo_data import create_table, seed

BATCH = 200_000

DECIMAL_DDL = """CREATE TABLE `{schema}`.`{table}` (
  id BIGINT NOT NULL PRIMARY KEY,
  settlement_no VARCHAR(32) NOT NULL,
  merchant_id INT NOT NULL,
  channel VARCHAR(16) NOT NULL,
  currency CHAR(3) NOT NULL,
  amount DECIMAL(18,4) NOT NULL,
  fee DECIMAL(18,4) NOT NULL,
  tax DECIMAL(18,4) NULL,
  net_amount DECIMAL(18,4) NOT NULL,
  fx_rate DECIMAL(18,8) NOT NULL,
  discount DECIMAL(18,4) NULL,
  refund_amount DECIMAL(18,4) NOT NULL,
  status TINYINT NOT NULL,
  is_settled TINYINT(1) NOT NULL,
  batch_id BIGINT NOT NULL,
  remark VARCHAR(64) NULL,
  settle_date DATE NOT NULL,
  created_at DATETIME(6) NOT NULL,
  update_at DATETIME(6) NOT NULL,
  paid_at DATETIME(6) NULL,
  KEY idx_update_at (update_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""

DECIMAL_TIE = 300  # rows per update_at value


def _decimal_select(first_id: int, day: datetime, tie: int, origin: int = 0) -> str:
    """Rows `first_id + seq - 1`; update_at advances one second per `tie` ids from `day`
    (counted from id `origin`)."""
    i = f"(s.seq + {first_id - 1})"
    ts = f"TIMESTAMP'{day:%Y-%m-%d %H:%M:%S}' + INTERVAL (({i} - {origin}) DIV {tie}) SECOND"
    return f"""SELECT {i}, CONCAT('ST', LPAD({i}, 12, '0')), {i} % 5000,
  ELT(1 + {i} % 4, 'card', 'wallet', 'bank', 'cash'), ELT(1 + {i} % 3, 'CNY', 'USD', 'EUR'),
  ({i} * 7919 % 100000000) / 10000, ({i} % 99991) / 10000,
  IF({i} % 10 = 0, NULL, ({i} % 7777) / 100),
  ({i} * 7919 % 100000000) / 10000 - ({i} % 99991) / 10000, 6.5 + ({i} % 100000) / 100000000,
  IF({i} % 3 = 0, NULL, ({i} % 12345) / 10000), -(({i} % 5) * 1.25), {i} % 6, {i} % 2,
  {i} DIV 1000, IF({i} % 4 = 0, NULL, CONCAT('batch ', {i} % 97)), DATE({ts}),
  {ts} - INTERVAL 1 HOUR, {ts}, IF({i} % 5 = 0, NULL, {ts} + INTERVAL 1 MINUTE)"""


def _table_rows(u: DatabaseURL, table: str) -> tuple[int, Any, Any] | None:
    """(count, min update_at, max id) of an existing table, else None."""
    rows = mysql_exec(
        u,
        "SELECT COUNT(*) FROM information_schema.tables "
        f"WHERE table_schema = '{SCHEMA}' AND table_name = '{table}'",
    )
    if not rows[0][0]:
        return None
    return mysql_exec(u, f"SELECT COUNT(*), MIN(update_at), MAX(id) FROM `{table}`")[0]


def _insert_seq(u: DatabaseURL, table: str, rows: int, select_for) -> None:
    """INSERT ... SELECT over `seq_1_to_<batch>` in batches; `select_for(first_id)`."""
    done = 0
    with mysql_connect(u, SCHEMA) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        while done < rows:
            n = min(BATCH, rows - done)
            cur.execute(f"INSERT INTO `{table}` {select_for(done + 1)} FROM seq_1_to_{n} s")
            done += n
        cur.execute(f"ANALYZE TABLE `{table}`")
        cur.fetchall()


def decimal_table(u: DatabaseURL, rows: int, day: date) -> dict[str, Any]:
    """`dec_<rows>`: the settlement shape, every row on `day`; reseeded when it is not."""
    table = f"dec_{rows}"
    ensure_mysql_schema(u)
    start = datetime.combine(day, datetime.min.time()) + timedelta(hours=1)
    have = _table_rows(u, table)
    if have and have[0] == rows and have[1] == start and have[2] == rows:
        return {"table": table, "seeded": False, "seconds": 0.0}
    t0 = time.perf_counter()
    mysql_exec(u, f"DROP TABLE IF EXISTS `{table}`",
               DECIMAL_DDL.format(schema=SCHEMA, table=table))
    tie = min(DECIMAL_TIE, max(1, rows // 4))
    _insert_seq(u, table, rows, lambda first: _decimal_select(first, start, tie))
    return {"table": table, "seeded": True, "seconds": time.perf_counter() - t0}


def increment_at(minutes: int = 30) -> datetime:
    """When an increment's rows are stamped: `minutes` ago (UTC, naive), but not before
    today. Past midnight, rows stamped yesterday land in a day the sync before already
    closed: stragglers, left to reconcile, and the sync rightly has nothing to do."""
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    return max(now - timedelta(minutes=minutes), now.replace(hour=0, minute=0, second=0))


def add_decimal_rows(u: DatabaseURL, table: str, first_id: int, n: int, at: datetime) -> None:
    """`n` more rows from id `first_id`, all stamped `at` (one tie)."""
    select = _decimal_select(first_id, at, n + 1, origin=first_id)
    with mysql_connect(u, SCHEMA) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"INSERT INTO `{table}` {select} FROM seq_1_to_{n} s")


def demo_table(u: DatabaseURL, table: str, rows: int, end: datetime,
               span: timedelta = timedelta(hours=21)) -> dict[str, Any]:
    """The demo shape with `rows` rows in [end - span, end]; reused when it holds exactly
    this seed (same count, ids and first/last `update_at`)."""
    ensure_mysql_schema(u)
    with mysql_connect(u) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables "
            "WHERE table_schema = %s AND table_name = %s", (SCHEMA, table))
        if cur.fetchone()[0]:
            cur.execute(f"SELECT COUNT(*), MIN(update_at), MAX(update_at), MIN(id), MAX(id) "
                        f"FROM `{SCHEMA}`.`{table}`")
            if tuple(cur.fetchone()) == (rows, end - span, end, 1, rows):
                return {"table": table, "seeded": False, "seconds": 0.0}
            say(f"    {SCHEMA}.{table} does not hold this seed: re-seeding")
        t0 = time.perf_counter()
        create_table(conn, SCHEMA, table, drop=True)
        seed(conn, SCHEMA, table, rows, end=end, span=span)
        cur.execute(f"ANALYZE TABLE `{SCHEMA}`.`{table}`")
        cur.fetchall()
    return {"table": table, "seeded": True, "seconds": time.perf_counter() - t0}


def add_demo_rows(u: DatabaseURL, table: str, first_id: int, n: int, end: datetime) -> None:
    """`n` demo-shaped rows from id `first_id`, in the ten minutes before `end`."""
    with mysql_connect(u) as conn:
        seed(conn, SCHEMA, table, n, end=end, span=timedelta(minutes=10), first_id=first_id,
             tie_min=max(1, min(50, n)), tie_max=max(1, min(400, n)))


SMALL_DDL = """CREATE TABLE `{schema}`.`{table}` (
  region INT NOT NULL, code VARCHAR(12) NOT NULL, qty INT NOT NULL,
  price DECIMAL(12,4) NOT NULL, label VARCHAR(40) NULL, update_at DATETIME(6) NOT NULL,
  PRIMARY KEY (region, code), KEY idx_update_at (update_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""


def small_table(u: DatabaseURL, table: str, rows: int, day: date) -> None:
    """A composite key (region, code); a quarter of the rows share each `update_at` (large
    ties), spread over the three days up to `day`. Always recreated (cheap)."""
    ensure_mysql_schema(u)
    mysql_exec(u, f"DROP TABLE IF EXISTS `{table}`", SMALL_DDL.format(schema=SCHEMA, table=table))
    tie = max(1, rows // 4)
    base = datetime.combine(day - timedelta(days=2), datetime.min.time()) + timedelta(hours=6)
    def select(_first: int) -> str:
        return (f"SELECT s.seq % 7, CONCAT('c', s.seq), s.seq % 13, s.seq / 100, "
                f"IF(s.seq % 5 = 0, NULL, CONCAT('item ', s.seq)), "
                f"TIMESTAMP'{base:%Y-%m-%d %H:%M:%S}' + INTERVAL (s.seq DIV {tie}) * 10 HOUR")

    _insert_seq(u, table, rows, select)


HISTORY_DDL = """CREATE TABLE `{schema}`.`{table}` (
  id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(40) NOT NULL, amount DECIMAL(18,4) NOT NULL,
  update_at DATETIME(6) NOT NULL, KEY idx_update_at (update_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""


def history_table(u: DatabaseURL, table: str, first_day: date, days: int, every: int,
                  per_day: int) -> int:
    """Rows on every `every`-th day of `days` days from `first_day`, `per_day` rows on each
    (at noon, spread over a minute): a long, mostly quiet history. Returns the row count."""
    ensure_mysql_schema(u)
    mysql_exec(u, f"DROP TABLE IF EXISTS `{table}`",
               HISTORY_DDL.format(schema=SCHEMA, table=table))
    data_days = len(range(0, days, every))
    rows = data_days * per_day
    base = datetime.combine(first_day, datetime.min.time()) + timedelta(hours=12)
    def select(first: int) -> str:
        day_index = f"((s.seq + {first - 2}) DIV {per_day})"
        return (f"SELECT s.seq + {first - 1}, CONCAT('h', s.seq), s.seq / 10000, "
                f"TIMESTAMP'{base:%Y-%m-%d %H:%M:%S}' + INTERVAL {day_index} * {every} DAY "
                f"+ INTERVAL (s.seq % 60) SECOND")

    _insert_seq(u, table, rows, select)
    return rows
