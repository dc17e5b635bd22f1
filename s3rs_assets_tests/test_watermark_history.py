"""`s3rs watermark history` and `s3rs watermark restore`: the undo of `set` / `reset`.

Real moto S3 (with and without bucket versioning), the CLI in-process; the records are
seeded as `test_cli.py` seeds them.
"""

from __future__ import annotations

import json
import re

import pytest

from s3rs_assets import cli
from s3rs_assets.watermark import history as watermark_history
from s3rs_assets_tests.cli_stack import (
    day,
    invoke,
    key_of,
    seed,
)

KEPT = re.compile(r"kept the record it replaced as version ([0-9a-f]{8}) \((\S+)\)")


def _state(stack, table: str = "cli_wm") -> dict:
    """What a restore must bring back: everything but bookkeeping times."""
    doc = json.loads(stack.store.read(stack.name(table), fresh=True).to_json())
    for k in ("updated_at", "backup_metadata"):
        doc.pop(k)
    return doc


def test_set_keeps_the_replaced_record_and_restore_puts_it_back(stack):
    seed(stack)
    name = stack.name("cli_wm")
    before = _state(stack)
    r = invoke("watermark", "set", "-t", name, "--timestamp", key_of(day(7)), "--yes")
    assert r.exit_code == 0, r.output
    kept = KEPT.search(r.output)
    assert kept, r.output
    vid, key = kept.groups()
    assert key == stack.resource.layout.watermark_edit_copy(name, key.rsplit("/", 1)[1][:-5])
    assert f"`s3rs watermark restore -t {name} --to {vid}` puts it back" in r.output
    after_set = _state(stack)
    assert after_set != before

    h = invoke("watermark", "history", "-t", name)
    assert h.exit_code == 0, h.output
    assert f"Watermark versions of {name}, newest first" in h.output
    blocks = h.output.split("\n\n")[1:]
    current, previous = blocks[0], blocks[1]
    assert "(current)" in current and "held by: primary, daily" in current
    assert f"set by hand to {key_of(day(7))} 00:00:00.000000" in current
    assert f"changes from {vid}:" in current
    assert "mysql_rows_extracted: 190 -> " in current  # describe_change's lines
    assert previous.lstrip().startswith(vid) and "(current)" not in previous
    assert "edit before-set-" in previous and "session " in previous  # the run's copy too
    assert "190 rows extracted, 150 loaded" in previous

    doc = json.loads(invoke("watermark", "history", "-t", name, "--json").stdout)
    assert [v["id"] for v in doc][:2] == [current.split()[0], vid]
    assert doc[0]["current"] and doc[0]["manual_timestamp"].startswith(key_of(day(7)))

    # the preview, a refusal and a dry run write nothing
    listing = stack.listing()
    dry = invoke("watermark", "restore", "-t", name, "--to", vid, "--dry-run")
    assert dry.exit_code == 0 and "dry run: nothing written." in dry.output
    assert f"watermark restore {name} to version {vid}" in dry.output
    assert "backup_strategy: manual_cli -> dagster" in dry.output
    declined = invoke("watermark", "restore", "-t", name, "--to", vid, input="n\n")
    assert declined.exit_code == 1 and "Apply this change?" in declined.output
    assert stack.listing() == listing

    done = invoke("watermark", "restore", "-t", name, "--to", vid[:5], "--yes")
    assert done.exit_code == 0, done.output
    assert _state(stack) == before
    # and the restore is undoable in turn: the set's record was kept
    undo = KEPT.search(done.output).group(1)
    assert invoke("watermark", "restore", "-t", name, "--to", undo, "--yes").exit_code == 0
    assert _state(stack) == after_set
    again = invoke("watermark", "restore", "-t", name, "--to", undo, "--yes")
    assert again.exit_code == 0 and "nothing to change." in again.output


def test_reset_keeps_the_replaced_record(stack):
    seed(stack)
    name = stack.name("cli_wm")
    before = _state(stack)
    r = invoke("watermark", "reset", "-t", name, "--mysql-only", "--yes")
    assert r.exit_code == 0, r.output
    vid = KEPT.search(r.output).group(1)
    assert stack.store.read(name, fresh=True).partitions == {}
    assert invoke("watermark", "restore", "-t", name, "--to", vid, "--yes").exit_code == 0
    assert _state(stack) == before


def test_a_refused_edit_keeps_nothing(stack, monkeypatch):
    """The record moved while the operator read the diff: the edit is refused (exit 2) and
    writes nothing, not even its undo copy."""
    seed(stack)
    name = stack.name("cli_wm")

    def concurrent_run(*_a, **_k):
        stack.store.update(name, lambda rec: setattr(rec, "last_error", "a run wrote"))
        return True

    listing_keys = set(stack.listing())
    monkeypatch.setattr(cli.click, "confirm", concurrent_run)
    r = invoke("watermark", "set", "-t", name, "--timestamp", key_of(day(7)))
    assert r.exit_code == 2 and "changed since it was shown" in r.output
    assert not [k for k in set(stack.listing()) - listing_keys if "/edits/" in k]


def test_history_shows_older_s3_versions_when_the_bucket_keeps_them(stack):
    stack.s3.put_bucket_versioning(Bucket=stack.bucket,
                                   VersioningConfiguration={"Status": "Enabled"})
    seed(stack)
    name = stack.name("cli_wm")
    first = _state(stack)
    stack.store.update(name, lambda rec: setattr(rec, "last_error", "between two runs"))
    # the edit copy is removed so that only S3's own versioning remembers the first record
    r = invoke("watermark", "set", "-t", name, "--timestamp", key_of(day(8)), "--yes")
    edit_key = KEPT.search(r.output).group(2)
    stack.s3.delete_object(Bucket=stack.bucket, Key=edit_key)
    found, notes = watermark_history.versions(stack.store, name, limit=None)
    assert notes == []
    versioned = [v for v in found if all(c.where.startswith("s3 version ") for c in v.copies)]
    assert versioned, [(v.id, [c.where for c in v.copies]) for v in found]
    h = invoke("watermark", "history", "-t", name)
    assert "s3 version " in h.output
    # the first record (before last_error was set) is one of them; it comes back exactly
    target = next(v for v in found if v.record and v.record.last_error is None
                  and v.record.backup_strategy == "dagster")
    assert invoke("watermark", "restore", "-t", name, "--to", target.id, "--yes").exit_code == 0
    assert _state(stack) == first


@pytest.mark.parametrize(
    ("ident", "message"),
    [
        ("zz", "is not a version id"),
        ("12", "is not a version id"),
        ("deadbeef", "no version deadbeef of"),
    ],
)
def test_restore_of_an_unknown_version_changes_nothing(stack, ident, message):
    seed(stack)
    listing = stack.listing()
    r = invoke("watermark", "restore", "-t", stack.name("cli_wm"), "--to", ident, "--yes")
    assert r.exit_code == 2 and message in r.output, r.output
    assert stack.listing() == listing


def test_history_of_a_table_without_watermark(stack):
    r = invoke("watermark", "history", "-t", stack.name("cli_other"))
    assert r.exit_code == 0
    assert f"No watermark for {stack.name('cli_other')} in S3: nothing to restore." in r.output
