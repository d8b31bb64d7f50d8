#!/usr/bin/env bash
# End-to-end check of the README's run command, as a user would run it: scripts/cluster.sh start,
# a topic, one message from the official Rust client through each node, the leader SIGKILLed,
# a message through a survivor, the node restarted until it holds every message, all four
# consumed and acked by the official Rust SimpleConsumer, stop. With authentication on, as an
# operator would run it: the clients sign as a user allowed only the smoke topic and group, and a
# client without credentials is refused.
# Uses its own data directory and ports 18081-18083 / 19081-19083 / 17081-17083.
set -euo pipefail
cd "$(dirname "$0")/.."

export ROCKRAFT_DATA="$(mktemp -d)"
export ROCKRAFT_CLIENT_PORT_BASE=18080 ROCKRAFT_RAFT_PORT_BASE=19080 ROCKRAFT_ADMIN_PORT_BASE=17080 ROCKRAFT_HTTP_PORT_BASE=16080
export ROCKRAFT_REMOTING_PORT_BASE=19875
export ROCKRAFT_SEGMENT_SIZE=1048576
trap 'scripts/cluster.sh stop > /dev/null 2>&1 || true; rm -rf "$ROCKRAFT_DATA"' EXIT
# ROCKRAFT_BIN: the node binary to run (default: the release build, built by scripts/cluster.sh).
bin="${ROCKRAFT_BIN:-target/release/rockraft}"
endpoint() { echo "127.0.0.1:$((18080 + $1))"; }
admin() { echo "127.0.0.1:$((17080 + $1))"; }
fail() {
  echo "smoke: FAILED: $*" >&2
  tail -5 "$ROCKRAFT_DATA/produce.log" >&2 || true
  exit 1
}

cargo build --locked --quiet -p rockraft-examples --bin produce --bin consume
produce() { target/debug/produce "$1" Smoke "$2" 2> "$ROCKRAFT_DATA/produce.log"; }

scripts/cluster.sh start --auth
# Configs hold the cluster and admin secrets, data directories the replicated user secrets.
for f in "$ROCKRAFT_DATA"/node*/config.toml "$ROCKRAFT_DATA/admin_credentials" "$ROCKRAFT_DATA/cluster_secret"; do
  [ "$(stat -c %a "$f")" = 600 ] || fail "$f is mode $(stat -c %a "$f"), not 600"
done
for d in "$ROCKRAFT_DATA"/node*; do
  [ "$(stat -c %a "$d")" = 700 ] || fail "$d is mode $(stat -c %a "$d"), not 700"
done
read -r ROCKRAFT_ACCESS_KEY ROCKRAFT_SECRET_KEY < "$ROCKRAFT_DATA/admin_credentials"
export ROCKRAFT_ACCESS_KEY ROCKRAFT_SECRET_KEY
created=""
for _ in $(seq 20); do
  if "$bin" --endpoint "$(admin 1)" topic create Smoke --queues 2; then created=yes; break; fi
  sleep 0.5
done
[ -n "$created" ] || fail "topic create"
! produce "$(endpoint 1)" "unsigned" || fail "a client without credentials could send"
ROCKRAFT_USER_SECRET=smoke-secret-1 "$bin" --endpoint "$(admin 1)" user create smoke > /dev/null || fail "user create"
"$bin" --endpoint "$(admin 1)" acl grant smoke --resource Topic:Smoke --actions pub,sub > /dev/null || fail "acl grant"
"$bin" --endpoint "$(admin 1)" acl grant smoke --resource Group:smoke-readers --actions sub > /dev/null || fail "acl grant"
export ROCKRAFT_CLIENT_ACCESS_KEY=smoke ROCKRAFT_CLIENT_SECRET_KEY=smoke-secret-1
for n in 1 2 3; do produce "$(endpoint "$n")" "via node $n" || fail "send through node $n"; done

leader=$("$bin" --endpoint "$(admin 1)" cluster status | awk '$3 == "Leader" { print $1 }')
[ -n "$leader" ] || fail "no leader in cluster status"
scripts/cluster.sh kill "$leader"
survivor=$((leader % 3 + 1))
sent=""
for _ in $(seq 60); do
  if produce "$(endpoint "$survivor")" "after the kill"; then sent=yes; break; fi
  sleep 0.5
done
[ -n "$sent" ] || fail "no send succeeded within 30 s of killing the leader"

scripts/cluster.sh restart "$leader"
count() { for q in 0 1; do "$bin" --endpoint "$(admin "$leader")" message list --topic Smoke --queue "$q" --local; done | wc -l; }
for _ in $(seq 60); do [ "$(count)" -eq 4 ] && break; sleep 0.5; done
[ "$(count)" -eq 4 ] || fail "the restarted node holds $(count) of 4 messages"

"$bin" --endpoint "$(admin 1)" group create smoke-readers > /dev/null || fail "group create"
target/debug/consume "$(endpoint "$leader")" Smoke smoke-readers 4 > "$ROCKRAFT_DATA/consumed.txt" \
  2> "$ROCKRAFT_DATA/produce.log" || fail "consuming the four messages"
for body in "via node 1" "via node 2" "via node 3" "after the kill"; do
  grep -q "body=$body\$" "$ROCKRAFT_DATA/consumed.txt" || fail "\"$body\" was not consumed"
done
lag() { "$bin" --endpoint "$(admin 1)" group list | awk -F'lag=' '/topic=Smoke/ { split($2, a, "\t"); print a[1] }'; }
# Node 1 may apply the last ack a moment after the consumer saw it committed.
for _ in $(seq 20); do [ "$(lag)" = "0" ] && break; sleep 0.25; done
lag=$(lag)
[ "$lag" = "0" ] || fail "group list shows lag ${lag:-none} after everything was acked"
scripts/cluster.sh stop
echo "smoke: the run command with authentication, sends through every node, failover, catch-up and consumption work"
