"""A CPU profile of the driver (the s3rs process) during one backup, for decimal_turns
`--cprofile`: cProfile of the main thread (Dagster, planning, checkpoints) and of the read
thread (`BackupRun._read`: the Spark job through py4j, verify), plus counts of what the
driver asks of others: py4j commands, S3 requests by operation, Dagster events by type."""

from __future__ import annotations

import cProfile
import io
import pstats
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def driver_profile(top: int = 40, dump: str = "") -> Iterator[dict[str, Any]]:
    import botocore.client
    import dagster as dg
    import py4j.clientserver
    import py4j.java_gateway

    from s3rs_assets.backup.run import BackupRun

    out: dict[str, Any] = {}
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    profs: list[cProfile.Profile] = []
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, wrapper: Any) -> None:
        fn = getattr(owner, name)
        saved.append((owner, name, fn))
        setattr(owner, name, wrapper(fn))

    def count(label: Any) -> Any:
        def wrap(fn: Any) -> Any:
            def counted(*a: Any, **kw: Any) -> Any:
                with lock:
                    counts[label(*a, **kw)] += 1
                return fn(*a, **kw)
            return counted
        return wrap

    patch(botocore.client.BaseClient, "_make_api_call", count(lambda _s, op, *a, **k: f"s3 {op}"))
    patch(py4j.clientserver.ClientServerConnection, "send_command",
          count(lambda *a, **k: "py4j command"))
    patch(py4j.java_gateway.GatewayConnection, "send_command",
          count(lambda *a, **k: "py4j command"))
    patch(dg.DagsterInstance, "handle_new_event",
          count(lambda _s, ev, *a, **k: f"event {ev.dagster_event_type or 'log'}"))

    def read_wrap(fn: Any) -> Any:
        def profiled_read(self: Any, items: Any) -> Any:
            p = cProfile.Profile()
            with lock:
                profs.append(p)
            p.enable()
            try:
                return fn(self, items)
            finally:
                p.disable()
        return profiled_read

    patch(BackupRun, "_read", read_wrap)
    main = cProfile.Profile()
    main.enable()
    try:
        yield out
    finally:
        main.disable()
        for owner, name, fn in reversed(saved):
            setattr(owner, name, fn)
        for label, p in (("main thread", main), ("read thread", None)):
            buf = io.StringIO()
            if p is None:
                if not profs:
                    continue
                st = pstats.Stats(profs[0], stream=buf)
                for q in profs[1:]:
                    st.add(q)
            else:
                st = pstats.Stats(p, stream=buf)
            if dump:  # the raw stats, for pstats' callers/callees
                st.dump_stats(f"{dump}.{label.split()[0]}.prof")
            st.sort_stats("tottime").print_stats(top)
            st.sort_stats("cumulative").print_stats(top)
            out[label] = buf.getvalue()
        out["counts"] = dict(sorted(counts.items()))
