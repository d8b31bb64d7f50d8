#!/usr/bin/env bash
# What authentication and TLS cost per message: three release nodes from scripts/cluster.sh,
# `rockraft bench produce` of 100,000 1 KiB messages at 512 in flight through all three client
# ports, in four modes, interleaved ROUNDS times (default 2), three runs each:
#   plain  no authentication, no TLS
#   auth   [auth] enabled: every request signed (MQv2-HMAC-SHA1) and checked against the rules
#   tls    the same over TLS (a CA and node certificate made here with openssl)
#   mtls   the same, and members over mutual TLS on the raft ports (`scripts/cluster.sh start
#          --auth --tls`: its own CA and a certificate per node; replication and forwarded
#          requests encrypted too)
# MODES="plain mtls" runs only those. ROCKRAFT_BIN=<binary> runs that build (another release's,
# for a before/after pair) instead of building this checkout's.
# Prints messages/s and the three nodes' CPU (utime + stime) per message of each run.
# Uses its own data directories under $WORK (default: a temp dir) and the default ports (moved
# with ROCKRAFT_*_PORT_BASE as in scripts/cluster.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rounds="${ROUNDS:-2}"
work="${WORK:-$(mktemp -d /tmp/rockraft-auth-cost.XXXXXX)}"
if [ -n "${ROCKRAFT_BIN:-}" ]; then
  bin="$ROCKRAFT_BIN"
else
  bin="${CARGO_TARGET_DIR:-$root/target}/release/rockraft"
  cargo build --release --locked --quiet -p rockraft --bin rockraft
fi
export ROCKRAFT_BIN="$bin"
client_base="${ROCKRAFT_CLIENT_PORT_BASE:-8080}"
export ROCKRAFT_ENDPOINT="127.0.0.1:$((${ROCKRAFT_ADMIN_PORT_BASE:-7080} + 1))"
endpoints="127.0.0.1:$((client_base + 1)),127.0.0.1:$((client_base + 2)),127.0.0.1:$((client_base + 3))"

# A CA and a certificate for 127.0.0.1 it signed.
tls="$work/tls"
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tls/ca.key" \
  -out "$tls/ca.pem" -days 2 -subj "/CN=bench CA" 2> /dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tls/node.key" \
  -out "$tls/node.csr" -subj "/CN=node" 2> /dev/null
printf "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n" > "$tls/ext"
openssl x509 -req -in "$tls/node.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
  -out "$tls/node.pem" -days 2 -extfile "$tls/ext" 2> /dev/null

cpu_ticks() {
  local total=0 pid fields
  for n in 1 2 3; do
    pid=$(cat "$ROCKRAFT_DATA/node$n/pid")
    read -r -a fields < <(cut -d' ' -f14,15 "/proc/$pid/stat")
    total=$((total + fields[0] + fields[1]))
  done
  echo "$total"
}

run_mode() {
  local mode=$1 flag=""
  export ROCKRAFT_DATA="$work/data-$mode"
  rm -rf "$ROCKRAFT_DATA"
  unset ROCKRAFT_TLS_CERT ROCKRAFT_TLS_KEY ROCKRAFT_TLS_CA ROCKRAFT_ACCESS_KEY ROCKRAFT_SECRET_KEY
  case $mode in
    auth) flag=--auth ;;
    tls)
      flag=--auth
      export ROCKRAFT_TLS_CERT="$tls/node.pem" ROCKRAFT_TLS_KEY="$tls/node.key" ROCKRAFT_TLS_CA="$tls/ca.pem"
      ;;
    mtls) flag="--auth --tls" ;;
  esac
  scripts/cluster.sh start $flag > /dev/null
  if [ "$mode" = mtls ]; then export ROCKRAFT_TLS_CA="$ROCKRAFT_DATA/tls/ca.pem"; fi
  if [ -s "$ROCKRAFT_DATA/admin_credentials" ]; then
    read -r ROCKRAFT_ACCESS_KEY ROCKRAFT_SECRET_KEY < "$ROCKRAFT_DATA/admin_credentials"
    export ROCKRAFT_ACCESS_KEY ROCKRAFT_SECRET_KEY
  fi
  "$bin" topic create T8 --queues 8 > /dev/null
  local ticks_per_sec before after line
  ticks_per_sec=$(getconf CLK_TCK)
  for run in 1 2 3; do
    before=$(cpu_ticks)
    line=$("$bin" bench produce --topic T8 --messages 100000 --concurrency 512 \
      --endpoints "$endpoints" 2>&1 | grep -E 'messages/s' | head -1)
    after=$(cpu_ticks)
    echo "$mode run $run: $(echo "$line" | grep -oE '[0-9]+ messages/s'), brokers' CPU $(((after - before) * 1000000 / ticks_per_sec / 100000)) µs/message"
  done
  scripts/cluster.sh stop
  # About 1.6 GB a mode: freed at once, so later modes stay clear of the free-space marks.
  rm -rf "$ROCKRAFT_DATA"
}

for _ in $(seq "$rounds"); do
  for mode in ${MODES:-plain auth tls mtls}; do run_mode "$mode"; done
done
