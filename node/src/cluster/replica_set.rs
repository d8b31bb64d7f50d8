//! Which nodes hold a data group's replicas. Below five voters every voter holds every group;
//! from five, each group has three replicas placed round robin, so a node's share of the groups
//! (and of their leaders) stays the same as the cluster grows, and each group's replicas are on
//! as many racks as the members' `rack` labels name.

use std::collections::BTreeMap;

use crate::raft::{GroupId, NodeId, NodeInfo};

/// From this many voters a data group has [`GROUP_SIZE`] replicas rather than one on every voter.
pub const SPREAD_FROM: usize = 5;
/// How many replicas a data group has in a cluster of [`SPREAD_FROM`] voters or more.
pub const GROUP_SIZE: usize = 3;

/// The voters that hold data group `id`'s replicas, the one whose turn it is to lead first: every
/// voter in a cluster of fewer than [`SPREAD_FROM`]; from that many, [`GROUP_SIZE`] of them, round
/// robin: the voters in a ring where neighbours are on different racks as far as the racks named
/// allow, and group `id` takes the `GROUP_SIZE` from position `id - 1` on. So each node holds as
/// many groups as the others and leads one in every `GROUP_SIZE` of them, and a group's replicas
/// span as many racks as they can.
pub fn replica_set(id: GroupId, voters: &BTreeMap<NodeId, NodeInfo>) -> Vec<NodeId> {
    if voters.is_empty() {
        return Vec::new();
    }
    // By rack (racks in name order, each rack's nodes by id), then dealt round the racks.
    let mut racks: BTreeMap<&str, Vec<NodeId>> = BTreeMap::new();
    for (id, info) in voters {
        racks.entry(info.rack.as_str()).or_default().push(*id);
    }
    let deepest = racks.values().map(Vec::len).max().unwrap_or(0);
    let ring: Vec<NodeId> = (0..deepest).flat_map(|i| racks.values().filter_map(move |r| r.get(i).copied())).collect();
    let size = if ring.len() < SPREAD_FROM { ring.len() } else { GROUP_SIZE };
    let start = id.0.saturating_sub(1) as usize;
    (0..size).map(|k| ring[(start + k) % ring.len()]).collect()
}

/// Whether [`replica_set`] places group `id` on `node`.
pub fn places(id: GroupId, voters: &BTreeMap<NodeId, NodeInfo>, node: NodeId) -> bool {
    voters.len() < SPREAD_FROM || replica_set(id, voters).contains(&node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voters(racks: &[(NodeId, &str)]) -> BTreeMap<NodeId, NodeInfo> {
        racks.iter().map(|(id, rack)| (*id, NodeInfo { rack: rack.to_string(), ..Default::default() })).collect()
    }

    #[test]
    fn below_five_voters_every_voter_holds_every_group_and_the_turns_go_round() {
        let three = voters(&[(1, ""), (2, ""), (3, "")]);
        assert_eq!(replica_set(GroupId(1), &three), [1, 2, 3]);
        assert_eq!(replica_set(GroupId(2), &three), [2, 3, 1]);
        assert_eq!(replica_set(GroupId(6), &three), [3, 1, 2]);
        // Six groups: each node's turn to lead twice.
        let leaders: Vec<NodeId> = (1..=6).map(|g| replica_set(GroupId(g), &three)[0]).collect();
        assert_eq!(leaders, [1, 2, 3, 1, 2, 3]);
        assert!(replica_set(GroupId(1), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn from_five_voters_each_group_has_three_and_each_node_holds_and_leads_its_share() {
        let five = voters(&[(1, ""), (2, ""), (3, ""), (4, ""), (5, "")]);
        let sets: Vec<Vec<NodeId>> = (1..=5).map(|g| replica_set(GroupId(g), &five)).collect();
        assert_eq!(sets, [vec![1, 2, 3], vec![2, 3, 4], vec![3, 4, 5], vec![4, 5, 1], vec![5, 1, 2]]);
        for node in 1..=5 {
            assert_eq!(sets.iter().filter(|s| s.contains(&node)).count(), 3, "node {node} holds three groups");
            assert_eq!(sets.iter().filter(|s| s[0] == node).count(), 1, "node {node} leads one");
        }
        // Nine voters, nine groups: three each.
        let nine = voters(&(1..=9).map(|id| (id, "")).collect::<Vec<_>>());
        for node in 1..=9 {
            let held = (1..=9).filter(|g| replica_set(GroupId(*g), &nine).contains(&node)).count();
            assert_eq!(held, 3);
        }
    }

    #[test]
    fn a_group_s_three_replicas_span_the_racks_named() {
        // Three racks of two: every group's three replicas on three racks.
        let six = voters(&[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]);
        for g in 1..=6 {
            let racks: std::collections::BTreeSet<String> =
                replica_set(GroupId(g), &six).iter().map(|id| six[id].rack.clone()).collect();
            assert_eq!(racks.len(), 3, "group {g}: {racks:?}");
        }
        // Two racks, uneven: no group's replicas all on one rack.
        let five = voters(&[(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "b")]);
        for g in 1..=5 {
            let set = replica_set(GroupId(g), &five);
            assert_eq!(set.len(), 3);
            assert!(set.iter().any(|id| five[id].rack == "b"), "group {g}: {set:?}");
        }
    }
}
