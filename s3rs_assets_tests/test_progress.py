"""What `s3rs sync` says about speed: the rate of the work, with Dagster's set-up and
Spark's start-up shown apart (progress.RunTimings). The sync test that prints it for a real
run is in test_waiting.py."""

from __future__ import annotations

from s3rs_assets.progress import RunTimings


def test_a_small_run_is_not_slow_because_spark_started():
    """Issue 17: 1,000 rows in 26.7 s, 20.6 s of it Spark's start-up, printed "45 rows/s"."""
    t = RunTimings(total=26.7, dagster_setup=2.9, spark_startup=20.6, reading=2.5,
                   rows_read=1000, loading=0.4, rows_loaded=1000)
    assert t.line("s.t") == (
        "s.t: 1,000 rows read in 2.5 s (400 rows/s), 1,000 rows loaded in 0.4 s "
        "(2,500 rows/s); 26.7 s in all: Dagster set-up 2.9 s, Spark start-up 20.6 s, "
        "checks and the rest 0.3 s"
    )
    f = t.fields()
    assert (f["rows_per_second"], f["spark_startup_seconds"], f["dagster_setup_seconds"]) == (
        400.0, 20.6, 2.9)


def test_what_is_unknown_is_left_out():
    t = RunTimings(total=5.0, dagster_setup=1.0)
    assert t.line("s.t") == (
        "s.t: nothing read or loaded; 5.0 s in all: Dagster set-up 1.0 s, checks and the rest "
        "4.0 s"
    )
    load_only = RunTimings(total=3.0, dagster_setup=1.0, loading=1.5, rows_loaded=0)
    assert load_only.line("s.t").startswith("s.t: 0 rows loaded in 1.5 s; 3.0 s in all: ")
