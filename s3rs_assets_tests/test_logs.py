"""Log formats (text, JSON lines) and the redaction filter; no services needed."""

from __future__ import annotations

import io
import json
import logging

import pytest
from click.testing import CliRunner

from s3rs_assets import logs
from s3rs_assets.cli import main

SECRET = "Pw:with@odd/chars#1"
SECRET_Q = "Pw%3Awith%40odd%2Fchars%231"


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("S3RS_MYSQL_URL", f"mysql://app:{SECRET_Q}@db.internal:3306/shop")
    monkeypatch.setenv("S3RS_REDSHIFT_URL", "postgresql://wh:whsecret99@wh:5432/dw")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "AKsecretKEYvalue/+xyz")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("S3RS_LOG_FORMAT", raising=False)
    yield
    logging.getLogger().removeHandler(_installed())


def _installed():
    return next(
        (h for h in logging.getLogger().handlers if getattr(h, "_s3rs_handler", False)), None
    )


def test_secrets_from_env_decodes_and_encodes(secret_env):
    found = logs.secrets_from_env()
    assert {SECRET, SECRET_Q, "whsecret99", "AKsecretKEYvalue/+xyz"} <= found
    assert "" not in found


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("mysql://u:p%40ss@h:1/d", "p@ss"),
        ("mysql://u@h/d", None),
        ("postgresql://u:@h/d", None),
        ("mysql://u:pa:ss@h:notaport/d", "pa:ss"),  # malformed port: still found
        ("not a url", None),
    ],
)
def test_url_password(url, password):
    assert logs.url_password(url) == password


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_every_line_is_redacted(secret_env, fmt):
    buf = io.StringIO()
    logs.configure(fmt, "DEBUG", stream=buf)
    lg = logging.getLogger("s3rs.test")
    lg.info("url %s", f"mysql://app:{SECRET_Q}@db")
    lg.warning(f"raw {SECRET} and whsecret99", extra={"table": "a.b", "error": SECRET})
    try:
        raise RuntimeError(f"boom AKsecretKEYvalue/+xyz {SECRET}")
    except RuntimeError:
        lg.exception("failed")
    logging.getLogger("paramiko.transport").warning("pw %s", SECRET)  # library loggers too
    out = buf.getvalue()
    for s in (SECRET, SECRET_Q, "whsecret99", "AKsecretKEYvalue/+xyz"):
        assert s not in out
    assert out.count("***") >= 6
    assert "boom" in out and "Traceback" in out


def test_json_lines_carry_structured_fields(secret_env):
    buf = io.StringIO()
    logs.configure("json", stream=buf)
    logging.getLogger("s3rs.extract").info(
        "chunk done",
        extra={"event": "chunk", "table": "s.t", "partition": "2025-01-02", "chunk": 3,
               "rows": 1000, "seconds": 1.5},
    )
    logging.getLogger("s3rs.cli").info("plain")
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert lines[0]["event"] == "chunk" and lines[0]["table"] == "s.t"
    assert lines[0]["partition"] == "2025-01-02" and lines[0]["chunk"] == 3
    assert lines[0]["rows"] == 1000 and lines[0]["seconds"] == 1.5
    assert lines[0]["level"] == "info" and lines[0]["logger"] == "s3rs.extract"
    assert lines[1]["event"] == "log" and lines[1]["message"] == "plain"


def test_text_format_is_human(secret_env):
    buf = io.StringIO()
    logs.configure("text", stream=buf)
    logging.getLogger("s3rs.cli").info("hello %d", 5)
    line = buf.getvalue().strip()
    assert line.endswith("INFO    s3rs.cli  hello 5")
    assert not line.startswith("{")


def test_configure_is_idempotent(secret_env):
    logs.configure("text", stream=io.StringIO())
    logs.configure("json", stream=io.StringIO())
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_s3rs_handler", False)]
    assert len(ours) == 1


def test_env_selects_format_and_bad_value_is_a_usage_error(secret_env, monkeypatch):
    monkeypatch.setenv("S3RS_LOG_FORMAT", "json")
    assert logs.resolve_format(None) == "json"
    monkeypatch.setenv("S3RS_LOG_FORMAT", "xml")
    result = CliRunner().invoke(main, ["watermark", "--help"])
    assert result.exit_code == 2
    assert "log format 'xml' is not one of text, json" in result.output
    result = CliRunner().invoke(main, ["--log-format", "yaml", "watermark", "--help"])
    assert result.exit_code == 2 and "'yaml' is not one of" in result.output


def test_cli_error_lines_are_redacted(secret_env, monkeypatch, tmp_path):
    # An error message that (wrongly) carries a secret is still masked on the terminal.
    tables = tmp_path / "tables.yaml"
    tables.write_text(f"tables:\n  - name: shop.orders\n    target: '{SECRET}'\n")
    monkeypatch.setenv("S3RS_TABLES", str(tables))
    result = CliRunner().invoke(main, ["watermark", "get", "-t", "shop.orders"])
    assert result.exit_code == 2
    assert "error:" in result.output and "***" in result.output
    assert SECRET not in result.output
