#!/usr/bin/env bash
# A retried send is stored once, whatever data group the retry reaches: three official Python
# producers (one per node) send unique messages to a 4-queue topic on a cluster of three data
# groups for DURATION seconds while a random node is SIGKILLed and restarted every 1-4 s. Then
# every node's store is listed: each acknowledged id must be stored, and no id twice.
#
#   bash bench/retry_once/run.sh              # one 90 s round
#   ROUNDS=2 DURATION=60 bash bench/retry_once/run.sh
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), ROUNDS,
# DURATION, DATA_GROUPS (default 3).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
ROUNDS="${ROUNDS:-1}"
DURATION="${DURATION:-90}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
export ROCKRAFT_BIN ROCKRAFT_DATA_GROUPS="${DATA_GROUPS:-3}"
B="$ROCKRAFT_BIN"
python="${CARGO_TARGET_DIR:-$root/target}/python/bin/python"
[ -x "$python" ] || bash "$root/scripts/setup.sh" > /dev/null
ROCKRAFT_DATA=""
work=""
trap '[ -z "$ROCKRAFT_DATA" ] || { bash "$root/scripts/cluster.sh" stop > /dev/null 2>&1; rm -rf "$ROCKRAFT_DATA" "$work"; }' EXIT
for round in $(seq "$ROUNDS"); do
  export ROCKRAFT_DATA
  ROCKRAFT_DATA="$(mktemp -d /tmp/rockraft-retry-once.XXXXXX)"
  work="$(mktemp -d /tmp/rockraft-retry-once-out.XXXXXX)"
  bash "$root/scripts/cluster.sh" start > /dev/null
  "$B" topic create Once --queues 4 > /dev/null
  for n in 1 2 3; do
    "$python" "$root/bench/retry_once/producer.py" --endpoints "127.0.0.1:808$n" --topic Once \
      --stop "$work/stop" --name "p$n" > "$work/acked.$n" 2> "$work/producer.$n" &
  done
  kills=0
  end=$((SECONDS + DURATION))
  while [ $SECONDS -lt $end ]; do
    sleep "$((1 + RANDOM % 3)).$((RANDOM % 10))"
    victim=$((1 + RANDOM % 3))
    bash "$root/scripts/cluster.sh" kill "$victim" > /dev/null
    kills=$((kills + 1))
    bash "$root/scripts/cluster.sh" restart "$victim" > /dev/null
  done
  touch "$work/stop"
  wait
  # Every node caught up: what it stores of each queue, from its own store.
  sleep 5
  for n in 1 2 3; do
    for q in 0 1 2 3; do
      from=0
      while :; do
        page="$("$B" --endpoint "127.0.0.1:708$n" message list --topic Once --queue "$q" --from "$from" --limit 1000 --local)"
        lines="$(echo "$page" | awk '$1 ~ /^[0-9]+$/')"
        [ -n "$lines" ] || break
        echo "$lines" | awk -v q="$q" '{ print q, $1, $2 }' >> "$work/stored.$n"
        from=$(( $(echo "$lines" | tail -1 | awk '{ print $1 }') + 1 ))
      done
    done
  done
  acked=$(cat "$work"/acked.* | sort -u | wc -l)
  line="round $round: $kills kills, $acked acknowledged;"
  for n in 1 2 3; do
    stored=$(wc -l < "$work/stored.$n")
    twice=$(awk '{ print $3 }' "$work/stored.$n" | sort | uniq -d | wc -l)
    missing=$(comm -23 <(cat "$work"/acked.* | sort -u) <(awk '{ print $3 }' "$work/stored.$n" | sort -u) | wc -l)
    line="$line node $n stores $stored, $twice ids twice, $missing acknowledged missing;"
  done
  echo "$line"
  cat "$work"/producer.* | sed 's/^/  /'
  bash "$root/scripts/cluster.sh" stop > /dev/null
  rm -rf "$ROCKRAFT_DATA" "$work"
  ROCKRAFT_DATA=""
done
