"""What an increment's run costs Dagster (issue 19, "small operations instant"): every event
is a write to the run's SQLite event log (~10-25 ms each on this machine), and Dagster
rebuilds the run's job from its pointer several times per `execute_job`. Counted with the
real instance and a real run, not timed.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest

from s3rs_assets_tests.helpers import insert_rows
from s3rs_assets_tests.test_cli import (  # noqa: F401 - the CLI tests' fixtures
    _detach_log_handler,
    cli_tables_file,
    invoke,
    mysql,
    orders,
    stack,
)

#: Dagster's own events of a one-partition increment run (both stages, both sync checks),
#: measured 2026-11-27: 31 = run start and success 2, engine 2, resource init 2, logs
#: captured 1, planned 4, step start/output/success 12, step input and loaded input 2,
#: handled output 2, materializations 2, check evaluations 2
EVENTS = 31
#: the run's own log messages (4; a warning, e.g. a retried query, may join them)
MESSAGES = 6


@pytest.mark.usefixtures("orders")
def test_an_increment_run_writes_few_events_and_builds_its_job_once(request, monkeypatch):
    env = request.getfixturevalue("stack")  # test_cli's, as `orders` uses it
    import dagster as dg

    from s3rs_assets import table_job
    from s3rs_assets.names import TABLE_TAG

    name = env.name("cli_orders")
    first = invoke("sync", "-t", name, "--no-progress")
    assert first.exit_code == 0, first.output
    stamp = datetime.now() - timedelta(minutes=20)
    with mysql(env.db) as conn:
        insert_rows(conn, "cli_orders", [(i, stamp) for i in range(61, 71)])
    builds: list[str] = []
    build = table_job.sync_job

    def counted(table: str) -> dg.JobDefinition:
        builds.append(table)
        return build(table)

    monkeypatch.setattr(table_job, "sync_job", counted)
    r = invoke("sync", "-t", name, "--no-progress")
    assert r.exit_code == 0, r.output
    assert r.stdout.count(" succeeded") == 1, r.stdout
    with dg.DagsterInstance.from_config(str(env.home)) as inst:
        runs = inst.get_runs(filters=dg.RunsFilter(tags={TABLE_TAG: name}), limit=1)
        entries = inst.all_logs(runs[0].run_id)
    assert builds == [name], builds  # built once for the run, not once per reconstruction
    kinds = Counter(e.dagster_event.event_type_value for e in entries if e.dagster_event)
    assert sum(kinds.values()) <= EVENTS, sorted(kinds.items())
    messages = [e.user_message for e in entries if not e.dagster_event]
    assert len(messages) <= MESSAGES, messages
