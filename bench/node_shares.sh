#!/usr/bin/env bash
# Each node's CPU per message and share of the cluster's CPU under one produce run, on a fresh
# three-node cluster, for three ways of sending:
#
#   all       sends spread over the three client endpoints (what the routes lead clients to)
#   leader    every send to the leader's endpoint: the leader receives, orders, replicates and
#             applies; the followers only follow and apply
#   follower  every send to one follower's endpoint: it receives and forwards, the leader orders
#             and replicates, the other follower only follows
#
# From `leader` and `follower` come the per-role costs a model of larger clusters needs
# (`docs/performance.md`, *Scaling out*): receive (at the node a client sends to), forward,
# lead (order + replicate + answer), follow, each with its apply.
#
#   bash bench/node_shares.sh                 # 100,000 1 KiB messages, 512 in flight, each way
#   MODES="all" MESSAGES=50000 bash bench/node_shares.sh
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), MESSAGES,
# CONCURRENCY, QUEUES (default 8), MODES (default "all leader follower").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
MESSAGES="${MESSAGES:-100000}"
CONCURRENCY="${CONCURRENCY:-512}"
QUEUES="${QUEUES:-8}"
MODES="${MODES:-all leader follower}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
export ROCKRAFT_BIN
B="$ROCKRAFT_BIN"
hz="$(getconf CLK_TCK)"

ticks() { awk '{print $14 + $15}' "/proc/$(cat "$ROCKRAFT_DATA/node$1/pid")/stat"; }

# The leader's id, as node 1 reports it.
leader() {
  "$B" --endpoint 127.0.0.1:7081 cluster status | awk '$3 == "Leader" { print $1; exit }'
}

for mode in $MODES; do
  export ROCKRAFT_DATA
  ROCKRAFT_DATA="$(mktemp -d /tmp/rockraft-node-shares.XXXXXX)"
  bash "$root/scripts/cluster.sh" start > /dev/null
  "$B" topic create BenchTopic --queues "$QUEUES" > /dev/null
  l="$(leader)"
  f=$(( l % 3 + 1 ))
  case "$mode" in
    all) endpoints=127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083 ;;
    leader) endpoints="127.0.0.1:$((8080 + l))" ;;
    follower) endpoints="127.0.0.1:$((8080 + f))" ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  produce() {
    "$B" bench produce --endpoints "$endpoints" --topic BenchTopic --messages "$1" --concurrency "$CONCURRENCY"
  }
  produce 5000 > /dev/null
  before=(); for n in 1 2 3; do before+=("$(ticks "$n")"); done
  rate="$(produce "$MESSAGES" | sed -n 1p | grep -o '[0-9]* messages/s')"
  after=(); for n in 1 2 3; do after+=("$(ticks "$n")"); done
  bash "$root/scripts/cluster.sh" stop > /dev/null
  rm -rf "$ROCKRAFT_DATA"
  total=0; for n in 0 1 2; do total=$((total + after[n] - before[n])); done
  line="$mode ($rate, leader node $l):"
  for n in 1 2 3; do
    t=$((after[n - 1] - before[n - 1]))
    role=follower
    [ "$n" = "$l" ] && role=leader
    [ "$mode" = follower ] && [ "$n" = "$f" ] && role="follower+receive"
    [ "$mode" = all ] && [ "$n" != "$l" ] && role="follower+receive"
    [ "$mode" != follower ] && [ "$n" = "$l" ] && role="leader+receive"
    line="$line $(awk -v t="$t" -v all="$total" -v m="$MESSAGES" -v hz="$hz" -v n="$n" -v r="$role" \
      'BEGIN { printf "node %d %s %.1f us/msg %.0f%%;", n, r, t * 1e6 / hz / m, 100 * t / all }')"
  done
  echo "$line $(awk -v t="$total" -v m="$MESSAGES" -v hz="$hz" 'BEGIN { printf "brokers %.1f us/msg", t * 1e6 / hz / m }')"
done
