//! The protobuf forms (`raft.proto`) of Raft's values: log ids, votes, memberships and snapshot
//! metadata, which both the log's records (`entry_codec`) and the RPC messages (`wire`) carry.
//!
//! Both sides of each conversion are foreign types, so they go through this module's own traits:
//! [`ToPb`] encodes, [`FromPb`] decodes. A message that lacks a field it cannot do without, or
//! carries a value out of range, decodes to an `InvalidData` error, never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use openraft::impls::leader_id_adv::LeaderId;
use rockraft_proto::rockraft as pb;

use crate::raft::{LogId, Membership, NodeId, NodeInfo, SnapshotMeta, StoredMembership, Vote};

/// Encodes an openraft value as its protobuf message.
pub trait ToPb {
    type Pb;
    fn to_pb(&self) -> Self::Pb;
}

/// Decodes an openraft value from its protobuf message.
pub trait FromPb: Sized {
    type Pb;
    fn from_pb(pb: Self::Pb) -> io::Result<Self>;
}

pub fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A field the message cannot do without.
pub fn required<T: FromPb>(field: Option<T::Pb>, what: &str) -> io::Result<T> {
    T::from_pb(field.ok_or_else(|| invalid(format!("{what} is missing")))?)
}

pub fn optional<T: FromPb>(field: Option<T::Pb>) -> io::Result<Option<T>> {
    field.map(T::from_pb).transpose()
}

impl ToPb for LeaderId<u64, NodeId> {
    type Pb = pb::LeaderId;
    fn to_pb(&self) -> pb::LeaderId {
        pb::LeaderId { term: self.term, node_id: self.node_id }
    }
}

impl FromPb for LeaderId<u64, NodeId> {
    type Pb = pb::LeaderId;
    fn from_pb(pb: pb::LeaderId) -> io::Result<Self> {
        Ok(LeaderId { term: pb.term, node_id: pb.node_id })
    }
}

impl ToPb for Vote {
    type Pb = pb::Vote;
    fn to_pb(&self) -> pb::Vote {
        pb::Vote { leader_id: Some(self.leader_id.to_pb()), committed: self.committed }
    }
}

impl FromPb for Vote {
    type Pb = pb::Vote;
    fn from_pb(pb: pb::Vote) -> io::Result<Self> {
        Ok(Vote { leader_id: required(pb.leader_id, "vote's leader id")?, committed: pb.committed })
    }
}

impl ToPb for LogId {
    type Pb = pb::LogId;
    fn to_pb(&self) -> pb::LogId {
        pb::LogId { leader_id: Some(self.leader_id.to_pb()), index: self.index }
    }
}

impl FromPb for LogId {
    type Pb = pb::LogId;
    fn from_pb(pb: pb::LogId) -> io::Result<Self> {
        Ok(LogId::new(required(pb.leader_id, "log id's leader id")?, pb.index))
    }
}

impl ToPb for Membership {
    type Pb = pb::Membership;
    fn to_pb(&self) -> pb::Membership {
        pb::Membership {
            configs: self.get_joint_config().iter().map(|c| pb::Voters { ids: c.iter().copied().collect() }).collect(),
            nodes: self
                .nodes()
                .map(|(id, n)| pb::MemberNode {
                    id: *id,
                    raft_addr: n.raft_addr.clone(),
                    client_addr: n.client_addr.clone(),
                    admin_addr: n.admin_addr.clone(),
                    rack: n.rack.clone(),
                })
                .collect(),
        }
    }
}

impl FromPb for Membership {
    type Pb = pb::Membership;
    /// Refuses a membership whose voters are not all among its nodes, or that names a node twice.
    fn from_pb(pb: pb::Membership) -> io::Result<Self> {
        let configs: Vec<BTreeSet<NodeId>> = pb.configs.into_iter().map(|c| c.ids.into_iter().collect()).collect();
        let mut nodes = BTreeMap::new();
        for n in pb.nodes {
            let node =
                NodeInfo { raft_addr: n.raft_addr, client_addr: n.client_addr, admin_addr: n.admin_addr, rack: n.rack };
            if nodes.insert(n.id, node).is_some() {
                return Err(invalid(format!("membership names node {} twice", n.id)));
            }
        }
        Membership::new(configs, nodes).map_err(invalid)
    }
}

impl ToPb for StoredMembership {
    type Pb = pb::StoredMembership;
    fn to_pb(&self) -> pb::StoredMembership {
        pb::StoredMembership {
            log_id: self.log_id().as_ref().map(ToPb::to_pb),
            membership: Some(self.membership().to_pb()),
        }
    }
}

impl FromPb for StoredMembership {
    type Pb = pb::StoredMembership;
    fn from_pb(pb: pb::StoredMembership) -> io::Result<Self> {
        Ok(StoredMembership::new(optional(pb.log_id)?, required(pb.membership, "stored membership's membership")?))
    }
}

impl ToPb for SnapshotMeta {
    type Pb = pb::SnapshotMeta;
    fn to_pb(&self) -> pb::SnapshotMeta {
        pb::SnapshotMeta {
            last_log_id: self.last_log_id.as_ref().map(ToPb::to_pb),
            last_membership: Some(self.last_membership.to_pb()),
        }
    }
}

impl FromPb for SnapshotMeta {
    type Pb = pb::SnapshotMeta;
    fn from_pb(pb: pb::SnapshotMeta) -> io::Result<Self> {
        Ok(SnapshotMeta {
            last_log_id: optional(pb.last_log_id)?,
            last_membership: required(pb.last_membership, "snapshot's membership")?,
        })
    }
}
