#!/usr/bin/env bash
# Start the MLflow tracking server that sweeps on several hosts log to: PostgreSQL backend
# store, artifacts proxied by the server (clients need no shared file system), bound to
# 127.0.0.1 unless told otherwise. Runs in the foreground; extra arguments go to `mlflow server`.
#
#   bash scripts/mlflow_server.sh                        # loopback, port 5000
#   MLFLOW_PORT=5001 bash scripts/mlflow_server.sh --workers 1
#
# Then, on every host:  loadertune -m tracking.tracking_uri=http://<server>:5000 ...
# (or export MLFLOW_TRACKING_URI=http://<server>:5000).
#
# Settings (environment):
#   MLFLOW_BACKEND    backend store; default the loadertune_mlflow database that
#                     scripts/ci_postgres.sh creates:
#                     postgresql://loadertune:loadertune@127.0.0.1:5432/loadertune_mlflow
#                     Keep it apart from the Optuna database: both keep an alembic_version table.
#   MLFLOW_ARTIFACTS  where the server stores artifacts (--artifacts-destination): a local
#                     folder (default ./outputs/mlartifacts) or s3://..., gs://... Clients upload
#                     through the server (experiments get the mlflow-artifacts:/ root).
#   MLFLOW_HOST       interface to bind (default 127.0.0.1: this machine only). Binding is not
#                     access control: to let other hosts in, bind 0.0.0.0 AND set both below.
#   MLFLOW_PORT       default 5000.
#   MLFLOW_ALLOWED_HOSTS  --allowed-hosts: the Host headers the server answers, e.g.
#                     "mlflow.cluster.local:5000,10.0.0.12:5000" (MLflow's default: localhost and
#                     private addresses). Stops DNS-rebinding attacks from a browser.
#   MLFLOW_BASIC_AUTH=1   --app-name basic-auth: every request needs a user and password
#                     (needs `pip install 'mlflow[auth]'`, i.e. Flask-WTF). The admin password
#                     comes from MLFLOW_AUTH_ADMIN_PASSWORD on first start; users live in
#                     MLFLOW_AUTH_DB (default sqlite next to the artifacts). Clients set
#                     MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD. The auth app also
#                     needs MLFLOW_FLASK_SERVER_SECRET_KEY (CSRF); unset, one is generated once
#                     and kept (mode 600) beside the auth config.
#   MLFLOW_INSECURE=1 bind a non-loopback address without basic auth (a trusted network only).
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION  default false here: MLflow 3.17 otherwise starts seven
#                     huey job-runner processes (GenAI scorers, trace roll-ups) that loadertune
#                     never uses; measured here, start-up took 19 s with them, 6 s without.
# Put TLS in front (a reverse proxy) when the network between hosts is not trusted: basic auth
# sends the password with every request.
set -euo pipefail
cd "$(dirname "$0")/.."

BACKEND="${MLFLOW_BACKEND:-postgresql://loadertune:loadertune@127.0.0.1:5432/loadertune_mlflow}"
ARTIFACTS="${MLFLOW_ARTIFACTS:-$PWD/outputs/mlartifacts}"
HOST="${MLFLOW_HOST:-127.0.0.1}"
PORT="${MLFLOW_PORT:-5000}"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"
MLFLOW="${MLFLOW:-$( [[ -x .venv/bin/mlflow ]] && echo .venv/bin/mlflow || echo mlflow )}"

args=(server
    --backend-store-uri "$BACKEND"
    --artifacts-destination "$ARTIFACTS"
    --host "$HOST"
    --port "$PORT")

if [[ -n "${MLFLOW_ALLOWED_HOSTS:-}" ]]; then
    args+=(--allowed-hosts "$MLFLOW_ALLOWED_HOSTS")
fi

if [[ "${MLFLOW_BASIC_AUTH:-0}" == 1 ]]; then
    if [[ -z "${MLFLOW_AUTH_CONFIG_PATH:-}" ]]; then
        mkdir -p "$ARTIFACTS"
        export MLFLOW_AUTH_CONFIG_PATH="$ARTIFACTS/../basic_auth.ini"
        cat >"$MLFLOW_AUTH_CONFIG_PATH" <<EOF
[mlflow]
default_permission = READ
database_uri = ${MLFLOW_AUTH_DB:-sqlite:///$(cd "$ARTIFACTS/.." && pwd)/basic_auth.db}
admin_username = ${MLFLOW_AUTH_ADMIN:-admin}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
EOF
    fi
    if [[ -z "${MLFLOW_FLASK_SERVER_SECRET_KEY:-}" ]]; then
        # The auth app's CSRF protection refuses to start without a static key; keep one
        # beside the config so restarts (and several workers) share it.
        key_file="$(dirname "$MLFLOW_AUTH_CONFIG_PATH")/mlflow_secret_key"
        if [[ ! -s "$key_file" ]]; then
            (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$key_file")
        fi
        MLFLOW_FLASK_SERVER_SECRET_KEY="$(cat "$key_file")"
        export MLFLOW_FLASK_SERVER_SECRET_KEY
    fi
    args+=(--app-name basic-auth)
fi

case "$HOST" in
    127.*|localhost|::1) ;;
    *)
        if [[ "${MLFLOW_BASIC_AUTH:-0}" != 1 && "${MLFLOW_INSECURE:-0}" != 1 ]]; then
            echo "mlflow_server: MLFLOW_HOST=$HOST opens the server to the network without a" \
                "password. Fix: set MLFLOW_BASIC_AUTH=1 and MLFLOW_ALLOWED_HOSTS, or" \
                "MLFLOW_INSECURE=1 on a trusted network" >&2
            exit 2
        fi
        ;;
esac

echo "mlflow_server: http://$HOST:$PORT  backend ${BACKEND%%@*}@...  artifacts $ARTIFACTS" >&2
exec "$MLFLOW" "${args[@]}" "$@"
