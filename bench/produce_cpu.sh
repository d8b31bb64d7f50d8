#!/usr/bin/env bash
# Throughput and CPU per message of one produce run on a fresh three-node cluster: the three
# brokers' utime + stime from /proc, and the bench client's, divided by the messages sent; and
# what the three brokers wrote to disk per message (write_bytes from /proc).
#
#   bash bench/produce_cpu.sh                      # 100,000 messages, 512 in flight, batch 1
#   CONCURRENCY=64 BATCH=16 bash bench/produce_cpu.sh
#   CONCURRENCY=1 MESSAGES=3000 bash bench/produce_cpu.sh   # window 1
#   CONSUME=1 bash bench/produce_cpu.sh            # POP receive + ack of MESSAGES sent first:
#                                                  # 16 loops of up to 32 (bench/compare.sh's)
#   PROTOCOL=remoting bash bench/produce_cpu.sh    # the sends of RocketMQ 4.x clients, over the
#                                                  # nodes' Remoting listeners (batch 1)
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), MESSAGES,
# CONCURRENCY, BATCH, CONSUME, QUEUES (of the topic, default 8), ROCKRAFT_DATA (default a new
# /tmp/rockraft-produce-cpu.XXXXXX; removed on exit; the cluster is stopped on exit). Sends go through all three
# nodes, as `bench/compare.sh` does; a 5,000-message warm-up comes first.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
MESSAGES="${MESSAGES:-100000}"
CONCURRENCY="${CONCURRENCY:-512}"
BATCH="${BATCH:-1}"
QUEUES="${QUEUES:-8}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
B="$ROCKRAFT_BIN"
# shellcheck source=bench/data_dir.sh
source "$root/bench/data_dir.sh"
bench_data_dir produce-cpu
export ROCKRAFT_BIN
bash "$root/scripts/cluster.sh" start > /dev/null
"$B" topic create BenchTopic --queues "$QUEUES" > /dev/null
endpoints=127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083
produce() {
  if [ "${PROTOCOL:-grpc}" = remoting ]; then
    "$B" bench produce-remoting --namesrv 127.0.0.1:9876,127.0.0.1:9877,127.0.0.1:9878 --topic BenchTopic \
      --messages "$1" --concurrency "$CONCURRENCY"
  else
    "$B" bench produce --endpoints "$endpoints" --topic BenchTopic --messages "$1" --concurrency "$CONCURRENCY" --batch "$BATCH"
  fi
}
produce 5000 > /dev/null
brokers_ticks() {
  local sum=0 n
  for n in 1 2 3; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$(cat "$ROCKRAFT_DATA/node$n/pid")/stat"))); done
  echo "$sum"
}
brokers_written() {
  local sum=0 n
  for n in 1 2 3; do sum=$((sum + $(awk '/^write_bytes/ { print $2 }' "/proc/$(cat "$ROCKRAFT_DATA/node$n/pid")/io"))); done
  echo "$sum"
}
t0=$(brokers_ticks)
w0=$(brokers_written)
# The client's CPU: bash's `times` in a subshell prints its children's user and system time on
# its second line.
if [ -n "${CONSUME:-}" ]; then
  "$B" group create bench-readers > /dev/null
  produce "$MESSAGES" > /dev/null
  t0=$(brokers_ticks)
  w0=$(brokers_written)
  run() {
    "$B" bench consume --endpoints "$endpoints" --topic BenchTopic --group bench-readers --messages "$1" \
      --concurrency 16 --batch 32
  }
else
  run() { produce "$1"; }
fi
out=$( (run "$MESSAGES" | sed -n 1p; times) )
t1=$(brokers_ticks)
w1=$(brokers_written)
echo "$out" | sed -n 1p
echo "$out" | sed -n 3p | awk -v t=$((t1 - t0)) -v n="$MESSAGES" -v hz="$(getconf CLK_TCK)" '
  function secs(s,  m) { m = s; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", s); sub(/s$/, "", s); return m * 60 + s }
  { printf "CPU per message: brokers %.1f us, client %.1f us\n", t * 1e6 / hz / n, (secs($1) + secs($2)) * 1e6 / n }'
awk -v w=$((w1 - w0)) -v n="$MESSAGES" 'BEGIN { printf "written per message: brokers %.0f B\n", w / n }'
