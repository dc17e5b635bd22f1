"""S3 clients share the process's parsed S3 models (issue 19: a 1,000-row increment in
<= 1.5 s). dagster-aws built a boto3 session and resource per client, ~60 ms each, and one
`s3rs sync` run builds three (the CLI's, the run's S3 resource's and its IO manager's).
Counted, not timed: how often botocore reads a model file, against the moto server."""

from __future__ import annotations

from collections import Counter
from typing import Any

import dagster as dg
import pytest
from botocore.loaders import JSONFileLoader

from s3rs_assets.connections import S3Connector
from s3rs_assets.resources import S3Resource


@pytest.fixture
def file_reads(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """botocore's model file reads, by file name."""
    seen: Counter = Counter()
    load = JSONFileLoader.load_file

    def counting(self: Any, file_path: str) -> Any:
        seen[file_path.rsplit("/", 1)[-1]] += 1
        return load(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counting)
    return seen


def test_clients_of_fresh_resources_read_the_models_at_most_once(bucket: str,
                                                                  file_reads: Counter):
    first = S3Resource(bucket=bucket).client()  # may read them: the process's first client
    first.list_objects_v2(Bucket=bucket)
    file_reads.clear()
    clients = [S3Resource(bucket=bucket).client() for _ in range(3)]
    clients.append(S3Connector(bucket=bucket).client())
    for c in clients:
        c.put_object(Bucket=bucket, Key="k", Body=b"x")
        assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"
    assert sum(file_reads.values()) == 0, file_reads
    assert len({id(c) for c in [first, *clients]}) == 5  # distinct clients


def test_a_hook_on_one_client_stays_on_it(bucket: str):
    """Tests (and s3rs) register botocore hooks on a client: sharing models must not share
    hooks between clients."""
    a, b = S3Resource(bucket=bucket).client(), S3Resource(bucket=bucket).client()
    calls: list[str] = []
    a.meta.events.register("before-send.s3.PutObject", lambda **_: calls.append("a"))
    b.put_object(Bucket=bucket, Key="b", Body=b"y")
    assert calls == []
    a.put_object(Bucket=bucket, Key="a", Body=b"y")
    assert calls == ["a"]


def test_the_resource_fields_reach_the_client(bucket: str, moto_endpoint: str):
    s3 = S3Resource(bucket=bucket, region_name="eu-west-1", max_attempts=7,
                    endpoint_url=moto_endpoint)
    meta = s3.client().meta
    assert meta.region_name == "eu-west-1" and meta.endpoint_url == moto_endpoint
    assert meta.config.retries == {"total_max_attempts": 8, "mode": "standard"}
    assert s3.task_config()["aws_access_key_id"] == "testing"


def test_task_config_resolves_the_credentials_once(
        bucket: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch):
    """Every chunk asks for the tasks' S3 settings: the AWS chain is resolved by the first
    ask only (a boto3 session each was ~20 ms CPU per chunk), with the same keys."""
    import boto3

    made: list[int] = []
    real = boto3.session.Session.__init__

    def counted(self, *a, **kw):
        made.append(1)
        real(self, *a, **kw)

    monkeypatch.setattr(boto3.session.Session, "__init__", counted)
    s3 = S3Resource(bucket=bucket, endpoint_url=moto_endpoint)
    configs = [s3.task_config() for _ in range(5)]
    assert len(made) == 1
    assert all(c == configs[0] for c in configs)
    assert configs[0]["aws_access_key_id"] == "testing"


def test_a_run_builds_a_client_only_for_the_resource_that_uses_it(
        bucket: str, monkeypatch: pytest.MonkeyPatch):
    """dagster-aws attached a fresh client to the context at each resource initialization
    (four per `s3rs sync` run, used or not); ours attaches the resource itself."""
    from s3rs_assets import connections

    built: list[int] = []
    session = connections._s3_session

    def counting(profile: str | None = None) -> Any:
        built.append(1)
        return session(profile)

    monkeypatch.setattr(connections, "_s3_session", counting)

    @dg.asset
    def untouched(s3: S3Resource) -> None:
        assert s3.bucket == bucket

    @dg.asset
    def lists(s3: S3Resource) -> None:
        s3.client().list_objects_v2(Bucket=s3.bucket)

    @dg.asset(required_resource_keys={"s3"})
    def by_context(context) -> None:  # Dagster refuses a string annotation here
        assert context.resources.s3.bucket == bucket

    resources = {"s3": S3Resource(bucket=bucket)}
    assert dg.materialize([untouched, by_context], resources=resources).success
    assert built == []
    assert dg.materialize([lists], resources=resources).success
    assert built == [1]


def test_the_resource_and_the_connector_build_the_same_client(bucket: str) -> None:
    """One builder (connections.s3_client): the same pool and retries whichever way a
    process reaches S3, so a fleet read through the resource gets the connector's pool."""
    from s3rs_assets.connections import S3_MAX_ATTEMPTS, S3_POOL

    for client in (S3Resource(bucket=bucket).client(), S3Connector(bucket=bucket).client()):
        cfg = client.meta.config
        assert cfg.max_pool_connections == S3_POOL
        assert cfg.retries == {"total_max_attempts": S3_MAX_ATTEMPTS + 1, "mode": "standard"}
        client.list_objects_v2(Bucket=bucket)


def test_the_shared_loader_reads_botocores_data_unchanged():
    """connections' loader parses botocore's JSON into plain dicts (its own builds an
    OrderedDict per object, ~3x slower): the same data, in the same order."""
    import json

    import botocore.session
    from botocore.loaders import Loader

    from s3rs_assets.connections import _s3_loader

    shared = _s3_loader(botocore.session.Session())
    # fresh instances: the shared one's cache holds data botocore's resolvers have used
    ours, theirs = type(shared)(file_loader=shared.file_loader), Loader()
    for name in ("endpoints", "partitions", "sdk-default-configuration", "_retry"):
        assert json.dumps(ours.load_data(name)) == json.dumps(theirs.load_data(name)), name
    for kind in ("service-2", "endpoint-rule-set-1", "paginators-1", "waiters-2"):
        a, b = ours.load_service_model("s3", kind), theirs.load_service_model("s3", kind)
        assert json.dumps(a) == json.dumps(b), kind


@pytest.mark.parametrize(
    "value",
    [
        "Fri, 27 Nov 2026 12:51:03 GMT",  # a GET's Last-Modified header
        "2026-11-27T12:51:03.000Z",  # a LIST's LastModified
        "2026-11-27T12:51:03.123456Z",
        "Fri, 27 Nov 2026 12:51:03 -0000",
        "Fri, 27 Nov 2026 13:51:03 +0100",
        "2026-11-27T12:51:03+00:00",
        1795783863,
        "1795783863",
    ],
)
def test_s3_timestamps_parse_as_botocore_parses_them(value: Any) -> None:
    """`s3_timestamp` (no dateutil) answers what botocore's own parser answers."""
    from botocore.utils import parse_timestamp

    from s3rs_assets.connections import s3_timestamp

    assert s3_timestamp(value) == parse_timestamp(value)
    assert s3_timestamp(value).utcoffset().total_seconds() == 0


def test_the_clients_timestamps_are_aware_utc_datetimes(bucket: str) -> None:
    """A GET's and a LIST's LastModified, through the client's parser, are one instant."""
    client = S3Connector(bucket=bucket).client()
    client.put_object(Bucket=bucket, Key="ts/one", Body=b"x")
    got = client.get_object(Bucket=bucket, Key="ts/one")["LastModified"]
    listed = client.list_objects_v2(Bucket=bucket, Prefix="ts/")["Contents"][0]["LastModified"]
    assert got.utcoffset().total_seconds() == listed.utcoffset().total_seconds() == 0
    assert got == listed.replace(microsecond=0)
