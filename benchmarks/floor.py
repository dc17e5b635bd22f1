"""The floors and the naive baseline: what the raw command-line tools and an old hand-made
script reach on the same table.

* `extract_floor`: `mariadb --quick --batch -e 'SELECT * ...' > /dev/null`;
* `dump_tsv` + `psql_copy`: `mariadb --quick --batch | sed > TSV`, then `psql \\copy` into
  a plain PostgreSQL table (no key, no index) with s3rs's column types;
* `naive_extract`: pymysql `SSCursor`, 5000-row `fetchmany` -> DataFrame -> parquet.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pymysql

from benchmarks.services import (
    SCHEMA,
    cli_env,
    mysql_cli_args,
    mysql_connect,
    pg_checkpoint,
    pg_connect,
    pg_count,
    plain_table_sql,
    source_columns,
)
from s3rs_assets.config import DatabaseURL

NAIVE_CHUNK = 5000


def extract_floor(u: DatabaseURL, table: str, repeat: int) -> dict[str, Any]:
    """`mariadb --quick --batch -e 'SELECT * ...' > /dev/null`; best of `repeat` runs."""
    args = mysql_cli_args(u, f"SELECT * FROM `{SCHEMA}`.`{table}`")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(args, stdout=subprocess.DEVNULL, env=cli_env(mysql=u), check=True)
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "runs": times}


def naive_extract(u: DatabaseURL, table: str) -> dict[str, Any]:
    """The old hand-made way: pymysql streaming cursor, 5000-row fetchmany -> DataFrame ->
    parquet (pyarrow) into memory."""
    t0 = time.perf_counter()
    rows = nbytes = 0
    coerced: set[str] = set()
    with mysql_connect(u, SCHEMA, cursorclass=pymysql.cursors.SSCursor) as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        while True:
            batch = cur.fetchmany(NAIVE_CHUNK)
            if not batch:
                break
            df = pd.DataFrame.from_records(batch, columns=names)
            for c in coerced:
                df[c] = df[c].astype("string")
            buf = io.BytesIO()
            while True:
                try:
                    df.to_parquet(buf, index=False, engine="pyarrow", compression="snappy")
                    break
                except Exception as e:  # e.g. BIGINT UNSIGNED beyond int64 in an object column
                    bad = _unwritable_column(df, e)
                    if bad is None or bad in coerced:
                        raise
                    coerced.add(bad)
                    df[bad] = df[bad].astype("string")
                    buf = io.BytesIO()
            rows += len(df)
            nbytes += buf.tell()
        cur.close()
    return {
        "seconds": time.perf_counter() - t0,
        "rows": rows,
        "parquet_bytes": nbytes,
        "columns_written_as_text": sorted(coerced),
    }


def _unwritable_column(df, err: Exception) -> str | None:
    m = re.search(r"column (\S+?)[ ,]", str(err)) or re.search(r"'(\w+)'", str(err))
    if m and m.group(1).strip("'\"") in df.columns:
        return m.group(1).strip("'\"")

    for c in df.columns:  # find it the slow way
        try:
            pa.array(df[c])
        except Exception:
            return c
    return None


def dump_tsv(mysql: DatabaseURL, table: str, path: Path) -> dict[str, Any]:
    """mariadb --quick --batch -> TSV file. The CLI escapes tab, newline, backslash and NUL
    but writes carriage returns raw, which PostgreSQL's text COPY rejects: `sed` turns them
    into `\\r` in the same pipeline (the table's remark column holds CR LF)."""
    cli = mysql_cli_args(mysql, f"SELECT * FROM `{SCHEMA}`.`{table}`")
    t0 = time.perf_counter()
    with open(path, "wb") as out:
        p1 = subprocess.Popen(cli, stdout=subprocess.PIPE, env=cli_env(mysql=mysql))
        p2 = subprocess.Popen(["sed", "-e", r"s/\r/\\r/g"], stdin=p1.stdout, stdout=out)
        assert p1.stdout is not None
        p1.stdout.close()
        rc2, rc1 = p2.wait(), p1.wait()
    if rc1 or rc2:
        raise SystemExit(f"bench: mariadb | sed dump failed ({rc1}, {rc2})")
    return {"seconds": time.perf_counter() - t0, "bytes": path.stat().st_size}


def psql_copy(pg: DatabaseURL, mysql: DatabaseURL, table: str, path: Path) -> dict[str, Any]:
    """psql \\copy of the TSV into a plain table (text format, NULL printed as NULL)."""
    psql = shutil.which("psql")
    if psql is None:
        raise SystemExit("bench: `psql` is not on PATH (run `make setup`)")
    src = source_columns(mysql, table)
    name = f"{table}_psql_floor"
    with pg_connect(pg, SCHEMA) as conn:
        conn.execute(plain_table_sql(name, src.columns))
    copy = f"\\copy \"{SCHEMA}\".\"{name}\" FROM '{path}' WITH (FORMAT text, NULL 'NULL')"
    args = [
        psql,
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        pg.host,
        "-p",
        str(pg.port),
        "-U",
        pg.user,
        "-d",
        SCHEMA,
        "-c",
        copy,
    ]
    t0 = time.perf_counter()
    subprocess.run(args, env=cli_env(pg=pg), check=True)
    wall = time.perf_counter() - t0
    return {"seconds": wall, "rows_in_target": pg_count(pg, name)}




def e2e_floor(mysql: DatabaseURL, pg: DatabaseURL, table: str) -> dict[str, Any]:
    """The end-to-end floor: dump to a temporary TSV, then `psql \\copy` it; both timed."""
    tmpdir = Path(tempfile.mkdtemp(prefix="s3rs-bench-tsv-"))
    try:
        dump = dump_tsv(mysql, table, tmpdir / f"{table}.tsv")
        pg_checkpoint(pg)
        pcopy = psql_copy(pg, mysql, table, tmpdir / f"{table}.tsv")
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return {"dump": dump, "psql_copy": pcopy, "seconds": dump["seconds"] + pcopy["seconds"]}
