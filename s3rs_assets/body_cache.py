"""Watermark bodies on local disk, for short-lived processes (`s3rs status`).

A CLI process starts with no memory: without this, every `s3rs status` over 2,000 tables
GETs 2,000 records although almost none changed since the last look (issue 18). The record
in S3 stays the source of truth: the caller LISTs the primaries, and a cached body is used
only when its MD5 equals the ETag that LIST returned. s3rs writes every record in one PUT
whose ETag it verifies to be the body's MD5 (`objects._put`), so "MD5 of the cached bytes ==
the listed ETag" means the bytes are the object's current bytes: a record changed behind
the cache (even to one of the same size, in the same second) or a damaged cache file fails
the comparison and is read from S3 again. Nothing else (mtime, size, a stored ETag) is
trusted.

One file per (endpoint, bucket, key), named by a SHA-256 of them (no bucket, key or
credential in a name), holding the object's bytes only: what the bucket holds, never a
credential. The directory is made 0700, files 0600, written to a temporary name and
renamed (two processes writing the same key leave one whole body). Any OS error makes the
cache a miss, never a failure: the read goes to S3.

Where: $S3RS_CACHE_DIR, else $XDG_CACHE_HOME/s3rs, else ~/.cache/s3rs; `off` disables it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("s3rs.cache")

#: S3RS_CACHE_DIR value that turns the cache off
OFF = "off"


def _etag_md5(etag: str | None) -> str | None:
    """The MD5 a single-PUT object's ETag is (None for a multipart or missing ETag)."""
    if not etag:
        return None
    value = etag.strip('"').lower()
    return value if len(value) == 32 and all(c in "0123456789abcdef" for c in value) else None


class BodyCache:
    """Object bodies by (endpoint, bucket, key), valid only for the ETag equal to their MD5."""

    def __init__(self, root: str | os.PathLike[str], endpoint: str | None = None) -> None:
        self.root = Path(root) / "watermarks"
        self.endpoint = endpoint or ""

    @classmethod
    def from_env(cls, endpoint: str | None = None) -> BodyCache | None:
        """The cache the environment names (module docstring), or None when turned off."""
        where = os.environ.get("S3RS_CACHE_DIR")
        if where is not None and where.strip().lower() == OFF:
            return None
        if not where:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
                os.path.expanduser("~"), ".cache"
            )
            where = os.path.join(base, "s3rs")
        return cls(where, endpoint)

    def _path(self, bucket: str, key: str) -> Path:
        name = hashlib.sha256(f"{self.endpoint}\0{bucket}\0{key}".encode()).hexdigest()
        return self.root / f"{name}.body"

    def get(self, bucket: str, key: str, etag: str | None) -> bytes | None:
        """The cached body when its MD5 is `etag` (the ETag S3 listed), else None."""
        want = _etag_md5(etag)
        if want is None:
            return None
        try:
            body = self._path(bucket, key).read_bytes()
        except OSError:
            return None
        return body if hashlib.md5(body).hexdigest() == want else None

    def put(self, bucket: str, key: str, etag: str | None, body: bytes) -> None:
        """Keep `body` when it is what `etag` says (its MD5); errors only log."""
        if _etag_md5(etag) != hashlib.md5(body).hexdigest():
            return
        path = self._path(bucket, key)
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")  # mode 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(body)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            log.debug("record cache %s not written: %s", self.root, e)
