//! Members over mutual TLS on the raft port (`[tls] peer_ca_file`), beside the cluster secret: the
//! cluster elects, replicates and forwards over it; a caller without a member certificate from
//! the cluster's CA, or without the secret, is refused and changes nothing; and a node added
//! under an address or an id its certificate does not name never receives the log, while one
//! whose certificate names both catches up.

use rockraft_proto::rockraft as pb;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use bytes::Bytes;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options, TestCa, free_port, http_get, retry, spawn_node};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::{Code, Message, MessageType, Resource, SendMessageRequest, SystemProperties};
use rockraft_proto::rockraft::peer_service_client::PeerServiceClient;
use rockraft_proto::rockraft::{ReadIndexRequest, WriteRequest};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

fn mtls() -> Options {
    Options { member_tls: true, ..Default::default() }
}

/// Sends one message to `topic` through the client port at `addr` (TLS, verified against `ca`).
async fn send(addr: &str, ca: &Path, topic: &str, id: &str) -> i32 {
    let channel = rockraft::auth::tls::channel(addr, Some(ca)).expect("channel");
    let message = Message {
        topic: Some(Resource { resource_namespace: String::new(), name: topic.into() }),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: id.into(),
            message_type: MessageType::Normal as i32,
            ..Default::default()
        }),
        body: Bytes::from_static(b"over mutual TLS"),
    };
    let reply = MessagingServiceClient::new(channel)
        .send_message(SendMessageRequest { messages: vec![message] })
        .await
        .expect("send answered");
    reply.into_inner().status.map_or(-1, |s| s.code)
}

/// A channel to a raft port as an outsider dials it: plain HTTP/2, or TLS trusting the cluster's
/// CA with `identity` (a client certificate) or none.
fn outsider(addr: &str, tls: Option<(&Path, Option<Identity>)>) -> tonic::transport::Channel {
    let endpoint = match tls {
        None => Endpoint::from_shared(format!("http://{addr}")).expect("url"),
        Some((ca, identity)) => {
            let mut config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("CA")))
                .domain_name("127.0.0.1");
            if let Some(identity) = identity {
                config = config.identity(identity);
            }
            Endpoint::from_shared(format!("https://{addr}")).expect("url").tls_config(config).expect("tls")
        }
    };
    endpoint.connect_timeout(Duration::from_secs(2)).connect_lazy()
}

#[tokio::test(flavor = "multi_thread")]
async fn members_over_mutual_tls_refuse_callers_without_a_member_certificate_or_without_the_secret() {
    let cluster = Cluster::start(3, mtls()).await;
    let ca = cluster.tls_ca.clone().expect("a CA");
    cluster.create_topic("Orders", 1, TopicKind::Normal).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    // Through a follower: the send is forwarded to the leader over the raft port.
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    assert_eq!(send(&cluster.client_addr(follower), &ca, "Orders", "m-1").await, Code::Ok as i32);
    for id in cluster.queue_holders("Orders", 0).await {
        cluster.wait_caught_up(id, Duration::from_secs(20)).await;
        assert_eq!(cluster.local_messages(id, "Orders", 0).await.len(), 1, "node {id} holds the send");
    }

    // Outsiders: no TLS, TLS without a certificate, a certificate another CA signed (for the
    // right address and a member's id), one the cluster's CA signed for another service (it
    // names no member), and a member's own certificate without the cluster secret. Each is
    // refused before anything is decoded, a forged write included.
    let other_dir = tempfile::tempdir().expect("dir");
    let other_ca = TestCa::new(other_dir.path());
    let (cert, key) = other_ca.issue_member(other_dir.path(), "intruder", 2, &["127.0.0.1", "localhost"]);
    let cluster_ca = cluster.ca.as_ref().expect("the CA");
    let (service_cert, service_key) = cluster_ca.issue(other_dir.path(), "outsider", &["not-a-member", "127.0.0.1"]);
    let (member_cert, member_key) = cluster.member_identity(2);
    let stored = rockraft_proto::rockraft::StoredMessage { message_id: "forged".into(), ..Default::default() };
    let batch = rockraft_proto::rockraft::SendBatch {
        topic: "Orders".into(),
        messages: vec![prost::Message::encode_to_vec(&stored).into()],
        ..Default::default()
    };
    let command = rockraft::broker::Command::Send(batch).encode();
    for node in &cluster.nodes {
        let foreign = Identity::from_pem(std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap());
        let callers = [
            ("plain HTTP/2", outsider(&node.raft_addr, None)),
            ("TLS without a certificate", outsider(&node.raft_addr, Some((&ca, None)))),
            ("a certificate from another CA", outsider(&node.raft_addr, Some((&ca, Some(foreign))))),
        ];
        for (who, channel) in callers {
            let mut peer = PeerServiceClient::new(channel);
            let write = peer.write(WriteRequest { command: command.clone() }).await;
            assert!(write.is_err(), "node {}: {who} wrote through the raft port: {write:?}", node.id);
            let read = peer.read_index(ReadIndexRequest {}).await;
            assert!(read.is_err(), "node {}: {who} read the raft port: {read:?}", node.id);
        }
        let secret = Some(cluster.secret.as_str());
        let with_secret = [
            ("a CA-signed certificate naming no member", Some((service_cert.as_path(), service_key.as_path())), secret),
            ("a member's certificate without the secret", Some((member_cert.as_path(), member_key.as_path())), None),
        ];
        for (who, identity, secret) in with_secret {
            let mut peer = PeerServiceClient::new(cluster.raft_channel_as(node.id, identity, secret, 1));
            let write = peer.write(WriteRequest { command: command.clone() }).await;
            assert!(write.is_err(), "node {}: {who} wrote through the raft port: {write:?}", node.id);
            let read = peer.read_index(ReadIndexRequest {}).await;
            assert!(read.is_err(), "node {}: {who} read the raft port: {read:?}", node.id);
        }
    }
    assert_eq!(cluster.wait_for_leader(Duration::from_secs(10)).await, leader, "no leader was moved");
    for id in cluster.queue_holders("Orders", 0).await {
        cluster.wait_caught_up(id, Duration::from_secs(10)).await;
        let messages = cluster.local_messages(id, "Orders", 0).await;
        assert_eq!(messages.len(), 1, "node {id} stored a forged message: {messages:?}");
    }
}

/// A node process outside the harness (a learner to be added), stopped when dropped.
struct Extra {
    child: Child,
    raft_addr: String,
    http_addr: String,
}

impl Drop for Extra {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts node `id`, not initialised, in `dir/name`, with `cert`/`key`, the cluster's CA and its
/// secret.
fn start_extra(dir: &Path, name: &str, id: u64, (cert, key): (PathBuf, PathBuf), ca: &Path, secret: &str) -> Extra {
    let node_dir = dir.join(name);
    std::fs::create_dir_all(&node_dir).expect("dir");
    let addr = || format!("127.0.0.1:{}", free_port());
    let (raft_addr, client_addr, admin_addr, http_addr) = (addr(), addr(), addr(), addr());
    let config = format!(
        "node_id = {id}\nraft_addr = \"{raft_addr}\"\nclient_addr = \"{client_addr}\"\nadmin_addr = \"{admin_addr}\"\n\
         http_addr = \"{http_addr}\"\ndata_dir = \"{}\"\ncluster_secret = \"{secret}\"\n\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\
         peer_ca_file = \"{}\"\n\n[storage]\nsegment_size = 1048576\n\n[broker]\nmax_body_bytes = 262144\n",
        node_dir.display(),
        cert.display(),
        key.display(),
        ca.display()
    );
    Extra { child: spawn_node(&node_dir, &config), raft_addr, http_addr }
}

/// A gauge from the node's `/metrics` (the first sample whose line starts with `name`).
async fn metric(http_addr: &str, name: &str) -> Option<f64> {
    let (_, body) = http_get(http_addr, "/metrics").await?;
    body.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_added_under_an_address_or_id_its_certificate_does_not_name_is_refused_before_it_gets_anything() {
    let cluster = Cluster::start(3, mtls()).await;
    let ca_path = cluster.tls_ca.clone().expect("a CA");
    let ca = cluster.ca.as_ref().expect("the CA");
    cluster.create_topic("Orders", 1, TopicKind::Normal).await;
    // Nodes join through the metadata group: its leader adds them, its members are the cluster's.
    let leader = cluster.wait_for_leader_of(None, Duration::from_secs(10)).await;
    assert_eq!(send(&cluster.client_addr(leader), &ca_path, "Orders", "m-1").await, Code::Ok as i32);
    let dir = tempfile::tempdir().expect("dir");
    // New ids, after the cluster's own (three, or five with `ROCKRAFT_TEST_NODES=5`).
    let n = cluster.nodes.len() as u64;
    let (misnamed_id, named_id, other_id) = (n + 1, n + 2, n + 3);
    let secret = cluster.secret.as_str();
    // Signed by the cluster's CA, but for another name than the address it is added under.
    let misnamed_cert = ca.issue_member(dir.path(), "misnamed", misnamed_id, &["localhost"]);
    let misnamed = start_extra(dir.path(), "misnamed", misnamed_id, misnamed_cert, &ca_path, secret);
    let named_cert = ca.issue_member(dir.path(), "named", named_id, &["127.0.0.1"]);
    let named = start_extra(dir.path(), "named", named_id, named_cert, &ca_path, secret);
    // For the right address, but a node that is another member than the one it is added as.
    let other_cert = ca.issue_member(dir.path(), "other", misnamed_id, &["127.0.0.1"]);
    let other = start_extra(dir.path(), "other", misnamed_id, other_cert, &ca_path, secret);
    let add = |id: u64, raft_addr: String| pb::AddNodeRequest {
        id,
        raft_addr,
        client_addr: format!("127.0.0.1:{}", free_port()),
        ..Default::default()
    };
    let leader_admin = cluster.admin_addr(leader);
    // The leader looks at its certificate before it sends the node anything: adding it fails,
    // saying why, and changes nothing.
    let added = cluster.call(&leader_admin, add(misnamed_id, misnamed.raft_addr.clone())).await;
    match &added {
        Err(e) => assert!(
            e.to_string().contains("by its certificate") && e.to_string().contains("nothing was changed"),
            "{e}"
        ),
        other => panic!("a node whose certificate does not name its address was added: {other:?}"),
    }
    // Nor one whose certificate names another member than the one added.
    let added = cluster.call(&leader_admin, add(other_id, other.raft_addr.clone())).await;
    match &added {
        Err(e) => assert!(e.to_string().contains(&format!("not of member {other_id}")), "{e}"),
        other => panic!("a node whose certificate names another member was added: {other:?}"),
    }
    // Nor a new id at a member's address.
    let taken = add(other_id, cluster.nodes[0].raft_addr.clone());
    let refused = cluster.call(&leader_admin, taken).await.expect_err("a member's address under a new id");
    assert!(refused.to_string().contains("is the raft address of member"), "{refused}");
    // The named one catches up and becomes a voter.
    let named_add = add(named_id, named.raft_addr.clone());
    let added = cluster.call(&leader_admin, named_add.clone()).await;
    if added.is_err() {
        for n in &cluster.nodes {
            let log = std::fs::read_to_string(n.dir.join("node.log")).unwrap_or_default();
            eprintln!(
                "=== node {}\n{}",
                n.id,
                log.lines().rev().take(25).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        panic!("{added:?}");
    }
    // Asked again, the same request is answered as done; the same id at another address, or a
    // member's id, is refused (it would re-point a member).
    let again = cluster.call(&leader_admin, named_add.clone()).await.expect("the same add-node again");
    assert!(again.message.contains("member already"), "{}", again.message);
    let elsewhere = pb::AddNodeRequest { raft_addr: misnamed.raft_addr.clone(), ..named_add.clone() };
    let refused = cluster.call(&leader_admin, elsewhere).await.expect_err("a member's id at another address");
    assert_eq!(refused.code(), Some(tonic::Code::FailedPrecondition), "{refused}");
    let first = pb::AddNodeRequest { id: 1, ..named_add };
    let refused = cluster.call(&leader_admin, first).await.expect_err("node 1's id for the new node's address");
    assert!(refused.to_string().contains("member already"), "{refused}");
    let committed = cluster.status_of(leader, None).await.and_then(|s| s.committed).expect("committed");
    retry(Duration::from_secs(30), || async {
        match metric(&named.http_addr, "rockraft_raft_applied_index").await {
            Some(applied) if applied >= committed as f64 => Ok(()),
            other => Err(format!("node {named_id} applied {other:?} of {committed}")),
        }
    })
    .await;
    // The misnamed one never got an entry, and is no member at all, nor is the other.
    let last = metric(&misnamed.http_addr, "rockraft_raft_last_log_index").await;
    if last.is_none() {
        let log = std::fs::read_to_string(dir.path().join("misnamed/node.log")).unwrap_or_default();
        panic!("node {misnamed_id} gave no metrics; its log:\n{log}");
    }
    assert_eq!(last, Some(0.0));
    assert_eq!(metric(&misnamed.http_addr, "rockraft_raft_applied_index").await, Some(0.0));
    let leader_http = cluster.http_addr(leader);
    let refusing = async |id: u64| metric(&leader_http, &format!("rockraft_member_refusing{{member=\"{id}\"}}")).await;
    assert_eq!(refusing(named_id).await, Some(0.0));
    let status = cluster.status_of(leader, None).await.expect("status");
    let members: Vec<u64> = status.members.iter().map(|m| m.id).collect();
    assert!(!members.contains(&misnamed_id) && !members.contains(&other_id), "{members:?}");
    let voters: Vec<u64> = status.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
    let mut expected = cluster.ids();
    expected.push(named_id);
    assert_eq!(voters, expected, "node {misnamed_id} is no voter");
}

/// Rewrites node `id`'s configuration to carry `current` as its cluster secret and `next` as the
/// second one it accepts, and tells it to read it again (SIGHUP).
fn reconfigure_secret(cluster: &Cluster, id: u64, current: &str, next: Option<&str>) {
    let node = &cluster.nodes[id as usize - 1];
    let path = node.dir.join("config.toml");
    let config = std::fs::read_to_string(&path).expect("config");
    let mut lines: Vec<String> =
        config.lines().filter(|l| !l.starts_with("cluster_secret")).map(str::to_string).collect();
    // Top-level keys go before the first table.
    let at = lines.iter().position(|l| l.starts_with('[')).unwrap_or(lines.len());
    lines.insert(at, format!("cluster_secret = \"{current}\""));
    if let Some(next) = next {
        lines.insert(at + 1, format!("cluster_secret_next = \"{next}\""));
    }
    std::fs::write(&path, lines.join("\n") + "\n").expect("config written");
    let pid = cluster.pid(id).expect("running");
    let hup = std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().expect("kill");
    assert!(hup.success(), "SIGHUP to node {id}");
}

/// Whether node `id`'s raft port takes `secret` from a member (node `member`'s certificate).
async fn takes_secret(cluster: &Cluster, id: u64, member: u64, secret: &str) -> bool {
    let (cert, key) = cluster.member_identity(member);
    let channel = cluster.raft_channel_as(id, Some((&cert, &key)), Some(secret), 0);
    let mut admin = pb::admin_service_client::AdminServiceClient::new(channel);
    admin.get_status(pb::GetStatusRequest::default()).await.is_ok()
}

/// The cluster secret rotated on a running cluster, as `docs/security.md` says: every node takes
/// the new secret as its next one (SIGHUP), then as its own with the old as next, then alone.
/// Sends through every node (followers forward over the raft port) go on at each step, and at
/// the end the old secret opens nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_secret_rotates_without_a_stop() {
    let cluster = Cluster::start(3, mtls()).await;
    let ca = cluster.tls_ca.clone().expect("a CA");
    cluster.create_topic("Orders", 1, TopicKind::Normal).await;
    let old = cluster.secret.clone();
    let new = "9c1e5b7a3f0d4e2c8b6a1f3e5d7c9b0a2e4f6a8c".to_string();
    let ids = cluster.ids();
    let steps: [(&str, Option<&str>, &str); 3] = [
        (&old, Some(&new), "the new secret, accepted beside the old"),
        (&new, Some(&old), "the new secret attached, the old still accepted"),
        (&new, None, "the new secret alone"),
    ];
    for (step, (current, next, what)) in steps.into_iter().enumerate() {
        for id in &ids {
            reconfigure_secret(&cluster, *id, current, next);
        }
        // Each node takes what it now accepts (read again within moments of the signal).
        let member = ids[1];
        for id in &ids {
            for secret in [Some(current), next].into_iter().flatten() {
                retry(Duration::from_secs(10), || async {
                    match takes_secret(&cluster, *id, member, secret).await {
                        true => Ok(()),
                        false => Err(format!("{what}: node {id} does not take a secret it should")),
                    }
                })
                .await;
            }
        }
        for id in &ids {
            let code = send(&cluster.client_addr(*id), &ca, "Orders", &format!("m-{step}-{id}")).await;
            assert_eq!(code, Code::Ok as i32, "{what}: a send through node {id}");
        }
    }
    for id in &ids {
        assert!(!takes_secret(&cluster, *id, ids[1], &old).await, "node {id} still takes the old secret");
    }
    for id in cluster.queue_holders("Orders", 0).await {
        cluster.wait_caught_up(id, Duration::from_secs(20)).await;
        assert_eq!(cluster.local_messages(id, "Orders", 0).await.len(), 9, "node {id} holds every send");
    }
}
