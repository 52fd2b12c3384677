#!/usr/bin/env bash
# Independent load test: the gateway as an operator runs it (its own
# process, the echo agent, a bot.yaml), driven by chatgate-load (another
# process, a client of its own): first on SQLite, then on PostgreSQL,
# alternating ROUNDS times. Loopback only.
#
#   CHATGATE_TEST_POSTGRES_DSN=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable \
#     scripts/load-compare.sh [USERS] [DURATION] [ROUNDS]
#
# PostgreSQL gets a database of its own, chatgate_load, made anew each
# round on the server the DSN names (its user must be allowed to).
set -euo pipefail
cd "$(dirname "$0")/.."
users=${1:-50}
duration=${2:-20s}
rounds=${3:-3}
: "${CHATGATE_TEST_POSTGRES_DSN:?set it to a PostgreSQL DSN}"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/gateway" ./cmd/gateway
go build -o "$work/load" ./cmd/chatgate-load
port=18765
base=${CHATGATE_TEST_POSTGRES_DSN%%\?*}
query=${CHATGATE_TEST_POSTGRES_DSN#"$base"}
load_dsn="${base%/*}/chatgate_load${query}"
admin_dsn="$CHATGATE_TEST_POSTGRES_DSN"

config() { # store dsn
  cat > "$work/$1.yaml" <<YAML
gateway:
  listen: 127.0.0.1:$port
  pid_file: $work/$1.pid
storage:
  driver: $1
  dsn: $2
channels:
  websocket:
    rate_limit:
      per_second: 100000
      burst: 100000
YAML
}

one() { # store round
  local store=$1
  if [ "$store" = postgres ]; then
    psql "$admin_dsn" -qc "DROP DATABASE IF EXISTS chatgate_load" -c "CREATE DATABASE chatgate_load" >/dev/null
    config postgres "$load_dsn"
  else
    rm -f "$work"/gateway.db*
    config sqlite "$work/gateway.db"
  fi
  "$work/gateway" serve -c "$work/$store.yaml" >"$work/$store.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  printf '%-8s round %s: ' "$store" "$2"
  "$work/load" -url "ws://127.0.0.1:$port/ws" -users "$users" -duration "$duration" -json "$work/$store-$2.json"
  kill -TERM "$pid"
  wait "$pid" || true
}

for r in $(seq 1 "$rounds"); do
  one sqlite "$r"
  one postgres "$r"
done
python3 - "$work" "$rounds" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
for r in range(1, rounds + 1):
    s = json.load(open(f"{work}/sqlite-{r}.json"))
    p = json.load(open(f"{work}/postgres-{r}.json"))
    print(f"round {r}: postgres ÷ sqlite replies/s {p['replies_per_second'] / s['replies_per_second']:.3f} "
          f"({p['replies_per_second']:.0f} vs {s['replies_per_second']:.0f}); p99 {p['p99_ms']:.2f} vs {s['p99_ms']:.2f} ms")
PY
