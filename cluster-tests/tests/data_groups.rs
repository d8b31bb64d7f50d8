//! Data groups: Raft groups of their own beside the first, on every node. Adding them starts a
//! replica on each node, each node comes to lead its share, a killed node's groups elect
//! another leader while the others keep theirs, and once it is back the leaderships return.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rockraft as pb;

/// Each group's leader as node `id` sees them (groups it does not run are absent).
async fn leaders_seen_by(cluster: &Cluster, id: u64) -> BTreeMap<u32, Option<u64>> {
    match cluster.status(id).await {
        Some(s) => s.groups.iter().map(|g| (g.id, g.leader)).collect(),
        None => BTreeMap::new(),
    }
}

/// Waits until every running node in `ids` sees the groups led as `want`; the last view if not.
async fn wait_for_leaders(
    cluster: &Cluster,
    ids: &[u64],
    want: &BTreeMap<u32, Option<u64>>,
    timeout: Duration,
) -> Result<(), BTreeMap<u64, BTreeMap<u32, Option<u64>>>> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut seen = BTreeMap::new();
        for &id in ids {
            seen.insert(id, leaders_seen_by(cluster, id).await);
        }
        if seen.values().all(|s| s == want) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(seen);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn data_groups_run_on_every_node_and_their_leaders_are_spread_and_kept_spread() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    let configure = |n: u32| pb::ConfigureRequest { data_groups: Some(n), ..Default::default() };
    cluster.admin(configure(3)).await;

    // Every node runs every group, and leads one: group g is node g's turn.
    let spread: BTreeMap<u32, Option<u64>> = [(1, Some(1)), (2, Some(2)), (3, Some(3))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the groups' leaders were not spread over the nodes: {seen:?}");
    }
    let settings = cluster.admin(pb::GetSettingsRequest {}).await;
    assert_eq!(settings.data_groups, 3);

    // Fewer data groups than there are is refused, and changes nothing.
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let shrink = cluster.call(&cluster.admin_addr(leader), configure(2)).await;
    assert!(shrink.is_err(), "a data group was removed: {shrink:?}");
    assert_eq!(cluster.admin(pb::GetSettingsRequest {}).await.data_groups, 3);

    // Node 2 dies: its group elects another leader; the groups it did not lead keep theirs.
    cluster.kill(2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let seen = leaders_seen_by(&cluster, 1).await;
        let moved = seen.get(&2).copied().flatten().is_some_and(|l| l != 2);
        if moved || Instant::now() > deadline {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(after.get(&2).copied().flatten().is_some_and(|l| l != 2), "group 2 elected another leader: {after:?}");
    assert_eq!((after.get(&1), after.get(&3)), (Some(&Some(1)), Some(&Some(3))), "the others kept theirs");

    // Back, it reopens every group and takes its turn again.
    cluster.restart(2);
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the leaderships did not return to their nodes: {seen:?}");
    }
}

/// A node removed from the cluster leaves every data group too: the groups it led elect another
/// leader among the remaining voters, and the turns are taken among those.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_removed_from_the_cluster_leaves_every_data_group() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.admin(pb::ConfigureRequest { data_groups: Some(3), ..Default::default() }).await;
    let spread: BTreeMap<u32, Option<u64>> = [(1, Some(1)), (2, Some(2)), (3, Some(3))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the groups' leaders were not spread over the nodes: {seen:?}");
    }
    cluster.admin(pb::RemoveNodeRequest { id: 3 }).await;
    // Among voters 1 and 2, group 3 is node 1's turn: only so if node 3 left group 3.
    let two: BTreeMap<u32, Option<u64>> = [(1, Some(1)), (2, Some(2)), (3, Some(1))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2], &two, Duration::from_secs(60)).await {
        panic!("group 3 did not leave node 3: {seen:?}");
    }
}
