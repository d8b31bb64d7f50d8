#!/usr/bin/env bash
# What a node's death costs each data group's sends: a fresh three-node cluster with three data
# groups (each node leads one) and a 6-queue topic (two queues per group); `rockraft bench
# produce` sends through nodes 1 and 3, each worker to one queue (`--queue-gaps`), and node 2,
# which leads group 2, is SIGKILLed 4 s in. Per group: the longest time any of its queues went
# without an acknowledged send. The groups node 2 did not lead should see no gap beyond their
# usual latency; group 2's is its failover.
#
#   bash bench/failover_gaps.sh             # 3 rounds
#   ROUNDS=5 MESSAGES=200000 bash bench/failover_gaps.sh
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), ROUNDS,
# MESSAGES (per round, default 150,000: enough to send for well over 4 s), CONCURRENCY
# (default 64).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-3}"
MESSAGES="${MESSAGES:-150000}"
CONCURRENCY="${CONCURRENCY:-64}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
export ROCKRAFT_BIN ROCKRAFT_DATA_GROUPS=3
B="$ROCKRAFT_BIN"

# Each data group's leader, as "group:leader " pairs (the metadata group's row is left out).
leaders() { "$B" --endpoint 127.0.0.1:7081 cluster status 2>/dev/null | awk '/^group/ { t = 1; next } t && NF >= 5 && $2 != "metadata" { printf "%s:%s ", $1, $2 }'; }
ROCKRAFT_DATA=""
# Whatever ends a round, its cluster is stopped and its data (preallocated segments) removed.
trap '[ -z "$ROCKRAFT_DATA" ] || { bash "$root/scripts/cluster.sh" stop > /dev/null 2>&1; rm -rf "$ROCKRAFT_DATA"; }' EXIT
for round in $(seq "$ROUNDS"); do
  export ROCKRAFT_DATA
  ROCKRAFT_DATA="$(mktemp -d /tmp/rockraft-failover-gaps.XXXXXX)"
  bash "$root/scripts/cluster.sh" start > /dev/null
  deadline=$((SECONDS + 60))
  until [ "$(leaders)" = "1:1 2:2 3:3 " ]; do
    [ $SECONDS -lt $deadline ] || { echo "leaders not spread: $(leaders)" >&2; exit 1; }
    sleep 0.2
  done
  "$B" topic create GapTopic --queues 6 > /dev/null
  # Which group holds each queue: the `groups=` column of the topic list.
  groups="$("$B" topic list | grep -o 'groups=[0-9,]*' | head -1 | cut -d= -f2)"
  (sleep 4 && bash "$root/scripts/cluster.sh" kill 2 > /dev/null) &
  out="$("$B" bench produce --endpoints 127.0.0.1:8081,127.0.0.1:8083 --topic GapTopic \
    --messages "$MESSAGES" --concurrency "$CONCURRENCY" --queue-gaps 6 || true)"
  wait
  bash "$root/scripts/cluster.sh" stop > /dev/null
  rm -rf "$ROCKRAFT_DATA"
  ROCKRAFT_DATA=""
  line="round $round ($(echo "$out" | sed -n 1p | grep -o '[0-9]* failed'), queue groups $groups):"
  for g in 1 2 3; do
    worst=$(echo "$out" | awk -v groups="$groups" -v g="$g" '
      BEGIN { n = split(groups, of, ",") }
      /^queue [0-9]+:/ { q = $2 + 0; if (of[q + 1] == g && $(NF - 1) > w) w = $(NF - 1) }
      END { print w + 0 }')
    line="$line group $g longest gap ${worst} ms;"
  done
  echo "$line"
done
