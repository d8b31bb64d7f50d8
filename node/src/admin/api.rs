//! What the admin operations answer, in the node's own types (the status page reads them
//! in-process), and their forms in `rockraft.v1.AdminService`'s messages where the CLI and the
//! status page read them back: the operator's API only; what members ask of the leader is
//! `cluster`'s `PeerService`.

use rockraft_proto::rockraft as pb;

use crate::broker::access::{Action, Decision};
use crate::broker::group::GroupConfig;
use crate::broker::held::HeldCounts;
use crate::broker::{GroupProgress, TopicConfig};
use crate::cluster::disk::{DiskReading, DiskReport};
use crate::plugin::PluginKind;
use crate::raft::NodeId;
use crate::store::free_space::{DiskLevel, Watermarks};

pub use crate::broker::lite::LiteTopicInfo;

/// Most records one `QueueChecksums` request reads (each a record and its message), and most
/// checksums it returns: `cluster verify` splits its questions to fit.
pub const MAX_CHECKSUMMED_RECORDS: u64 = 4_000_000;
pub const MAX_CHECKSUMS: u64 = 4_096;

#[derive(Debug, Clone)]
pub struct UserInfo {
    pub access_key: String,
    pub admin: bool,
    pub rules: usize,
}

#[derive(Debug, Clone)]
pub struct AclLine {
    pub access_key: String,
    pub resource: String,
    pub actions: Vec<Action>,
    pub decision: Decision,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindTarget {
    Group(String),
    Topic(String),
}

/// A plugin as `plugin list` shows it: built in or registered, what uses it, and this node's
/// counts of its calls.
#[derive(Debug, Clone)]
pub struct PluginInfo {
    pub name: String,
    pub kind: PluginKind,
    pub version: String,
    pub builtin: bool,
    pub size: usize,
    pub hash: String,
    pub registered_ms: i64,
    /// `group G` / `topic T`.
    pub bound_to: Vec<String>,
    pub calls: u64,
    pub messages: u64,
    pub failures: u64,
    /// Fuel its batch calls burned on this node, and the time they took.
    pub fuel: u64,
    pub busy_ms: u64,
    /// Why the plugin is quarantined (not called), if it is.
    pub quarantined: Option<String>,
}

/// What part a node plays in its group right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    /// Replicates but does not vote (a node being added).
    Learner,
    ShuttingDown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "Leader",
            Role::Follower => "Follower",
            Role::Candidate => "Candidate",
            Role::Learner => "Learner",
            Role::ShuttingDown => "ShuttingDown",
        }
    }
}

/// The word scripts match on (`Leader`); `pad` so column widths apply.
impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, Clone)]
pub struct NodeStatus {
    pub id: NodeId,
    pub role: Role,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    pub committed: Option<u64>,
    pub applied: Option<u64>,
    pub purged: Option<u64>,
    pub members: Vec<MemberInfo>,
    /// The other members' clocks as this node reads them, and whether its own is off.
    pub clock: crate::cluster::skew::ClockReport,
    /// This node's free space now, and the voters' as it read them last, with the alarm.
    pub disk: Box<NodeDisk>,
    /// The members that refuse this node's calls (another cluster secret, a certificate they do
    /// not take), and why.
    pub refused_by: std::collections::BTreeMap<NodeId, String>,
    /// Every Raft group this node runs a replica of.
    pub groups: Vec<GroupRow>,
}

/// One Raft group as a node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRow {
    pub id: u32,
    /// This node's role in the group.
    pub role: Role,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub committed: Option<u64>,
    pub applied: Option<u64>,
    /// This node holds no replica of the group: `leader` is what a member last told it.
    pub elsewhere: bool,
}

#[derive(Debug, Clone, Default)]
pub struct NodeDisk {
    pub here: crate::cluster::disk::DiskReading,
    pub cluster: crate::cluster::disk::DiskReport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDigest {
    pub applied: Option<u64>,
    pub digest: u64,
}

#[derive(Debug, Clone)]
pub struct MemberInfo {
    pub id: NodeId,
    pub raft_addr: String,
    pub client_addr: String,
    pub admin_addr: String,
    pub voter: bool,
    pub rack: String,
}

#[derive(Debug, Clone)]
pub struct TopicInfo {
    pub config: TopicConfig,
    /// `(queue, start, next)` per queue.
    pub queues: Vec<(u32, u64, u64)>,
    /// Messages stored but not delivered yet: pending timers, open halves.
    pub held: HeldCounts,
}

#[derive(Debug, Clone)]
pub struct GroupInfo {
    pub config: GroupConfig,
    /// One line per topic the group has consumed.
    pub progress: Vec<GroupProgress>,
}

#[derive(Debug, Clone)]
pub struct MessageLine {
    pub topic: String,
    pub queue: u32,
    pub offset: u64,
    pub message_id: String,
    pub tag: String,
    pub keys: Vec<String>,
    pub body_len: usize,
    pub store_timestamp_ms: i64,
}

/// A word in an answer that this build does not know (a newer node's role or level).
#[derive(Debug, thiserror::Error)]
#[error("unknown {what} {word:?}")]
pub struct UnknownWord {
    pub what: &'static str,
    pub word: String,
}

impl std::str::FromStr for Role {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Role, UnknownWord> {
        [Role::Leader, Role::Follower, Role::Candidate, Role::Learner, Role::ShuttingDown]
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownWord { what: "role", word: s.to_string() })
    }
}

fn level_word(level: DiskLevel) -> String {
    level.as_str().to_ascii_uppercase()
}

fn level(word: &str) -> Result<DiskLevel, UnknownWord> {
    [DiskLevel::Ok, DiskLevel::Low, DiskLevel::Critical]
        .into_iter()
        .find(|l| l.as_str().eq_ignore_ascii_case(word))
        .ok_or_else(|| UnknownWord { what: "disk level", word: word.to_string() })
}

impl From<DiskReading> for pb::DiskReading {
    fn from(d: DiskReading) -> pb::DiskReading {
        pb::DiskReading {
            free_bytes: d.free_bytes,
            total_bytes: d.total_bytes,
            soft_mark_bytes: d.marks.soft,
            hard_mark_bytes: d.marks.hard,
            level: level_word(d.level),
            filesystem: d.filesystem,
            sharing: d.sharing,
        }
    }
}

impl TryFrom<pb::DiskReading> for DiskReading {
    type Error = UnknownWord;

    fn try_from(d: pb::DiskReading) -> Result<DiskReading, UnknownWord> {
        Ok(DiskReading {
            free_bytes: d.free_bytes,
            total_bytes: d.total_bytes,
            marks: Watermarks { soft: d.soft_mark_bytes, hard: d.hard_mark_bytes },
            level: level(&d.level)?,
            filesystem: d.filesystem,
            sharing: d.sharing,
        })
    }
}

impl From<NodeStatus> for pb::NodeStatusReply {
    fn from(s: NodeStatus) -> pb::NodeStatusReply {
        let NodeDisk { here, cluster } = *s.disk;
        pb::NodeStatusReply {
            id: s.id,
            role: s.role.as_str().to_string(),
            term: s.term,
            leader: s.leader,
            last_log_index: s.last_log_index,
            committed: s.committed,
            applied: s.applied,
            purged: s.purged,
            members: s
                .members
                .into_iter()
                .map(|m| pb::Member {
                    id: m.id,
                    raft_addr: m.raft_addr,
                    client_addr: m.client_addr,
                    admin_addr: m.admin_addr,
                    voter: m.voter,
                    rack: m.rack,
                })
                .collect(),
            clock_offsets_ms: s.clock.offsets_ms.into_iter().collect(),
            clock_skewed: s.clock.skewed,
            disk: Some(here.into()),
            member_disks: cluster.members.into_iter().map(|(id, d)| (id, d.into())).collect(),
            disk_alarm: level_word(cluster.alarm),
            refused_by: s.refused_by.into_iter().collect(),
            groups: s
                .groups
                .into_iter()
                .map(|g| pb::GroupRow {
                    id: g.id,
                    role: g.role.as_str().to_string(),
                    leader: g.leader,
                    term: g.term,
                    committed: g.committed,
                    applied: g.applied,
                    elsewhere: g.elsewhere,
                })
                .collect(),
        }
    }
}

impl TryFrom<pb::NodeStatusReply> for NodeStatus {
    type Error = UnknownWord;

    fn try_from(s: pb::NodeStatusReply) -> Result<NodeStatus, UnknownWord> {
        let members = s.member_disks.into_iter().map(|(id, d)| Ok((id, d.try_into()?))).collect::<Result<_, _>>()?;
        Ok(NodeStatus {
            id: s.id,
            role: s.role.parse()?,
            term: s.term,
            leader: s.leader,
            last_log_index: s.last_log_index,
            committed: s.committed,
            applied: s.applied,
            purged: s.purged,
            members: s
                .members
                .into_iter()
                .map(|m| MemberInfo {
                    id: m.id,
                    raft_addr: m.raft_addr,
                    client_addr: m.client_addr,
                    admin_addr: m.admin_addr,
                    voter: m.voter,
                    rack: m.rack,
                })
                .collect(),
            clock: crate::cluster::skew::ClockReport {
                offsets_ms: s.clock_offsets_ms.into_iter().collect(),
                skewed: s.clock_skewed,
            },
            disk: Box::new(NodeDisk {
                here: s.disk.map(DiskReading::try_from).transpose()?.unwrap_or_default(),
                cluster: DiskReport { members, alarm: level(&s.disk_alarm)? },
            }),
            refused_by: s.refused_by.into_iter().collect(),
            groups: s
                .groups
                .into_iter()
                .map(|g| {
                    Ok(GroupRow {
                        id: g.id,
                        role: g.role.parse()?,
                        leader: g.leader,
                        term: g.term,
                        committed: g.committed,
                        applied: g.applied,
                        elsewhere: g.elsewhere,
                    })
                })
                .collect::<Result<_, UnknownWord>>()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_print_as_the_words_scripts_match_and_cross_the_wire_as_themselves() {
        assert_eq!(format!("{:<8}|", Role::Leader), "Leader  |");
        assert_eq!(Role::Follower.to_string(), "Follower");
        for role in [Role::Leader, Role::Follower, Role::Candidate, Role::Learner, Role::ShuttingDown] {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        assert!("Chief".parse::<Role>().is_err());
    }

    #[test]
    fn a_status_crosses_the_wire_whole() {
        let reading = DiskReading {
            free_bytes: 6 << 20,
            total_bytes: 1 << 30,
            marks: Watermarks { soft: 8 << 20, hard: 4 << 20 },
            level: DiskLevel::Low,
            filesystem: 7,
            sharing: 2,
        };
        let status = NodeStatus {
            id: 2,
            role: Role::Follower,
            term: 3,
            leader: Some(1),
            last_log_index: Some(10),
            committed: Some(9),
            applied: Some(8),
            purged: None,
            members: vec![MemberInfo {
                id: 1,
                raft_addr: "a:1".into(),
                client_addr: "a:2".into(),
                admin_addr: "a:3".into(),
                voter: true,
                rack: "r1".into(),
            }],
            clock: crate::cluster::skew::ClockReport { offsets_ms: [(1, -40)].into(), skewed: true },
            disk: Box::new(NodeDisk {
                here: reading,
                cluster: DiskReport { members: [(1, reading)].into(), alarm: DiskLevel::Low },
            }),
            refused_by: [(3, "another cluster secret".to_string())].into(),
            groups: vec![GroupRow {
                id: 2,
                role: Role::Leader,
                leader: Some(2),
                term: 4,
                committed: Some(7),
                applied: Some(6),
                elsewhere: false,
            }],
        };
        let back = NodeStatus::try_from(pb::NodeStatusReply::from(status.clone())).unwrap();
        assert_eq!(format!("{back:?}"), format!("{status:?}"));
    }
}
