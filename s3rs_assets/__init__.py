"""s3rs: MySQL -> S3 parquet -> Redshift, incrementally, as Dagster assets.

Importing the package tunes the garbage collector for its processes (the CLI, Dagster's
code server and run workers): see `gc_tuning`.
"""

from s3rs_assets import gc_tuning

gc_tuning.configure()
