#!/usr/bin/env bash
# Lite topics at scale on a fresh three-node cluster:
#   1. send rate to random lite topics of a lite parent against the same sends to a normal topic
#      (alternating runs of MESSAGES each);
#   2. LITE_TOPICS lite topics (a million by default) created by one message each, and what they
#      cost: the brokers' resident memory and the broker state directory's size, per lite topic;
#   3. CLIENTS lite clients subscribing to PER_CLIENT lite topics each, the memory that costs per
#      subscription, and the rate they receive and ack those lite topics' messages at (against
#      the same number of messages received from the normal topic).
#
#   bash bench/lite_scale.sh
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), MESSAGES
# (default 200000), LITE_TOPICS (default 1000000), CLIENTS (16), PER_CLIENT (10000),
# CONCURRENCY (64), ROCKRAFT_DATA (default a new /tmp/rockraft-lite-scale.XXXXXX; removed on exit;
# the cluster is stopped on exit).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
MESSAGES="${MESSAGES:-200000}"
LITE_TOPICS="${LITE_TOPICS:-1000000}"
CLIENTS="${CLIENTS:-16}"
PER_CLIENT="${PER_CLIENT:-10000}"
CONCURRENCY="${CONCURRENCY:-64}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
B="$ROCKRAFT_BIN"
# shellcheck source=bench/data_dir.sh
source "$root/bench/data_dir.sh"
bench_data_dir lite-scale
export ROCKRAFT_BIN
bash "$root/scripts/cluster.sh" start > /dev/null
endpoints=127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083
"$B" topic create Plain --queues 8 > /dev/null
"$B" topic create Chats --queues 8 --type lite > /dev/null
"$B" group create plain-readers > /dev/null
"$B" group create chat-readers --lite-bind-topic Chats --lite-quota "$PER_CLIENT" > /dev/null

rate() { sed -n 's/.* in \([0-9.]*\) s: \([0-9]*\) messages\/s.*/\2/p'; }
produce() { # topic messages [lite topics]
  local lite=()
  [ -n "${3:-}" ] && lite=(--lite-topics "$3")
  "$B" bench produce --endpoints "$endpoints" --topic "$1" --messages "$2" --concurrency "$CONCURRENCY" "${lite[@]}"
}
rss_kib() { # the three brokers' anonymous resident memory (the mapped log's pages left out)
  local sum=0 n
  for n in 1 2 3; do sum=$((sum + $(awk '/^RssAnon/ {print $2}' "/proc/$(cat "$ROCKRAFT_DATA/node$n/pid")/status"))); done
  echo "$sum"
}
state_kib() { du -sk "$ROCKRAFT_DATA"/node*/groups/*/broker 2>/dev/null | awk '{s += $1} END {print s}'; }
# Checkpoints write the tables' recent changes to disk and drop them from memory.
settle() { sleep "${SETTLE_SECS:-20}"; }

produce Plain 5000 > /dev/null
produce Chats 5000 5000 > /dev/null
echo "== 1. send rate, ${MESSAGES} messages of 1 KiB, concurrency ${CONCURRENCY}, alternating"
for round in 1 2; do
  plain=$(produce Plain "$MESSAGES" | rate)
  lite=$(produce Chats "$MESSAGES" "$LITE_TOPICS" | rate)
  echo "round $round: normal topic ${plain} msg/s, random lite topics ${lite} msg/s ($((lite * 100 / plain)) % of the normal topic's; goal: 80 % or more)"
done

settle
rss0=$(rss_kib)
disk0=$(state_kib)
echo "== 2. ${LITE_TOPICS} lite topics"
produce Chats "$LITE_TOPICS" "$LITE_TOPICS" | sed -n 1p
settle
rss1=$(rss_kib)
disk1=$(state_kib)
echo "brokers' memory: $((rss0 / 1024)) MiB -> $((rss1 / 1024)) MiB for 3 replicas;" \
  "broker state on disk: $((disk0 / 1024)) MiB -> $((disk1 / 1024)) MiB"
awk -v r0="$rss0" -v r1="$rss1" -v d0="$disk0" -v d1="$disk1" -v n="$LITE_TOPICS" 'BEGIN {
  printf "per lite topic and replica: %.1f B of memory, %.1f B of broker state on disk (one message each)\n",
    (r1 - r0) * 1024 / n / 3, (d1 - d0) * 1024 / n / 3 }'
echo "first lite topics of the listing:"
"$B" topic lite Chats --group chat-readers --limit 3

echo "== 3. ${CLIENTS} clients x ${PER_CLIENT} lite topics"
total=$((CLIENTS * PER_CLIENT))
rss2=$(rss_kib)
consumed=$("$B" bench consume --endpoints "$endpoints" --topic Chats --group chat-readers --messages "$total" \
  --concurrency "$CLIENTS" --lite-topics "$LITE_TOPICS" --lite-per-client "$PER_CLIENT" --idle-secs 10)
echo "$consumed"
rss3=$(rss_kib)
awk -v r2="$rss2" -v r3="$rss3" -v n="$total" 'BEGIN {
  printf "brokers memory with the subscriptions (and consumption state): +%.1f B per subscription and replica\n", (r3 - r2) * 1024 / n / 3 }'
echo "the same number of messages from the normal topic:"
plain_consumed=$("$B" bench consume --endpoints "$endpoints" --topic Plain --group plain-readers --messages "$total" \
  --concurrency "$CLIENTS" --idle-secs 10)
echo "$plain_consumed"
lite_rate=$(rate <<< "$consumed" | head -1)
plain_rate=$(rate <<< "$plain_consumed" | head -1)
if [ -n "$lite_rate" ] && [ -n "$plain_rate" ] && [ "$plain_rate" -gt 0 ]; then
  echo "lite receive + ack: $((lite_rate * 100 / plain_rate)) % of the normal topic's rate (goal: 80 % or more)"
fi
