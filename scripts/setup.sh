#!/usr/bin/env bash
# Idempotent set-up of everything s3rs needs on a Debian/Ubuntu machine:
#   1. the Python venv (.venv) with the project installed (pip install -e '.[dev]')
#   2. Java 17+            3. the MariaDB and PostgreSQL JDBC jars
#   4. MariaDB on 127.0.0.1:3306 (root, no password)
#   5. PostgreSQL on 127.0.0.1:5432 (postgres, trust)
#   6. the openssh-server package (for the SSH tunnel tests; not started)
#   7. with --tests only (scripts/test.sh): Debian's chromium and chromium-driver, for the
#      browser smoke test of the Dagster UI (test_webserver.py)
# Each step checks first and does nothing when the thing is already there, so a second
# run takes seconds. apt steps need root or sudo. Prints one line per step.
set -euo pipefail

FOR_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --tests) FOR_TESTS=1 ;;
    *) printf 'setup: error: unknown argument %s (only --tests)\n' "$arg" >&2; exit 2 ;;
  esac
done

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export DEBIAN_FRONTEND=noninteractive

MYSQL_HOST=127.0.0.1 MYSQL_PORT=3306 PG_HOST=127.0.0.1 PG_PORT=5432
VENV="$REPO/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.s3rs-stamp"

say() { printf '%s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# One set-up at a time (make demo and make test may start together).
mkdir -p "$REPO/.local"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$REPO/.local/setup.lock"
  flock 9
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    if [ -t 0 ]; then SUDO=(sudo); else SUDO=(sudo -n); fi  # no password prompt in CI
  fi
fi
APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* by hand (Debian/Ubuntu expected)"
  if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
    die "need root or sudo to install: $*"
  fi
  if [ "$APT_UPDATED" -eq 0 ]; then
    "${SUDO[@]}" apt-get update -qq
    APT_UPDATED=1
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
as_root() { "${SUDO[@]}" "$@"; }

# ---------------------------------------------------------------------------- 1. venv
pick_python() {
  for p in python3.11 python3.12 python3; do
    if command -v "$p" >/dev/null 2>&1 &&
       "$p" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)' 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  return 1
}
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ -x "$PY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  say "ok: venv up to date (.venv)"
else
  if [ ! -x "$PY" ]; then
    base="$(pick_python)" || die "Python 3.11 (or 3.12) not found: install python3.11 and python3.11-venv"
    say "installing: venv .venv with $base"
    "$base" -m venv "$VENV" || die "'$base -m venv' failed (Debian: apt-get install python3.11-venv)"
  fi
  say "installing: python packages (pip install -e '.[dev]'; the first time builds pyspark, ~2-3 min)"
  piplog="$REPO/.local/pip-install.log"
  if ! "$PY" -m pip install --disable-pip-version-check -e '.[dev]' >"$piplog" 2>&1; then
    tail -n 25 "$piplog" >&2
    die "pip install -e '.[dev]' failed; full log: .local/pip-install.log"
  fi
  echo "$want" >"$STAMP"
  say "ok: venv installed (log: .local/pip-install.log)"
fi
# s3rs's own bytecode, written every time (cheap, only what changed): an editable install
# compiles none, and where PYTHONDONTWRITEBYTECODE is set every `s3rs` command compiled its
# 30-40 modules from source again (~45 ms of CPU for `watermark get`; a stale file is
# compiled in memory, never trusted)
"$PY" -m compileall -q s3rs_assets >/dev/null || say "note: compileall s3rs_assets failed (harmless)"

# ---------------------------------------------------------------------------- 2. java
java_major() {
  command -v java >/dev/null 2>&1 || { echo 0; return; }
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n1
}
jv="$(java_major)"
if [ "${jv:-0}" -ge 17 ] 2>/dev/null; then
  say "ok: java $jv"
else
  say "installing: openjdk-17-jre-headless (found java '${jv:-none}')"
  apt_install openjdk-17-jre-headless
  [ "$(java_major)" -ge 17 ] || die "java 17 still not on PATH after installing openjdk-17-jre-headless"
fi

# ---------------------------------------------------------------------------- 3. jdbc jars
if [ -f /usr/share/java/mariadb-java-client.jar ] && [ -f /usr/share/java/postgresql.jar ]; then
  say "ok: JDBC jars in /usr/share/java"
else
  say "installing: libmariadb-java libpostgresql-jdbc-java"
  apt_install libmariadb-java libpostgresql-jdbc-java
fi

# ---------------------------------------------------------------------------- 4. mariadb
mysql_ok() {
  "$PY" - "$MYSQL_HOST" "$MYSQL_PORT" <<'EOF' 2>/dev/null
import sys, pymysql
pymysql.connect(host=sys.argv[1], port=int(sys.argv[2]), user="root", password="",
                connect_timeout=3).close()
EOF
}
mysql_port_open() { (exec 3<>"/dev/tcp/$MYSQL_HOST/$MYSQL_PORT") 2>/dev/null; }
wait_for() {  # wait_for SECONDS CHECK...
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 1
  done
}
start_mariadb() {
  as_root install -d -o mysql -g mysql -m 0755 /run/mysqld 2>/dev/null || true
  if command -v start-stop-daemon >/dev/null 2>&1 && [ -x /usr/sbin/mariadbd ]; then
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  elif command -v mysqld_safe >/dev/null 2>&1; then
    (as_root mysqld_safe </dev/null >/dev/null 2>&1 &)
  else
    die "MariaDB is installed but neither /usr/sbin/mariadbd nor mysqld_safe was found"
  fi
}
if mysql_ok; then
  say "ok: MariaDB answers on $MYSQL_HOST:$MYSQL_PORT"
else
  installed_now=0
  if [ ! -x /usr/sbin/mariadbd ] && ! command -v mysqld_safe >/dev/null 2>&1; then
    say "installing: mariadb-server"
    apt_install mariadb-server
    installed_now=1
  fi
  if ! mysql_port_open; then
    say "starting: MariaDB"
    start_mariadb
    wait_for 60 mysql_port_open || die "MariaDB did not come up on $MYSQL_HOST:$MYSQL_PORT within 60 s"
  fi
  if [ "$installed_now" -eq 1 ] && ! mysql_ok; then
    # A fresh Debian install lets root in only through the unix socket: allow the
    # empty password over TCP too, as on the development machines (local use only).
    say "configuring: MariaDB root login over 127.0.0.1 without password"
    as_root mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; FLUSH PRIVILEGES;"
  fi
  wait_for 60 mysql_ok ||
    die "MariaDB listens on $MYSQL_HOST:$MYSQL_PORT but root without password cannot log in over TCP"
  say "ok: MariaDB answers on $MYSQL_HOST:$MYSQL_PORT"
fi
# Named time zones (CONVERT_TZ, SET time_zone = 'Europe/Berlin'): the tests write rows
# from sessions in DST zones. Loaded once: only while mysql.time_zone_name is empty.
tz_count() { mariadb -uroot -h"$MYSQL_HOST" -P"$MYSQL_PORT" -N -B -e "SELECT COUNT(*) FROM mysql.time_zone_name"; }
if [ "$(tz_count)" = "0" ]; then
  say "loading: MariaDB time zone tables (mariadb-tzinfo-to-sql /usr/share/zoneinfo)"
  mariadb-tzinfo-to-sql /usr/share/zoneinfo 2>/dev/null | mariadb -uroot -h"$MYSQL_HOST" -P"$MYSQL_PORT" mysql
fi
say "ok: MariaDB time zone tables ($(tz_count) zones)"

# ---------------------------------------------------------------------------- 5. postgresql
pg_ok() {
  "$PY" - "$PG_HOST" "$PG_PORT" <<'EOF' 2>/dev/null
import sys, psycopg
psycopg.connect(host=sys.argv[1], port=int(sys.argv[2]), user="postgres", dbname="postgres",
                connect_timeout=3).close()
EOF
}
pg_port_open() { (exec 3<>"/dev/tcp/$PG_HOST/$PG_PORT") 2>/dev/null; }
pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n1; }
if pg_ok; then
  say "ok: PostgreSQL answers on $PG_HOST:$PG_PORT"
else
  installed_now=0
  if [ -z "$(pg_version)" ] || ! command -v pg_ctlcluster >/dev/null 2>&1; then
    say "installing: postgresql"
    apt_install postgresql
    installed_now=1
  fi
  v="$(pg_version)"
  [ -n "$v" ] || die "no PostgreSQL cluster under /etc/postgresql"
  if [ "$installed_now" -eq 1 ]; then
    say "configuring: PostgreSQL trusts 127.0.0.1 and ::1 (local development only)"
    hba="/etc/postgresql/$v/main/pg_hba.conf"
    as_root sed -i -E \
      's/^(host[[:space:]]+all[[:space:]]+all[[:space:]]+(127\.0\.0\.1\/32|::1\/128)[[:space:]]+)[a-z0-9-]+[[:space:]]*$/\1trust/' \
      "$hba"
  fi
  if ! pg_port_open; then
    say "starting: PostgreSQL $v"
    as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start
  elif [ "$installed_now" -eq 1 ]; then
    as_root pg_ctlcluster --skip-systemctl-redirect "$v" main reload
  fi
  wait_for 60 pg_ok ||
    die "PostgreSQL on $PG_HOST:$PG_PORT does not let user postgres in without a password (pg_hba.conf)"
  say "ok: PostgreSQL answers on $PG_HOST:$PG_PORT"
fi

# ---------------------------------------------------------------------------- 6. sshd
if [ -x /usr/sbin/sshd ]; then
  say "ok: openssh-server installed (not started)"
else
  say "installing: openssh-server (not started)"
  apt_install openssh-server
fi

# ---------------------------------------------------------------------------- 7. chromium
if [ "$FOR_TESTS" -eq 1 ]; then
  if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    say "ok: chromium and chromedriver (browser smoke test)"
  else
    say "installing: chromium chromium-driver (browser smoke test of the Dagster UI)"
    apt_install chromium chromium-driver
    [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] ||
      die "chromium-driver installed but /usr/bin/chromium or /usr/bin/chromedriver is missing"
  fi
fi
