# shellcheck shell=bash
# The local stack's environment, for `make demo`, `make ui` and `make bench`:
#   source scripts/env.sh
# Every variable is set only when it is not already set, so you can point the demo at your
# own services by exporting any of them first (e.g. S3RS_MYSQL_URL=mysql://me:pw@db:3306/x).
# You do not need to source it yourself: `make demo` records these settings in
# $S3RS_STATE_DIR/s3rs.env (.local/s3rs.env), which `s3rs` reads in any new shell.
# Sourced: it must not exit the caller's shell, so no `set -e` here.

_s3rs_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Where the local stack keeps its state: moto's pid and log, the demo's table list and
# settings file, the Dagster home, the Spark Connect server's files. Tests give their own.
: "${S3RS_STATE_DIR:=$_s3rs_repo/.local}"

: "${S3RS_MOTO_PORT:=5555}"
: "${S3RS_MYSQL_URL:=mysql://root:@127.0.0.1:3306/s3rs_demo}"
: "${S3RS_S3_BUCKET:=s3rs-demo}"
: "${S3RS_S3_PREFIX:=s3rs}"
: "${AWS_ENDPOINT_URL_S3:=http://127.0.0.1:${S3RS_MOTO_PORT}}"
: "${AWS_ACCESS_KEY_ID:=testing}"
: "${AWS_SECRET_ACCESS_KEY:=testing}"
: "${AWS_DEFAULT_REGION:=us-east-1}"
: "${S3RS_REDSHIFT_URL:=postgresql://postgres:@127.0.0.1:5432/s3rs_demo}"
# A Spark Connect server started by `make ui` / `s3rs spark start` (pid and URL under
# .local/spark-connect) is used when it is running: runs attach in ~1 s instead of
# starting Spark. Otherwise each run starts its own local Spark.
if [ -z "${S3RS_SPARK_MASTER:-}" ] || [ "${S3RS_SPARK_MASTER_FROM:-}" = env.sh ]; then
  unset S3RS_SPARK_MASTER S3RS_SPARK_MASTER_FROM
  _s3rs_spark_dir="${S3RS_SPARK_STATE_DIR:-$S3RS_STATE_DIR/spark-connect}"
  if [ -f "$_s3rs_spark_dir/server.pid" ] && [ -f "$_s3rs_spark_dir/server.url" ] &&
     grep -q SparkConnectServer "/proc/$(cat "$_s3rs_spark_dir/server.pid")/cmdline" 2>/dev/null; then
    S3RS_SPARK_MASTER="$(cat "$_s3rs_spark_dir/server.url")"
  fi
  unset _s3rs_spark_dir
fi
if [ -z "${S3RS_SPARK_MASTER:-}" ]; then
  # A default of ours, not a choice of yours: `make ui` may replace it with its Spark
  # Connect server (scripts/ui.sh), and a later `source` looks for that server again.
  S3RS_SPARK_MASTER="local[2]"
  S3RS_SPARK_MASTER_FROM=env.sh
  export S3RS_SPARK_MASTER_FROM
fi
: "${S3RS_TABLES:=$S3RS_STATE_DIR/demo/tables.yaml}"
: "${DAGSTER_HOME:=$S3RS_STATE_DIR/dagster_home}"
# One planned-materialization event per asset for a range run instead of one per partition
# (Dagster's own switch): range runs and backfills cost ~4x less on the SQLite instance.
: "${DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS:=1}"
: "${PYSPARK_PYTHON:=$_s3rs_repo/.venv/bin/python}"
: "${PYSPARK_DRIVER_PYTHON:=$_s3rs_repo/.venv/bin/python}"
export S3RS_STATE_DIR S3RS_MOTO_PORT S3RS_MYSQL_URL S3RS_S3_BUCKET S3RS_S3_PREFIX AWS_ENDPOINT_URL_S3 \
  AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION S3RS_REDSHIFT_URL \
  S3RS_SPARK_MASTER S3RS_TABLES DAGSTER_HOME PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON \
  DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS

case ":${PATH}:" in
  ":$_s3rs_repo/.venv/bin:"*) ;;
  *) export PATH="$_s3rs_repo/.venv/bin:${PATH}" ;;
esac

mkdir -p "$DAGSTER_HOME"
if [ ! -f "$DAGSTER_HOME/dagster.yaml" ] && [ -f "$_s3rs_repo/dagster.yaml" ]; then
  cp "$_s3rs_repo/dagster.yaml" "$DAGSTER_HOME/dagster.yaml"
fi
unset _s3rs_repo
