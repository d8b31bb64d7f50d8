//! A member that refuses the leader (here: a node with another cluster secret on a follower's
//! ports) is retried with back-off and logged once, not called and logged thousands of times a
//! second; `/metrics` shows it refusing; once the real member is back, replication resumes.

use std::process::Child;
use std::time::Duration;

use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options, http_get, retry, spawn_node};

/// A process on a member's ports with another cluster secret, stopped when dropped.
struct Impostor(Child);

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn impostor(cluster: &Cluster, id: u64, dir: &std::path::Path) -> Impostor {
    let node = cluster.nodes.iter().find(|n| n.id == id).expect("node");
    let config = format!(
        "node_id = {id}\nraft_addr = \"{}\"\nclient_addr = \"{}\"\nadmin_addr = \"{}\"\nhttp_addr = \"{}\"\n\
         data_dir = \"{}\"\ncluster_secret = \"another-cluster-s-secret-0123456789\"\n\n[storage]\nsegment_size = 1048576\n\n\
         [broker]\nmax_body_bytes = 262144\n",
        node.raft_addr,
        node.client_addr,
        node.admin_addr,
        node.http_addr,
        dir.display()
    );
    Impostor(spawn_node(dir, &config))
}

async fn metric(http_addr: &str, name: &str) -> Option<f64> {
    let (_, body) = http_get(http_addr, "/metrics").await?;
    body.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Lines of the log at `path` from byte `from` on that speak of refusals.
fn refusal_lines(path: &std::path::Path, from: usize) -> Vec<String> {
    let log = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&log[from.min(log.len())..])
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("refus") || l.contains("unauthenticated") || l.contains("not a member")
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_that_refuses_the_leader_is_retried_with_back_off_and_logged_once() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Orders", 1, TopicKind::Normal).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let leader_log = cluster.nodes.iter().find(|n| n.id == leader).expect("leader").dir.join("node.log");
    let leader_http = cluster.http_addr(leader);
    let gauge = format!("rockraft_member_refusing{{member=\"{follower}\"}}");

    cluster.stop(follower);
    let dir = tempfile::tempdir().expect("dir");
    let from = std::fs::metadata(&leader_log).map(|m| m.len() as usize).unwrap_or(0);
    let intruder = impostor(&cluster, follower, dir.path());
    // Writes go on meanwhile (two voters of three), so the leader keeps replicating to it.
    let window = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    while tokio::time::Instant::now() < window {
        cluster.create_topic(&format!("During{round}"), 1, TopicKind::Normal).await;
        round += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let lines = refusal_lines(&leader_log, from);
    assert!(!lines.is_empty(), "the leader's log does not say the member refuses it");
    assert!(lines.len() <= 5, "{} lines about refusals in 20 s:\n{}", lines.len(), lines.join("\n"));
    assert_eq!(metric(&leader_http, &gauge).await, Some(1.0), "the leader shows node {follower} refusing");
    let status = cluster.status(leader).await.expect("the leader's status");
    assert!(
        status.refused_by.contains_key(&follower),
        "cluster status names the refusing member: {:?}",
        status.refused_by
    );
    let page = http_get(&leader_http, "/").await.map(|(_, body)| body).unwrap_or_default();
    assert!(page.contains("refusing us: Unauthenticated"), "the status page marks the member refusing");
    eprintln!("the leader's log over 20 s, lines about refusals:\n{}", lines.join("\n"));
    let refusals = metric(&leader_http, &format!("rockraft_member_refusals_total{{member=\"{follower}\"}}")).await;
    // Back-off: over 20 s, a try every 5 s at most once the pause has grown (each of a few
    // callers: replication, heartbeats, clocks, free space), not thousands.
    assert!(refusals.is_some_and(|n| (1.0..=200.0).contains(&n)), "refusals counted: {refusals:?}");

    // The real member is back: replication resumes and the replicas agree.
    drop(intruder);
    cluster.restart(follower);
    retry(Duration::from_secs(30), || async {
        match metric(&leader_http, &gauge).await {
            Some(0.0) => Ok(()),
            other => Err(format!("node {follower} refusing: {other:?}")),
        }
    })
    .await;
    cluster.create_topic("After", 1, TopicKind::Normal).await;
    cluster.wait_caught_up(follower, Duration::from_secs(30)).await;
    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
    let lines = refusal_lines(&leader_log, from);
    assert!(lines.iter().any(|l| l.contains("accepts this node again")), "{}", lines.join("\n"));
}
