#!/usr/bin/env bash
# A three-node RockRaft cluster on loopback.
#
#   scripts/cluster.sh start       build (once) and start nodes 1-3 (1-$ROCKRAFT_NODES), initialise,
#                                  wait for a leader
#   scripts/cluster.sh start --auth  the same with authentication on: an admin user is made and
#                                  its keys printed (kept in ./data/admin_credentials)
#   scripts/cluster.sh start --tls   the same with TLS: a CA and a certificate per node are made
#                                  (./data/tls, openssl); client and admin ports on TLS, the raft
#                                  ports on mutual TLS (members present certificates the CA
#                                  signed); the CLI needs --tls-ca ./data/tls/ca.pem. Combines
#                                  with --auth.
#   scripts/cluster.sh stop        SIGTERM every node (leadership is handed over first)
#   scripts/cluster.sh status      each member's role, term, indexes and lag
#   scripts/cluster.sh kill N      SIGKILL node N
#   scripts/cluster.sh restart N   start node N again on its old data
#
# Client (RocketMQ gRPC) endpoints: 127.0.0.1:8081-8083; operator (admin API, the CLI's
# --endpoint): 127.0.0.1:7081-7083; node-to-node: 127.0.0.1:9081-9083; status pages and
# /metrics: http://127.0.0.1:6081-6083; RocketMQ 4.x Remoting clients (namesrvAddr, name server and
# broker in one): 127.0.0.1:9876-9878.
# ROCKRAFT_NODES sets the cluster size (default 3; e.g. 5 for the five-node figures).
# ROCKRAFT_DATA_GROUPS sets how many data groups a new cluster runs (default 1; see
# docs/operations.md, "Data groups").
# Data, logs and pid files: ./data/node{1,2,3}, or under $ROCKRAFT_DATA; the cluster secret the
# nodes share (node-to-node calls carry it): ./data/cluster_secret.
# ROCKRAFT_SEGMENT_SIZE sets the segment file size in bytes (default 268435456); with segments
# under 8 MiB the largest message body is cut to a quarter of a segment, so that one always fits.
# ROCKRAFT_CLIENT_PORT_BASE / ROCKRAFT_RAFT_PORT_BASE / ROCKRAFT_ADMIN_PORT_BASE /
# ROCKRAFT_HTTP_PORT_BASE / ROCKRAFT_REMOTING_PORT_BASE move the ports (node N listens on BASE+N;
# defaults 8080, 9080, 7080, 6080 and 9875).
# ROCKRAFT_BIN runs that binary instead of building target/release/rockraft.
# ROCKRAFT_DURABILITY (sync|async) sets [storage] durability in newly written configs.
# ROCKRAFT_TLS_CERT / ROCKRAFT_TLS_KEY (PEM paths) put the client and admin ports of newly written
# configs on TLS; the CLI then needs --tls-ca (or ROCKRAFT_TLS_CA).
set -euo pipefail
# Every file this script and the nodes it starts write is private: configs hold the cluster and
# admin secrets, the data directories the replicated user secrets and handle keys.
umask 077

root="$(cd "$(dirname "$0")/.." && pwd)"
data="${ROCKRAFT_DATA:-$PWD/data}"
segment_size="${ROCKRAFT_SEGMENT_SIZE:-268435456}"
bin="${ROCKRAFT_BIN:-$root/target/release/rockraft}"
client_base="${ROCKRAFT_CLIENT_PORT_BASE:-8080}"
raft_base="${ROCKRAFT_RAFT_PORT_BASE:-9080}"
admin_base="${ROCKRAFT_ADMIN_PORT_BASE:-7080}"
remoting_base="${ROCKRAFT_REMOTING_PORT_BASE:-9875}"
http_base="${ROCKRAFT_HTTP_PORT_BASE:-6080}"
nodes="${ROCKRAFT_NODES:-3}"
client_addr() { echo "127.0.0.1:$((client_base + $1))"; }
raft_addr() { echo "127.0.0.1:$((raft_base + $1))"; }
admin_addr() { echo "127.0.0.1:$((admin_base + $1))"; }
http_addr() { echo "127.0.0.1:$((http_base + $1))"; }
remoting_addr() { echo "127.0.0.1:$((remoting_base + $1))"; }
credentials_file="$data/admin_credentials"
tls_dir="$data/tls"

build() {
  # A given binary is used as it is.
  [ -n "${ROCKRAFT_BIN:-}" ] && return
  # A no-op within a second when the binary is up to date.
  (umask 022 && cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
}

node_dir() { echo "$data/node$1"; }

running() {
  local pidfile
  pidfile="$(node_dir "$1")/pid"
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# The secret the members share (calls to a raft port must carry it): made once per data
# directory, readable by its owner only.
cluster_secret() {
  local file="$data/cluster_secret"
  if [ ! -s "$file" ]; then
    mkdir -p "$data"
    (umask 077 && od -An -tx1 -N24 /dev/urandom | tr -d ' \n' > "$file")
  fi
  cat "$file"
}

# `--auth`: the admin credential every node's config carries (`[auth] admin_*`), made once per
# data directory, readable by its owner only: "<access key> <secret>".
make_admin_credentials() {
  if [ ! -s "$credentials_file" ]; then
    mkdir -p "$data"
    (umask 077 && echo "admin $(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" > "$credentials_file")
  fi
}

# `--tls`: a CA and a certificate for each node (127.0.0.1 and localhost, and the URI SAN that
# names it as member n) it signed, made once per data directory; keys readable by their owner only.
make_certificates() {
  command -v openssl > /dev/null || { echo "--tls needs openssl" >&2; exit 1; }
  mkdir -p "$data"
  (
    umask 077
    mkdir -p "$tls_dir"
    chmod 700 "$tls_dir"
    if [ ! -s "$tls_dir/ca.pem" ]; then
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tls_dir/ca.key" \
        -out "$tls_dir/ca.pem" -days 825 -subj "/CN=RockRaft quick-start CA" 2> /dev/null
    fi
    for n in $(seq "$nodes"); do
      # Made again where an older script made one that names no member.
      if openssl x509 -in "$tls_dir/node$n.pem" -noout -ext subjectAltName 2> /dev/null | grep -q "rockraft://"; then
        continue
      fi
      # The URI names the member: the other nodes take this certificate as node $n's only.
      printf "subjectAltName=IP:127.0.0.1,DNS:localhost,URI:rockraft://rockraft/node/%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n" \
        "$n" > "$tls_dir/node$n.ext"
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tls_dir/node$n.key" \
        -out "$tls_dir/node$n.csr" -subj "/CN=rockraft node $n" 2> /dev/null
      openssl x509 -req -in "$tls_dir/node$n.csr" -CA "$tls_dir/ca.pem" -CAkey "$tls_dir/ca.key" \
        -CAcreateserial -out "$tls_dir/node$n.pem" -days 825 -extfile "$tls_dir/node$n.ext" 2> /dev/null
      rm -f "$tls_dir/node$n.csr"
    done
  )
}

# The CLI trusts the quick start's CA when the cluster has one.
if [ -s "$tls_dir/ca.pem" ] && [ -z "${ROCKRAFT_TLS_CA:-}" ]; then
  export ROCKRAFT_TLS_CA="$tls_dir/ca.pem"
fi

# The CLI signs with the admin credential when the cluster has one.
use_admin_credentials() {
  if [ -s "$credentials_file" ]; then
    read -r ROCKRAFT_ACCESS_KEY ROCKRAFT_SECRET_KEY < "$credentials_file"
    export ROCKRAFT_ACCESS_KEY ROCKRAFT_SECRET_KEY
  fi
}

write_config() {
  local n=$1 dir
  dir="$(node_dir "$n")"
  mkdir -p "$dir"
  if [ -f "$dir/config.toml" ]; then
    # Data directories written before the script made its files private.
    chmod 700 "$data" "$dir" && chmod 600 "$dir/config.toml"
    # Configs written before nodes had an HTTP listener: each node gets its own port.
    grep -q '^http_addr' "$dir/config.toml" || sed -i "1a http_addr = \"$(http_addr "$n")\"" "$dir/config.toml"
    grep -q '^remoting_addr' "$dir/config.toml" || sed -i "1a remoting_addr = \"$(remoting_addr "$n")\"" "$dir/config.toml"
    return
  fi
  {
    echo "node_id = $n"
    echo "raft_addr = \"$(raft_addr "$n")\""
    echo "client_addr = \"$(client_addr "$n")\""
    echo "admin_addr = \"$(admin_addr "$n")\""
    echo "http_addr = \"$(http_addr "$n")\""
    echo "remoting_addr = \"$(remoting_addr "$n")\""
    echo "data_dir = \"$dir\""
    echo "cluster_secret = \"$(cluster_secret)\""
    if [ -s "$credentials_file" ]; then
      local key secret
      read -r key secret < "$credentials_file"
      echo
      echo "[auth]"
      echo "enabled = true"
      echo "admin_access_key = \"$key\""
      echo "admin_secret_key = \"$secret\""
    fi
    if [ -s "$tls_dir/ca.pem" ]; then
      # The node's own certificate serves the client and admin ports and is what it presents to
      # the other members; with peer_ca_file the raft port takes only certificates this CA signed.
      echo
      echo "[tls]"
      echo "cert_file = \"$tls_dir/node$n.pem\""
      echo "key_file = \"$tls_dir/node$n.key\""
      echo "peer_ca_file = \"$tls_dir/ca.pem\""
    elif [ -n "${ROCKRAFT_TLS_CERT:-}" ]; then
      echo
      echo "[tls]"
      echo "cert_file = \"$ROCKRAFT_TLS_CERT\""
      echo "key_file = \"$ROCKRAFT_TLS_KEY\""
    fi
    echo
    echo "[storage]"
    echo "segment_size = $segment_size"
    if [ -n "${ROCKRAFT_DURABILITY:-}" ]; then echo "durability = \"$ROCKRAFT_DURABILITY\""; fi
    if [ "$segment_size" -lt $((8 << 20)) ]; then
      echo
      echo "[broker]"
      echo "max_body_bytes = $((segment_size / 4))"
    fi
    for m in $(seq "$nodes"); do
      echo
      echo "[[members]]"
      echo "id = $m"
      echo "raft_addr = \"$(raft_addr "$m")\""
      echo "client_addr = \"$(client_addr "$m")\""
      echo "admin_addr = \"$(admin_addr "$m")\""
    done
  } > "$dir/config.toml"
}

start_node() {
  local n=$1 dir
  dir="$(node_dir "$n")"
  if running "$n"; then return; fi
  write_config "$n"
  nohup "$bin" node --config "$dir/config.toml" >> "$dir/node.log" 2>&1 &
  echo $! > "$dir/pid"
}

wait_for() {
  # wait_for SECONDS COMMAND...: retry until the command succeeds.
  local deadline=$((SECONDS + $1)); shift
  until "$@" > /dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then return 1; fi
    sleep 0.2
  done
}

has_leader() { "$bin" --endpoint "$1" cluster status 2>/dev/null | grep -q ' Leader '; }

any_endpoint() {
  for n in $(seq "$nodes"); do
    if running "$n"; then admin_addr "$n"; return; fi
  done
  admin_addr 1
}

for flag in "${@:2}"; do
  case "$flag" in
    --auth)
      [ "${1:-}" = start ] || { echo "--auth goes with start" >&2; exit 2; }
      if [ -f "$(node_dir 1)/config.toml" ] && [ ! -s "$credentials_file" ]; then
        echo "$data holds a cluster made without --auth; remove it (or add [auth] to each config by hand)" >&2
        exit 1
      fi
      make_admin_credentials
      ;;
    --tls)
      [ "${1:-}" = start ] || { echo "--tls goes with start" >&2; exit 2; }
      if [ -f "$(node_dir 1)/config.toml" ] && [ ! -s "$tls_dir/ca.pem" ]; then
        echo "$data holds a cluster made without --tls; remove it (or add [tls] to each config by hand)" >&2
        exit 1
      fi
      make_certificates
      export ROCKRAFT_TLS_CA="$tls_dir/ca.pem"
      ;;
  esac
done
use_admin_credentials

case "${1:-}" in
  start)
    build
    for n in $(seq "$nodes"); do start_node "$n"; done
    init=(cluster init)
    if [ -n "${ROCKRAFT_DATA_GROUPS:-}" ]; then init+=(--data-groups "$ROCKRAFT_DATA_GROUPS"); fi
    wait_for 30 "$bin" --endpoint "$(admin_addr 1)" "${init[@]}" || { echo "node 1 did not answer; see $(node_dir 1)/node.log" >&2; exit 1; }
    # Every node must know the leader (and so hold the membership) before clients arrive.
    for n in $(seq "$nodes"); do
      wait_for 30 has_leader "$(admin_addr "$n")" || { echo "node $n does not know a leader" >&2; exit 1; }
    done
    for n in $(seq "$nodes"); do
      # A node that could not start (say, its port was taken) has exited by now.
      running "$n" || { echo "node $n exited; see $(node_dir "$n")/node.log" >&2; tail -3 "$(node_dir "$n")/node.log" >&2; exit 1; }
    done
    endpoints="$(for n in $(seq "$nodes"); do client_addr "$n"; done | paste -sd, | sed 's/,/, /g')"
    echo "RockRaft is running. Client endpoints: $endpoints"
    echo "Admin endpoints (rockraft --endpoint): $(for n in $(seq "$nodes"); do admin_addr "$n"; done | paste -sd, | sed 's/,/, /g')"
    echo "RocketMQ 4.x clients (namesrvAddr): $(for n in $(seq "$nodes"); do remoting_addr "$n"; done | paste -sd';')"
    echo "Status pages (metrics at /metrics): $(for n in $(seq "$nodes"); do echo "http://$(http_addr "$n")/"; done | paste -sd, | sed 's/,/, /g')"
    if [ -s "$credentials_file" ]; then
      echo "Authentication is on. Admin access key: $ROCKRAFT_ACCESS_KEY  secret key: $ROCKRAFT_SECRET_KEY"
      echo "  (also in $credentials_file; the CLI reads ROCKRAFT_ACCESS_KEY / ROCKRAFT_SECRET_KEY)"
    fi
    if [ -s "$tls_dir/ca.pem" ]; then
      echo "TLS is on (client and admin ports; members over mutual TLS on the raft ports). CA: $tls_dir/ca.pem"
      echo "  (the CLI: --tls-ca $tls_dir/ca.pem or ROCKRAFT_TLS_CA; Python and Node: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)"
    fi
    echo "Data and logs: $data"
    ;;
  stop)
    for n in $(seq "$nodes"); do
      if running "$n"; then kill -TERM "$(cat "$(node_dir "$n")/pid")"; fi
    done
    for n in $(seq "$nodes"); do
      pidfile="$(node_dir "$n")/pid"
      for _ in $(seq 50); do running "$n" || break; sleep 0.2; done
      if running "$n"; then kill -KILL "$(cat "$pidfile")"; fi
      rm -f "$pidfile"
    done
    ;;
  status)
    "$bin" --endpoint "$(any_endpoint)" cluster status
    ;;
  kill)
    n="${2:?usage: cluster.sh kill N}"
    if running "$n"; then
      pid="$(cat "$(node_dir "$n")/pid")"
      kill -KILL "$pid"
      # Gone only once the kernel has torn it down (its file locks with it): a restart right
      # after must not find the data directory still locked.
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$(node_dir "$n")/pid"
    ;;
  restart)
    n="${2:?usage: cluster.sh restart N}"
    build
    start_node "$n"
    wait_for 30 "$bin" --endpoint "$(admin_addr "$n")" cluster status || { echo "node $n did not come back; see $(node_dir "$n")/node.log" >&2; exit 1; }
    echo "node $n is running"
    ;;
  *)
    echo "usage: $0 start [--auth] [--tls]|stop|status|kill N|restart N" >&2
    exit 2
    ;;
esac
