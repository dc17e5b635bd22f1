"""What run.py hands every suite: the options, the services, a bucket, the memory sampler."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from benchmarks.memory import MemSampler
from s3rs_assets.config import DatabaseURL


@dataclass
class Ctx:
    args: argparse.Namespace
    mysql: DatabaseURL
    pg: DatabaseURL
    mem: MemSampler
    bucket: str  # fresh for this run; suites use their own prefixes in it
