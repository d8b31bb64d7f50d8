#!/usr/bin/env bash
# Throughput and CPU with 1, 3 and 6 data groups on a fresh three-node cluster each: a produce
# run at 512 in flight over all client endpoints, then a consume run (receive + ack) of what it
# sent. For each run: messages/s, each node's share of the brokers' CPU, and the brokers' CPU
# per message (every node's user + system time over the run, / messages).
#
#   bash bench/data_groups.sh                       # 100,000 1 KiB messages, 12 queues
#   GROUPS_LIST="1 3" MESSAGES=50000 bash bench/data_groups.sh
#   FOLLOW_ROUTES=1 bash bench/data_groups.sh       # producers send where the routes say
#   ROCKRAFT_NODES=5 GROUPS_LIST=5 bash bench/data_groups.sh   # five nodes, groups of three
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), ROCKRAFT_NODES
# (default 3), MESSAGES,
# CONCURRENCY (produce, default 512), CONSUMERS (consume long polls, default 64), QUEUES
# (default 12: 4, 2 and 2 queues per group with 3 and 6 groups), GROUPS_LIST, FOLLOW_ROUTES (1:
# each producer worker sends to one queue at the endpoint the topic's route names for it, as the
# official clients do; with several groups, that is the queue's group leader).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
MESSAGES="${MESSAGES:-100000}"
CONCURRENCY="${CONCURRENCY:-512}"
CONSUMERS="${CONSUMERS:-64}"
QUEUES="${QUEUES:-12}"
GROUPS_LIST="${GROUPS_LIST:-1 3 6}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
export ROCKRAFT_BIN
B="$ROCKRAFT_BIN"
hz="$(getconf CLK_TCK)"
NODES="${ROCKRAFT_NODES:-3}"
export ROCKRAFT_NODES="$NODES"
endpoints="$(seq -s, -f '127.0.0.1:%g' 8081 $((8080 + NODES)))"
routes=()
[ "${FOLLOW_ROUTES:-0}" = 1 ] && routes=(--follow-routes)

ticks() { awk '{print $14 + $15}' "/proc/$(cat "$ROCKRAFT_DATA/node$1/pid")/stat"; }
all_ticks() { for n in $(seq 1 "$NODES"); do ticks "$n"; done; }

# Waits until node 1 sees every one of the `$1` groups led (the status table's rows; with one
# group there is no table, and the start already waited for its leader).
wait_groups() {
  [ "$1" -gt 1 ] || return 0
  for _ in $(seq 1 300); do
    led="$("$B" --endpoint 127.0.0.1:7081 cluster status 2>/dev/null | awk '/^group +leader/ { t = 1; next } t && ($2 != "-" || /no replica/) { n++ } END { print n + 0 }')"
    [ "$led" -ge "$1" ] && return 0
    sleep 0.2
  done
  echo "the $1 groups did not all elect a leader" >&2
  return 1
}

# "<label>: <rate>; node 1 X%, node 2 Y%, ...; brokers N us/msg" from tick counts before and after
# a run of $MESSAGES messages.
report() {
  local label="$1" rate="$2"; shift 2
  local -a b=("${@:1:$NODES}") a=("${@:$((NODES + 1)):$NODES}")
  local total=0 line
  for n in $(seq 0 $((NODES - 1))); do total=$((total + a[n] - b[n])); done
  line="$label: $rate;"
  for n in $(seq 0 $((NODES - 1))); do
    line="$line $(awk -v t=$((a[n] - b[n])) -v all="$total" -v n=$((n + 1)) 'BEGIN { printf "node %d %.0f%%,", n, 100 * t / all }')"
  done
  echo "$line $(awk -v t="$total" -v m="$MESSAGES" -v hz="$hz" 'BEGIN { printf "brokers %.1f us/msg", t * 1e6 / hz / m }')"
}

# The cluster of the run under way is stopped however the script ends.
trap '[ -n "${ROCKRAFT_DATA:-}" ] && bash "$root/scripts/cluster.sh" stop > /dev/null 2>&1' EXIT
for groups in $GROUPS_LIST; do
  export ROCKRAFT_DATA
  ROCKRAFT_DATA="$(mktemp -d /tmp/rockraft-data-groups.XXXXXX)"
  ROCKRAFT_DATA_GROUPS="$groups" bash "$root/scripts/cluster.sh" start > /dev/null
  wait_groups "$groups"
  # Leaders spread: give the balancer its hand-overs before measuring.
  sleep 8
  "$B" topic create BenchTopic --queues "$QUEUES" > /dev/null
  "$B" group create BenchGroup > /dev/null
  "$B" bench produce --endpoints "$endpoints" --topic BenchTopic --messages 5000 --concurrency "$CONCURRENCY" > /dev/null
  "$B" bench consume --endpoints "$endpoints" --topic BenchTopic --group BenchGroup --messages 5000 \
    --concurrency "$CONSUMERS" --idle-secs 5 > /dev/null
  before=($(all_ticks))
  rate="$("$B" bench produce --endpoints "$endpoints" --topic BenchTopic --messages "$MESSAGES" \
    --concurrency "$CONCURRENCY" "${routes[@]}" | sed -n 1p | grep -o '[0-9]* messages/s')"
  after=($(all_ticks))
  report "$groups data group(s), produce" "$rate" "${before[@]}" "${after[@]}"
  before=($(all_ticks))
  rate="$("$B" bench consume --endpoints "$endpoints" --topic BenchTopic --group BenchGroup \
    --messages "$MESSAGES" --concurrency "$CONSUMERS" | sed -n 1p | grep -o '[0-9]* messages/s')"
  after=($(all_ticks))
  report "$groups data group(s), consume" "$rate" "${before[@]}" "${after[@]}"
  bash "$root/scripts/cluster.sh" stop > /dev/null
  rm -rf "$ROCKRAFT_DATA"
done
