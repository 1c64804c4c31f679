#!/usr/bin/env bash
# Install (if needed) and start a PostgreSQL server on loopback for the scale-out tests and CI.
#
#   bash scripts/ci_postgres.sh               # install Debian's postgresql if missing, start it
#   bash scripts/ci_postgres.sh --no-install  # only start what is installed (no network); exit 3
#                                             # if PostgreSQL is not installed
#
# Idempotent and fast when the server is already installed and running (well under a second).
# Needs root (it installs packages and runs pg_ctlcluster). What it leaves:
#   - the Debian cluster <version>/main listening on 127.0.0.1 and ::1 only, port $PGPORT (5432)
#   - a role $PGUSER (loadertune, password $PGPASSWORD) that may create databases
#   - databases loadertune_optuna and loadertune_mlflow, owned by that role (separate databases:
#     Optuna and MLflow both keep an alembic_version table)
# and prints the admin URL tests use (LOADERTUNE_TEST_PG), e.g.
#   postgresql://loadertune:loadertune@127.0.0.1:5432/postgres
# The password is a test fixture for a loopback-only server: never expose this cluster as is.
set -euo pipefail

PGPORT="${PGPORT:-5432}"
PGUSER="${PGUSER:-loadertune}"
PGPASSWORD="${PGPASSWORD:-loadertune}"
install=1
[[ "${1:-}" == "--no-install" ]] && install=0

say() { echo "ci_postgres: $*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
    say "needs root (apt-get, pg_ctlcluster); run it with sudo"
    exit 2
fi

server_version() {
    # Newest PostgreSQL server installed from Debian's packages, empty if none.
    local bin
    for bin in $(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V -r); do
        basename "$(dirname "$(dirname "$bin")")"
        return
    done
}

version="$(server_version)"
if [[ -z "$version" || ! -x /usr/bin/pg_ctlcluster ]]; then
    if [[ $install -eq 0 ]]; then
        say "PostgreSQL is not installed (run without --no-install to install it)"
        exit 3
    fi
    say "installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
    version="$(server_version)"
fi

if ! pg_lsclusters -h | awk '{print $1"/"$2}' | grep -qx "$version/main"; then
    say "creating cluster $version/main"
    pg_createcluster "$version" main --port "$PGPORT" >/dev/null
fi
# Loopback only, whatever the cluster had before (a changed setting needs a restart).
changed=0
for setting in "listen_addresses=localhost" "port=$PGPORT"; do
    key="${setting%%=*}" value="${setting#*=}"
    if [[ "$(pg_conftool -s "$version" main show "$key" 2>/dev/null | tr -d "'")" != "$value" ]]; then
        pg_conftool "$version" main set "$key" "$value"
        changed=1
    fi
done

status="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}')"
if [[ "$status" == online* && $changed -eq 1 ]]; then
    say "restarting cluster $version/main for the new settings"
    pg_ctlcluster "$version" main restart
elif [[ "$status" != online* ]]; then
    say "starting cluster $version/main on 127.0.0.1:$PGPORT"
    pg_ctlcluster "$version" main start
fi
for _ in $(seq 1 50); do
    pg_isready -q -h 127.0.0.1 -p "$PGPORT" && break
    sleep 0.2
done
pg_isready -q -h 127.0.0.1 -p "$PGPORT" || { say "server did not come up"; exit 1; }

psql_admin() { runuser -u postgres -- psql -p "$PGPORT" -v ON_ERROR_STOP=1 -qtAc "$1"; }
if [[ -z "$(psql_admin "SELECT 1 FROM pg_roles WHERE rolname = '$PGUSER'")" ]]; then
    psql_admin "CREATE ROLE $PGUSER LOGIN CREATEDB PASSWORD '$PGPASSWORD'"
fi
for db in loadertune_optuna loadertune_mlflow; do
    if [[ -z "$(psql_admin "SELECT 1 FROM pg_database WHERE datname = '$db'")" ]]; then
        psql_admin "CREATE DATABASE $db OWNER $PGUSER"
    fi
done
echo "postgresql://$PGUSER:$PGPASSWORD@127.0.0.1:$PGPORT/postgres"
