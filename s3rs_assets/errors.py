"""Errors an operator reads at 3 a.m.: each names the table, column or value at fault."""


class S3rsError(Exception):
    """Base class: anything s3rs raises on purpose."""


class ConfigError(S3rsError):
    """tables.yaml, an environment variable or a CLI argument is wrong; nothing was written."""


class SourceSchemaError(S3rsError):
    """The MySQL table does not fit its configuration (missing table, cursor or primary key)."""


class WatermarkError(S3rsError):
    """A watermark record is missing, invalid, or another run changed it under us."""


class WatermarkConflict(WatermarkError):
    """A compare-and-swap lost to another run whose progress is not compatible with ours."""


class IntegrityError(S3rsError):
    """A file in S3 does not match what was written (size, checksum or row count)."""
