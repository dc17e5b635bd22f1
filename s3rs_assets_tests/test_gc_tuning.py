"""Importing s3rs tunes the collector: a fresh interpreter shows the raised threshold, and
a process exits without walking its whole heap again (gc.freeze at exit)."""

from __future__ import annotations

import subprocess
import sys

from s3rs_assets.gc_tuning import GEN0_THRESHOLD
from s3rs_assets_tests.conftest import REPO

SCRIPT = """
import atexit, gc
# registered before s3rs's handler, so it runs after it (atexit is last in, first out)
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
before = gc.get_threshold()[0]
import s3rs_assets
after = gc.get_threshold()[0]
print(before, after, flush=True)
x = [[i] for i in range(1000)]
"""


def test_import_raises_the_threshold_and_freezes_at_exit():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split("\n")
    before, after = map(int, out[0].split())
    assert before < GEN0_THRESHOLD <= after
    assert out[1] == "frozen at exit: True"
