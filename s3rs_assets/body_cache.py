"""Watermark bodies on local disk, for short-lived processes (`s3rs status`).

A CLI process starts with no memory: without this, every `s3rs status` over 2,000 tables
GETs 2,000 records although almost none changed since the last look (issue 18). The record
in S3 stays the source of truth: the caller LISTs the primaries, and a cached body is used
only when its MD5 equals the ETag that LIST returned. s3rs writes every record in one PUT
whose ETag it verifies to be the body's MD5 (`objects._put`), so "MD5 of the cached bytes ==
the listed ETag" means the bytes are the object's current bytes: a record changed behind
the cache (even to one of the same size, in the same second) or damaged cache bytes fail
the comparison and are read from S3 again. Nothing else (mtime, size, a stored ETag) is
trusted.

One file (a `Pack`) per (endpoint, bucket, listed prefix), named by a SHA-256 of them (no
bucket, key or credential in a name): a JSON header line of (key, length) pairs, then the
bodies. It holds object bytes only, what the bucket holds, never a credential. One file,
not one per record: creating 1,800 files cost ~1.5 s of system time on this machine's
disk, one write of the pack a few milliseconds. `save` rewrites it only when something
changed, keeping the bodies of the keys the last LIST returned (a dropped table's body
goes with the next save). The directory is made 0700, the file 0600, written to a
temporary name and renamed (two processes saving at once leave one whole pack). Any OS or
format error makes the cache a miss, never a failure: the read goes to S3.

Archives of long records (`watermark/archive.py`) are kept in a pack of their own
(`archives`): their key is their content's SHA-256, so a kept body is used only when its
digest is its key's (`warm_archives`), and each save keeps the archives the records just
read referenced (`save_archives`). A second `s3rs status` then GETs no archive either.

Where: $S3RS_CACHE_DIR, else $XDG_CACHE_HOME/s3rs, else ~/.cache/s3rs; `off` disables it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("s3rs.cache")

#: S3RS_CACHE_DIR value that turns the cache off
OFF = "off"


def _etag_md5(etag: str | None) -> str | None:
    """The MD5 a single-PUT object's ETag is (None for a multipart or missing ETag)."""
    if not etag:
        return None
    value = etag.strip('"').lower()
    return value if len(value) == 32 and all(c in "0123456789abcdef" for c in value) else None


class Pack:
    """The cached bodies of one listed prefix: read once, checked per body, saved once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._bodies: dict[str, bytes] = self._load()
        self._loaded = {k: hashlib.md5(b).hexdigest() for k, b in self._bodies.items()}

    def _load(self) -> dict[str, bytes]:
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}
        try:
            head, _, rest = data.partition(b"\n")
            entries = json.loads(head)["entries"]
            out: dict[str, bytes] = {}
            at = 0
            for key, length in entries:
                if not isinstance(key, str) or not isinstance(length, int) or length < 0:
                    return {}
                out[key] = rest[at : at + length]
                at += length
            return out
        except (ValueError, KeyError, TypeError):
            return {}  # damaged: every body is read from S3, and the next save replaces it

    def get(self, key: str, etag: str | None) -> bytes | None:
        """The cached body of `key` when its MD5 is `etag` (the ETag S3 listed), else None."""
        want = _etag_md5(etag)
        with self._lock:
            body = self._bodies.get(key)
        if want is None or body is None:
            return None
        return body if hashlib.md5(body).hexdigest() == want else None

    def put(self, key: str, etag: str | None, body: bytes) -> None:
        """Keep `body` when it is what `etag` says (its MD5), until `save`."""
        if _etag_md5(etag) == hashlib.md5(body).hexdigest():
            with self._lock:
                self._bodies[key] = body

    def save(self, listed: Mapping[str, str]) -> None:
        """Write the bodies whose MD5 is the ETag in `listed` (key -> ETag of the LIST),
        when they differ from the pack read; errors only log."""
        with self._lock:
            keep = {
                k: b
                for k, b in self._bodies.items()
                if k in listed and _etag_md5(listed[k]) == hashlib.md5(b).hexdigest()
            }
        if {k: hashlib.md5(b).hexdigest() for k, b in keep.items()} == self._loaded:
            return
        head = json.dumps({"entries": [[k, len(b)] for k, b in keep.items()]}).encode()
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")  # mode 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(head + b"\n")
                    for body in keep.values():
                        f.write(body)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            log.debug("record cache %s not written: %s", self.path, e)


def cache_root() -> str | None:
    """s3rs's local cache directory (module docstring), None when turned off; also holds
    the Spark JVM's class archives (jvm_options.py)."""
    where = os.environ.get("S3RS_CACHE_DIR")
    if where is not None and where.strip().lower() == OFF:
        return None
    if not where:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "s3rs")
    return where


class BodyCache:
    """Where the packs live, and for which endpoint (module docstring)."""

    def __init__(self, root: str | os.PathLike[str], endpoint: str | None = None) -> None:
        self.root = Path(root) / "watermarks"
        self.endpoint = endpoint or ""

    @classmethod
    def from_env(cls, endpoint: str | None = None) -> BodyCache | None:
        """The cache the environment names (module docstring), or None when turned off."""
        where = cache_root()
        return None if where is None else cls(where, endpoint)

    def archives(self, bucket: str, prefix: str) -> Pack:
        """The archive objects kept for `bucket` (`prefix`: the watermarks' prefix)."""
        return self.pack(bucket, prefix + "archives/")

    def pack(self, bucket: str, prefix: str) -> Pack:
        """The bodies kept for the objects listed under `prefix` in `bucket`."""
        name = hashlib.sha256(f"{self.endpoint}\0{bucket}\0{prefix}".encode()).hexdigest()
        return Pack(self.root / f"{name}.pack")


def warm_archives(pack: Pack) -> int:
    """Hand the kept archives whose SHA-256 is their key's name to this process's archive
    memory (`watermark.archive`); returns how many. A damaged one is skipped (read again)."""
    from s3rs_assets.watermark import archive

    with pack._lock:
        bodies = dict(pack._bodies)
    n = 0
    for key, body in bodies.items():
        digest = hashlib.sha256(body).hexdigest()
        if key.rsplit("/", 1)[-1] == f"{digest[:32]}.json":
            archive.remember(digest, body)
            n += 1
    return n


def save_archives(pack: Pack, records: Iterable[Any]) -> None:
    """Keep the archives `records` (whole records just read) were expanded from, and only
    those: a superseded archive leaves the pack at this save."""
    from s3rs_assets.watermark import archive

    listed: dict[str, str] = {}
    for rec in records:
        ref = getattr(rec, "_archive", None)
        body = archive.cached(ref.sha256) if ref is not None else None
        if body is not None:
            md5 = hashlib.md5(body).hexdigest()
            pack.put(ref.key, md5, body)
            listed[ref.key] = md5
    pack.save(listed)
