"""botocore's S3 client parts shared by every S3 client s3rs builds: the CLI's and the Dagster
resources' (`connections.s3_client`) and each Spark task's (`spark_tasks.s3_client`).

Only botocore and the standard library here: a Spark Python worker imports this module, not
`connections` (pydantic, SSH settings) nor boto3 and s3transfer.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any


def s3_session(profile: str | None = None) -> Any:
    """A botocore session for S3 clients only, sharing the process's S3 loader
    (`s3_loader`): credentials, region and endpoint are read afresh per session, the
    parsed models once per process."""
    import botocore.session

    session = botocore.session.Session(profile=profile)
    session.register_component("data_loader", s3_loader(session))
    session.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=s3_timestamp
    )
    return session


def s3_timestamp(value: Any) -> Any:
    """botocore's timestamp parser for S3's two forms, without dateutil: an object's
    `LastModified` (RFC 7231 in a GET's headers, ISO 8601 in a LIST) as an aware UTC
    datetime. botocore's own (`botocore.utils.parse_timestamp`) runs dateutil's generic
    parser, ~70 us a value on this machine: 1,800 GETs and a 2,000-key LIST of a cold
    `s3rs status` spent ~0.2 s CPU in it. Anything else goes to botocore's."""
    from botocore.utils import parse_timestamp

    if isinstance(value, str):
        try:
            if value.endswith("Z"):
                found = datetime.fromisoformat(value)
            else:
                found = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            found = None
        if found is not None and found.tzinfo is not None:
            return found.astimezone(UTC)
    return parse_timestamp(value)


_LOADER: Any = None
_LOADER_LOCK = threading.Lock()


def s3_loader(session: Any) -> Any:
    """One botocore loader per process, answering "which services exist" with S3 alone.

    botocore asks that before loading each model (the service and its endpoint rules), and
    its own answer walks ~400 service directories per model type, ~20 ms of the ~350 ms CPU
    a `watermark get` takes. Shared, its instance cache keeps the parsed S3 model and
    endpoint rules: a client costs ~7 ms instead of ~60 ms, and a `s3rs sync` run builds
    three (the CLI's, the run's S3 resource's and its IO manager's). Clients stay distinct
    (each its own event hooks), so only the read-only model data is shared."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            from botocore.loaders import JSONFileLoader, Loader

            class _S3Loader(Loader):
                def list_available_services(self, type_name: str) -> list[str]:
                    return ["s3"]

            class _PlainJSON(JSONFileLoader):
                """botocore's JSON files parsed into plain dicts: its loader builds an
                OrderedDict per JSON object through a Python hook, ~3x slower on the
                1.2 MB endpoints.json and the S3 model every client's process reads
                (dicts keep the files' order, and botocore needs nothing else of them)."""

                def _load_file(self, full_path: str, open_method: Any) -> Any:
                    if not os.path.isfile(full_path):
                        return None
                    with open_method(full_path, "rb") as fp:
                        return json.loads(fp.read().decode("utf-8"))

            data_path = session.get_config_variable("data_path")
            # botocore.loaders.create_loader's reading of AWS_DATA_PATH
            extra = [os.path.expanduser(os.path.expandvars(p))
                     for p in (data_path or "").split(os.pathsep)]
            _LOADER = _S3Loader(
                extra_search_paths=[p for p in extra if p], file_loader=_PlainJSON()
            )
        return _LOADER
