//! Filling damaged log records from the other members.
//!
//! The log finds records it held whole that no longer read back (at start, or while the scrubber
//! re-reads sealed segments: `store::Damage`). They are never served; this fetches them again
//! from another member (`RaftService.ReadLog`) and writes them back where they were.
//!
//! A member's copy is taken only when it must be the record this node held:
//! - damage followed by a whole record: the member holds that same record (term and leader) at
//!   the same index, so by Raft's log matching it holds the same records before it;
//! - damage at the tail (nothing whole after it, up to the sync mark) or whose follower is
//!   damaged too: only records the member knows committed are taken. A committed record is the
//!   same on every member; one this node held but that was never committed is replaced by the
//!   committed one, as Raft's own conflict resolution would.
//!
//! A group with damage found at start does not start until it is filled: a node that lost
//! records it had acknowledged neither votes nor leads on a log it no longer has.

use std::time::Duration;

use bytes::Bytes;
use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::raft_service_client::RaftServiceClient;

use crate::metrics::{Meters, RepairNote, Repaired};
use crate::raft::network::{PeerChannel, member_channel_to, raft_client};
use crate::raft::wire::FromPb;
use crate::raft::{Dialer, GroupId, NodeId, NodeInfo, SnapshotMeta};
use crate::store::{CommitLog, Damage, LogReader, RecordMeta, StoreError};

/// How long one member has to answer one read.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BACK_OFF: Duration = Duration::from_millis(500);
const MAX_BACK_OFF: Duration = Duration::from_secs(30);

/// A log whose damage can be filled: the log itself before its group starts, or a reader of a
/// running group's log (which never has damage at its tail: see [`CommitLog::fill`]).
pub trait Fillable {
    fn damage(&self) -> Vec<Damage>;
    fn fill(&mut self, first_index: u64, records: Vec<(RecordMeta, Bytes)>) -> Result<(), StoreError>;
}

impl Fillable for CommitLog {
    fn damage(&self) -> Vec<Damage> {
        CommitLog::damage(self)
    }

    fn fill(&mut self, first_index: u64, records: Vec<(RecordMeta, Bytes)>) -> Result<(), StoreError> {
        CommitLog::fill(self, first_index, records)
    }
}

impl Fillable for LogReader {
    fn damage(&self) -> Vec<Damage> {
        LogReader::damage(self)
    }

    fn fill(&mut self, first_index: u64, records: Vec<(RecordMeta, Bytes)>) -> Result<(), StoreError> {
        LogReader::fill(self, first_index, records)
    }
}

/// Who to ask: the group, and its other members with where their raft ports are.
pub struct Sources<'a> {
    pub group: GroupId,
    pub members: Vec<(NodeId, NodeInfo)>,
    pub dialer: &'a Dialer,
}

/// Why one damage could not be filled this time.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("no other member to fetch records from")]
    NoSource,
    #[error("no member had the records: {0}")]
    NotFound(String),
}

/// Fills every damage of `log` from `sources`, trying each member in turn and waiting between
/// rounds (doubling up to 30 s) until all is filled. Answers the records filled; each fill is
/// counted and noted for the cluster's history (`meters`).
pub async fn fill_all(log: &mut impl Fillable, sources: &Sources<'_>, meters: &Meters) -> u64 {
    let mut back_off = FIRST_BACK_OFF;
    let mut filled = 0;
    loop {
        let damage = log.damage();
        if damage.is_empty() {
            return filled;
        }
        let mut failed = None;
        for d in damage {
            let began_ms = crate::simulation::system_ms();
            match fill_one(log, &d, sources).await {
                Ok((n, from)) => {
                    said_filled(sources, &d, n, from, began_ms, meters);
                    filled += n;
                }
                Err(e) => failed = Some((d, e)),
            }
        }
        if let Some((d, e)) = failed {
            // Once per round, and the rounds back off: at most one line per 30 s while it lasts.
            tracing::warn!(
                group = sources.group.0, first_index = d.first_index, error = %e,
                retry_in = ?back_off, "damaged log records not filled yet"
            );
            tokio::time::sleep(back_off).await;
            back_off = (back_off * 2).min(MAX_BACK_OFF);
        }
    }
}

/// One round of [`fill_all`] for a read of records `[start, end)` waiting on it: the damage
/// known among them, each from the first member that has it; the records filled, or why one
/// damage was not.
pub async fn fill_once(
    log: &mut impl Fillable,
    (start, end): (u64, u64),
    sources: &Sources<'_>,
    meters: &Meters,
) -> Result<u64, RepairError> {
    let mut filled = 0;
    for d in log.damage().into_iter().filter(|d| d.first_index < end && start < d.end_index) {
        let began_ms = crate::simulation::system_ms();
        let (n, from) = fill_one(log, &d, sources).await?;
        said_filled(sources, &d, n, from, began_ms, meters);
        filled += n;
    }
    Ok(filled)
}

/// The log line, the count and the history's note of one fill.
fn said_filled(sources: &Sources<'_>, d: &Damage, records: u64, from: NodeId, began_ms: i64, meters: &Meters) {
    tracing::info!(
        group = sources.group.0,
        first_index = d.first_index,
        last_index = d.end_index - 1,
        records,
        from,
        "damaged log records filled again from another member"
    );
    meters.corruption_repaired(RepairNote {
        group: sources.group.0,
        repaired: Repaired::LogRecords,
        first: d.first_index,
        last: d.end_index - 1,
        source: Some(from),
        place: format!("{} byte {}", d.path.display(), d.offset),
        began_ms,
        done_ms: crate::simulation::system_ms(),
    });
}

/// Fills `damage` from the first member that has records it can take; answers how many, and
/// from whom.
async fn fill_one(
    log: &mut impl Fillable,
    damage: &Damage,
    sources: &Sources<'_>,
) -> Result<(u64, NodeId), RepairError> {
    if sources.members.is_empty() {
        return Err(RepairError::NoSource);
    }
    let mut reasons = Vec::new();
    for (id, info) in &sources.members {
        match fetch(*id, info, damage, sources).await {
            Ok(records) => {
                let n = records.len() as u64;
                match log.fill(damage.first_index, records) {
                    Ok(()) => return Ok((n, *id)),
                    Err(e) => reasons.push(format!("node {id}: {e}")),
                }
            }
            Err(e) => reasons.push(format!("node {id}: {e}")),
        }
    }
    Err(RepairError::NotFound(reasons.join("; ")))
}

/// A client of member `id`'s raft port, its certificate checked to name it.
fn client_of(id: NodeId, info: &NodeInfo, sources: &Sources<'_>) -> Result<RaftServiceClient<PeerChannel>, String> {
    Ok(raft_client(member_channel_to(&info.raft_addr, Some(id), sources.dialer).map_err(|e| e.to_string())?))
}

/// Member `id`'s records for `damage`, checked to be the ones this node held (see the module).
async fn fetch(
    id: NodeId,
    info: &NodeInfo,
    damage: &Damage,
    sources: &Sources<'_>,
) -> Result<Vec<(RecordMeta, Bytes)>, String> {
    let mut client = client_of(id, info, sources)?;
    // The damaged run and, where one follows it, the record after it.
    let end = damage.end_index + u64::from(damage.anchor.is_some());
    let mut records: Vec<(RecordMeta, Bytes)> = Vec::new();
    let mut committed = None;
    while damage.first_index + (records.len() as u64) < end {
        let from = damage.first_index + records.len() as u64;
        let mut request = sources.group.address(pb::ReadLogRequest { from, end });
        request.set_timeout(READ_TIMEOUT);
        let reply = client.read_log(request).await.map_err(|s| s.message().to_string())?.into_inner();
        if committed.is_none() {
            committed = reply.committed;
        }
        if reply.entries.is_empty() {
            return Err(format!("holds no record {from}"));
        }
        for e in reply.entries {
            if e.index != damage.first_index + records.len() as u64 {
                return Err(format!("answered record {} out of turn", e.index));
            }
            let kind = u8::try_from(e.kind).map_err(|_| format!("record {} of kind {}", e.index, e.kind))?;
            records.push((RecordMeta { term: e.term, index: e.index, leader: e.leader, kind }, e.payload));
        }
    }
    records.truncate((end - damage.first_index) as usize);
    match damage.anchor {
        Some(anchor) => {
            let theirs = records.pop().map(|(m, _)| m);
            if theirs.is_none_or(|t| t.term != anchor.term || t.leader != anchor.leader) {
                return Err(format!("holds another record than this node at {}", anchor.index));
            }
        }
        None => {
            if committed.is_none_or(|c| c + 1 < damage.end_index) {
                return Err(format!("knows records only up to {committed:?} committed"));
            }
        }
    }
    Ok(records)
}

/// A snapshot of the group another member holds, to replace a damaged snapshot file: one at or
/// past `at_least` (this node's purge point: its log must continue the snapshot). Tries each
/// member in turn, waiting between rounds (doubling up to 30 s) until one has it. Answers it and
/// the member it came from.
pub async fn fetch_snapshot(sources: &Sources<'_>, at_least: Option<u64>) -> (SnapshotMeta, Bytes, NodeId) {
    let mut back_off = FIRST_BACK_OFF;
    loop {
        let mut reasons = Vec::new();
        for (id, info) in &sources.members {
            match snapshot_of(*id, info, sources).await {
                Ok((meta, data)) if meta.last_log_id.map(|l| l.index) >= at_least => return (meta, data, *id),
                Ok((meta, _)) => reasons.push(format!("node {id}: its snapshot at {:?} is older", meta.last_log_id)),
                Err(e) => reasons.push(format!("node {id}: {e}")),
            }
        }
        tracing::warn!(
            group = sources.group.0, reasons = %reasons.join("; "), retry_in = ?back_off,
            "no member had a snapshot to replace the damaged one yet"
        );
        tokio::time::sleep(back_off).await;
        back_off = (back_off * 2).min(MAX_BACK_OFF);
    }
}

async fn snapshot_of(id: NodeId, info: &NodeInfo, sources: &Sources<'_>) -> Result<(SnapshotMeta, Bytes), String> {
    let mut request = sources.group.address(pb::Empty {});
    request.set_timeout(READ_TIMEOUT * 6);
    let reply = client_of(id, info, sources)?.read_snapshot(request).await.map_err(|s| s.message().to_string())?;
    let reply = reply.into_inner();
    let meta = reply.meta.ok_or("holds no snapshot")?;
    Ok((SnapshotMeta::from_pb(meta).map_err(|e| e.to_string())?, reply.data))
}
