#!/usr/bin/env bash
# A full disk as a state: three nodes from scripts/cluster.sh with their data on one small ext4
# filesystem (a loop device), 8 MiB segments (marks: soft 32 MiB, hard 16 MiB per node):
#   1. `bench produce` of far more 1 KiB messages than fit: how many are acknowledged before the
#      cluster refuses, how many are refused, and the free space and alarm then;
#   2. `bench consume` drains every acknowledged message while sends are refused;
#   3. the filesystem is grown online (resize2fs): how long until sends are accepted again, with
#      no node restarted; then `cluster verify` (the replicas agree) and the nodes' uptime.
#
#   sudo bash bench/disk_fill.sh        (needs root: losetup, mount)
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), DISK_MB (150),
# GROWN_MB (400), MESSAGES (200000), CONCURRENCY (64).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
DISK_MB="${DISK_MB:-150}"
GROWN_MB="${GROWN_MB:-400}"
MESSAGES="${MESSAGES:-200000}"
CONCURRENCY="${CONCURRENCY:-64}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
B="$ROCKRAFT_BIN"
work="$(mktemp -d /tmp/rockraft-disk-fill.XXXXXX)"
image="$work/disk.img"
mnt="$work/disk"
mkdir -p "$mnt"
truncate -s "${DISK_MB}M" "$image"
mkfs.ext4 -q -m 0 "$image"
loop="$(losetup --find --show "$image")"
mount "$loop" "$mnt"
export ROCKRAFT_DATA="$mnt/data" ROCKRAFT_SEGMENT_SIZE=$((8 << 20)) ROCKRAFT_BIN
cleanup() {
  bash "$root/scripts/cluster.sh" stop > /dev/null 2>&1 || true
  umount "$mnt" 2> /dev/null || true
  losetup -d "$loop" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_mib() { df -m --output=avail "$mnt" | tail -1 | tr -d ' '; }

bash "$root/scripts/cluster.sh" start > /dev/null
endpoints=127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083
"$B" topic create Fill --queues 8 > /dev/null
"$B" group create drainers > /dev/null
pids="$(cat "$ROCKRAFT_DATA"/node*/pid | tr '\n' ' ')"
echo "filesystem: ${DISK_MB} MB ext4, $(free_mib) MiB free after start; 8 MiB segments"

echo "== 1. $MESSAGES sends of 1 KiB, concurrency $CONCURRENCY"
"$B" bench produce --endpoints "$endpoints" --topic Fill --messages "$MESSAGES" --concurrency "$CONCURRENCY" || true
echo "free now: $(free_mib) MiB"
"$B" cluster status

echo "== 2. drain while sends are refused"
acked="$("$B" topic list | awk '$1 == "Fill" {print $4}')"
"$B" bench consume --endpoints "$endpoints" --topic Fill --group drainers --messages "${acked:-1}" --idle-secs 5 || true
"$B" group list

echo "== 3. grow the filesystem to ${GROWN_MB} MB online"
truncate -s "${GROWN_MB}M" "$image"
losetup -c "$loop"
grown_at=$(date +%s.%N)
resize2fs -f "$loop" > /dev/null 2>&1
echo "free now: $(free_mib) MiB"
until "$B" bench produce --endpoints "$endpoints" --topic Fill --messages 64 --concurrency 4 > /dev/null 2>&1; do
  sleep 0.1
done
echo "sends accepted again $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $grown_at}") s after the filesystem grew"
"$B" bench produce --endpoints "$endpoints" --topic Fill --messages 20000 --concurrency "$CONCURRENCY"
"$B" cluster status
"$B" cluster verify
[ "$(cat "$ROCKRAFT_DATA"/node*/pid | tr '\n' ' ')" = "$pids" ] && echo "no node restarted (pids $pids)"
