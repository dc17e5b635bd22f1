"""Commands that run no sync start without Dagster or Spark (issue 19, "small operations
instant"), and so does `s3rs sync` of a table with nothing to do (Dagster comes with a
run): each runs in a fresh interpreter against the real services, and the modules it
imported are counted. Count, don't time: a bound on the count catches a heavy import long
before a stopwatch would on a shared machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import click
import pytest
import yaml
from click.utils import make_default_short_help

from s3rs_assets import cli
from s3rs_assets.config import TableConfig
from s3rs_assets.connections import MySQLConnector, WarehouseConnector
from s3rs_assets.layout import Layout
from s3rs_assets.load import LoadTarget, ensure_target
from s3rs_assets.source import describe
from s3rs_assets.watermark import PartitionState, Position
from s3rs_assets.watermark.store import WatermarkStore
from s3rs_assets_tests.helpers import make_ties_table

PREFIX = "imports"
#: never loaded by a reading command (pyarrow and pandas come with Spark's data path;
#: boto3 and s3transfer with dagster-aws: the commands' S3 client is botocore's own)
HEAVY = (
    "dagster",
    "dagster_aws",
    "dagster_pyspark",
    "pyspark",
    "pandas",
    "pyarrow",
    "numpy",
    "boto3",
    "s3transfer",
)
#: modules in sys.modules after the command, measured + ~3% (2026-11-27): 144 (--help),
#: 460 (watermark get), 525 (watermark list: MySQL's clock for the lag), 496 (verify), 570
#: (s3clean list), 640 (reconcile: no pyarrow since its repair files import it on use), 519
#: (status), 640 (an unchanged sync: MySQL probes, the warehouse ledger, S3); `import
#: dagster` alone brings ~1,400, with dagster-pyspark ~1,900
BOUND = {
    "--help": 150,
    "watermark": 540,
    "verify": 510,
    "s3clean": 590,
    "reconcile": 660,
    "status": 535,
    "sync": 660,
}
#: commands that never open MySQL: pymysql (with cryptography, ~50 modules) stays out
NO_MYSQL = {("watermark", "get"), ("watermark", "--help"), ("s3clean", "list")}
#: s3rs modules a command must not import: what only another command (or a repair) needs
NOT_FOR = {
    "watermark": ("s3rs_assets.load", "s3rs_assets.reconcile"),
    "reconcile": ("s3rs_assets.backup", "s3rs_assets.load.transaction"),
}

_PROBE = """
import json, runpy, sys
sys.argv = ["s3rs", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("s3rs_assets.cli", run_name="__main__")
except SystemExit as e:
    code = e.code or 0
sys.stderr.write("\\nIMPORTS " + json.dumps([code, sorted(sys.modules)]) + "\\n")
"""


def day(n: int) -> datetime:
    return (datetime.now() - timedelta(days=n)).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, mysql_db, mysql_url, pg_url, moto_endpoint):
    """A table in MySQL, its copy in the warehouse and a watermark with one partition."""
    import boto3
    import pymysql

    s3_client = boto3.client("s3", endpoint_url=moto_endpoint)
    bucket = f"s3rs-imports-{os.getpid()}"
    s3_client.create_bucket(Bucket=bucket)

    from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT

    rows = [(i, day(2) + timedelta(hours=i % 5)) for i in range(1, 31)]
    with pymysql.connect(
        host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=mysql_db, autocommit=True
    ) as conn:
        make_ties_table(conn, "imp_orders", rows)
        make_ties_table(conn, "imp_quiet", [])  # nothing to sync, ever
        src = describe(conn, TableConfig.from_dict({"name": f"{mysql_db}.imp_orders"}))
    name = f"{mysql_db}.imp_orders"
    entries = [
        {"name": f"{mysql_db}.{t}", "start": day(3).strftime("%Y-%m-%d"), "lag": "0s"}
        for t in ("imp_orders", "imp_quiet")
    ]
    path = tmp_path_factory.mktemp("imports") / "tables.yaml"
    path.write_text(yaml.safe_dump({"tables": entries}))
    for entry in entries:
        ensure_target(
            WarehouseConnector(url=pg_url),
            LoadTarget.from_table_config(
                TableConfig.from_dict(entry), src.columns, src.primary_key
            ),
        )
    store = WatermarkStore(s3_client, bucket, Layout(PREFIX))

    def change(rec):
        d = day(3)
        rec.partitions[d.strftime("%Y-%m-%d")] = PartitionState(
            status="complete",
            window_start=d,
            window_end=d + timedelta(days=1),
            files=[],
            cursor=Position(c=d, pk=[0]),
            run_id="seed",
        )

    store.update(name, change)
    env = {
        **os.environ,
        "S3RS_TABLES": str(path),
        "S3RS_S3_BUCKET": bucket,
        "S3RS_S3_PREFIX": PREFIX,
        "S3RS_MYSQL_URL": mysql_url,
        "S3RS_REDSHIFT_URL": pg_url,
    }
    for var in ("S3RS_SOURCE_TIMEZONE", "S3RS_SSH_HOST", "S3RS_LOG_FORMAT"):
        env.pop(var, None)
    assert MySQLConnector(url=mysql_url).parsed.database == mysql_db
    env["DAGSTER_HOME"] = str(tmp_path_factory.mktemp("dagster_home"))
    return {"name": name, "quiet": f"{mysql_db}.imp_quiet", "env": env}


def imported(stack: dict, *args: str) -> tuple[int, list[str]]:
    """(exit code, modules imported) of `s3rs args` in a new interpreter."""
    code, modules, _ = probe(stack, *args)
    return code, modules


def probe(stack: dict, *args: str) -> tuple[int, list[str], str]:
    """(exit code, modules imported, stdout) of `s3rs args` in a new interpreter."""
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        env=stack["env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("IMPORTS ")][-1]
    code, modules = json.loads(line.removeprefix("IMPORTS "))
    return code, modules, p.stdout


COMMANDS = [
    ("--help",),
    ("watermark", "--help"),
    ("watermark", "get", "-t", "{name}"),
    ("watermark", "get", "-t", "{name}", "--json"),
    ("watermark", "list"),
    ("verify", "-t", "{name}"),
    ("reconcile", "-t", "{name}"),
    ("s3clean", "list", "-t", "{name}"),
    ("status",),
    ("status", "--json", "-t", "{name}"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_command_that_runs_no_sync_imports_neither_dagster_nor_spark(stack, args):
    code, modules = imported(stack, *(a.format(name=stack["name"]) for a in args))
    assert code in (0, 1), f"{args} exited {code}"  # it ran (1: a finding, not an error)
    top = {m.split(".")[0] for m in modules}
    heavy = sorted(top & set(HEAVY))
    assert not heavy, f"{' '.join(args)} imported {heavy}"
    if args[1:2] != ("--help",):
        own = [m for m in modules if m.startswith(NOT_FOR.get(args[0], ("-",)))]
        assert not own, f"{' '.join(args)} imported {own}"
    if tuple(args[:2]) in NO_MYSQL:
        mysql = sorted(top & {"pymysql", "cryptography"})
        assert not mysql, f"{' '.join(args)} imported {mysql} without opening MySQL"
    assert len(modules) <= BOUND[args[0]], f"{' '.join(args)}: {len(modules)} modules"


@pytest.mark.slow
def test_an_unchanged_sync_imports_no_dagster(stack):
    """`s3rs sync` plans from MySQL, the warehouse's ledger and S3 with the plain
    connections; Dagster is imported (and its instance opened) only for a run. The first
    sync of a table without rows closes its empty partitions, the second finds nothing:
    neither runs, neither imports Dagster or Spark."""
    for first in (True, False):
        code, modules, out = probe(stack, "sync", "--no-progress", "-t", stack["quiet"])
        assert code == 0, out
        assert ("closed without a run" in out) is first, out
        assert "nothing new below the safety bound" in out and "no run" in out, out
        heavy = sorted({m.split(".")[0] for m in modules} & set(HEAVY))
        assert not heavy, f"sync imported {heavy}"
        assert "s3rs_assets.spark_session" not in modules  # no early Spark start either
        assert len(modules) <= BOUND["sync"], f"sync: {len(modules)} modules"
    assert not os.listdir(stack["env"]["DAGSTER_HOME"])  # the instance was never opened


@pytest.mark.slow
def test_sync_still_imports_dagster(stack):
    """The probe itself sees a heavy import (so the tests above can fail): `s3rs spark`
    loads the Dagster resources."""
    _, modules = imported(stack, "spark", "--help")
    assert "dagster" in modules


def test_help_summaries_match_the_commands():
    """`s3rs --help` prints SUMMARIES instead of importing each command: they must say
    what the commands' own help says."""
    ctx = click.Context(cli.main)
    for name in cli.COMMANDS:
        command = cli.main.get_command(ctx, name)
        for limit in (45, 80, 200):
            assert make_default_short_help(cli.SUMMARIES[name], limit) == (
                command.get_short_help_str(limit)
            ), name


#: zones with daylight-saving changes of every kind the plain windows must match or refuse
ZONES = [
    "UTC",
    "America/New_York",
    "Europe/London",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Apia",
    "Asia/Tehran",
    "America/St_Johns",
]
SIZES = {
    "hourly": datetime(2024, 1, 1),
    "daily": datetime(2009, 1, 1),
    "weekly": datetime(2008, 12, 29),
    "monthly": datetime(2000, 1, 1),
}


@pytest.mark.parametrize("tz", ZONES)
def test_plain_windows_are_dagsters_or_refuse(tz):
    """partition_windows.PlainPartitions gives Dagster's keys, windows and key lookups, or
    raises Irregular (then partitions.time_windows falls back to Dagster's definition)."""
    import dagster as dg

    from s3rs_assets.partition_windows import Irregular, PlainPartitions

    make = {
        "hourly": dg.HourlyPartitionsDefinition,
        "daily": dg.DailyPartitionsDefinition,
        "monthly": dg.MonthlyPartitionsDefinition,
    }
    for size, start in SIZES.items():
        if size == "weekly":
            d = dg.WeeklyPartitionsDefinition(
                start_date=start, end_offset=1, timezone=tz, day_offset=1
            )
        else:
            d = make[size](start_date=start, end_offset=1, timezone=tz)
        try:
            p = PlainPartitions(size, start, tz)
        except Irregular:
            continue
        keys = d.get_partition_keys()
        assert p.get_partition_keys() == keys, (tz, size)
        assert p.get_last_partition_key() == d.get_last_partition_key()
        step = max(1, len(keys) // 500)
        for k in keys[::step] + keys[-2:]:
            a, b = d.time_window_for_partition_key(k), p.time_window_for_partition_key(k)
            assert (a.start, a.end, a.start.utcoffset()) == (b.start, b.end, b.start.utcoffset())
            for ts in (a.start.timestamp(), a.end.timestamp() - 1):
                assert p.get_partition_key_for_timestamp(ts) == (
                    d.get_partition_key_for_timestamp(ts)
                ), (tz, size, k)
    if tz in ("UTC", "America/New_York", "Europe/London"):  # the common zones are covered
        PlainPartitions("hourly", SIZES["hourly"], tz)
        PlainPartitions("daily", SIZES["daily"], tz)


def test_the_commands_s3_client_reads_with_no_more_threads_than_connections(moto_endpoint):
    """`s3rs status` reads records through S3Connector's client: its pool holds S3_POOL
    connections and read_records uses READ_THREADS of them; a client with a pool smaller
    than READ_THREADS gets no more threads than its connections."""
    import botocore.session
    from botocore.config import Config

    from s3rs_assets.connections import S3_POOL, S3Connector
    from s3rs_assets.scan import READ_THREADS, threads

    client = S3Connector(bucket="unused").client()
    assert client.meta.config.max_pool_connections == S3_POOL == 32
    assert threads(client) == READ_THREADS == 8
    assert client.meta.config.retries["total_max_attempts"] == 6  # 5 retries, standard mode
    plain = botocore.session.Session().create_client("s3")
    assert threads(plain) == READ_THREADS < plain.meta.config.max_pool_connections == 10
    small = botocore.session.Session().create_client(
        "s3", config=Config(max_pool_connections=3)
    )
    assert threads(small) == 3
