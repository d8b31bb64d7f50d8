//! Lite topics (RocketMQ 5.5): many small ordered channels under one parent topic, each named by
//! its producer (`SystemProperties.lite_topic`), with its own offset per consumer group.
//!
//! A lite message is stored once, in the CommitLog, like any message of its parent topic (and in
//! the parent's ConsumeQueues, which retention and listings use). What makes it a channel is kept
//! in tables whose rows stay on disk, so an idle lite topic costs no memory:
//! - the registry, (parent, lite) → [`LiteTopic`]: its id, next offset, last write time, and
//!   where its newest messages are (up to [`RECORD_CHUNK`] queue positions);
//! - its records: each full chunk of [`RECORD_CHUNK`] queue positions, keyed (lite id, chunk), so
//!   a send writes one row (its lite topic's) and a chunk row every eighth message;
//! - per consumer group, (lite id, group) → [`LiteProgress`]: the next offset to take and the
//!   deliveries in flight.
//!
//! Subscriptions — which lite topics each client of a lite group wants — are small (a quota per
//! client) and kept in memory. A lite topic is delivered in order: the next batch of a lite topic
//! goes out once the previous one is acked (or redelivered after its invisible time), so a
//! receive finds a client's pending lite topics by looking at its subscriptions only, never at
//! every lite topic of the parent.
//!
//! A client id is the client's own choice, so with authentication on a subscription records the
//! user that made it ([`LiteSubscription::owner`]) and apply refuses a sync, receive or
//! unsubscribe of it by another user ([`LiteOutcome::NotOwner`]) whichever node took the call.
//!
//! A lite id is the queue position of what created the row (the first message sent to it), so ids
//! are unique without a counter, the same on every replica, and a lite topic created again after
//! it expired gets a new id: nothing of the old one's progress applies to it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::broker::delivery::{self, Channel, ChannelId, Delivery, Inflight, Receipt, Settle, Settled};
use crate::broker::disk_table::{DiskKey, DiskResult, DiskTable};
use crate::broker::group::GroupConfig;
pub use crate::broker::group::{LiteBinding, LiteModel, MAX_LITE_QUOTA, UnknownLiteModel};
use crate::broker::table::Table;
pub use crate::broker::topic::DEFAULT_LITE_TTL_MINUTES;

/// Longest lite topic name (RocketMQ's `maxLiteTopicSize` default).
pub const MAX_LITE_TOPIC_BYTES: usize = 64;
/// Lite topics a client may subscribe to unless its group says otherwise.
pub const DEFAULT_LITE_QUOTA: u32 = 1000;
/// The most record chunks one expiry entry deletes: a big lite topic is deleted over several
/// entries.
pub const MAX_EXPIRED_RECORDS_PER_ENTRY: u64 = 20_000;
/// Queue positions per record row. The registry row keeps the chunk being filled.
pub const RECORD_CHUNK: u64 = 8;

/// Why a lite topic name breaks RocketMQ's rule; holds the name. Its text goes into replicated
/// replies: it must not change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidLiteName {
    #[error("a lite topic name has 1 to {MAX_LITE_TOPIC_BYTES} bytes, {0:?} has {len}", len = .0.len())]
    Length(String),
    #[error("illegal lite topic name {0:?}: only letters, digits, '_' and '-'")]
    Characters(String),
}

/// RocketMQ's rule for lite topic names: `^[a-zA-Z0-9_-]+$`, at most 64 bytes.
pub fn validate_lite_name(name: &str) -> Result<(), InvalidLiteName> {
    if name.is_empty() || name.len() > MAX_LITE_TOPIC_BYTES {
        return Err(InvalidLiteName::Length(name.to_string()));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return Err(InvalidLiteName::Characters(name.to_string()));
    }
    Ok(())
}

/// (parent topic, lite topic). Names hold no NUL, so "parent NUL lite" sorts by parent, then lite.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LiteName {
    pub parent: String,
    pub lite: String,
}

impl DiskKey for LiteName {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.parent.as_bytes());
        out.push(0);
        out.extend_from_slice(self.lite.as_bytes());
    }
    fn decode(b: &[u8]) -> Option<LiteName> {
        let nul = b.iter().position(|&c| c == 0)?;
        let parent = std::str::from_utf8(&b[..nul]).ok()?.to_string();
        let lite = std::str::from_utf8(&b[nul + 1..]).ok()?.to_string();
        Some(LiteName { parent, lite })
    }
}

/// (lite id, chunk): a lite topic's record chunks in offset order.
impl DiskKey for (u64, u64) {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Option<(u64, u64)> {
        if b.len() != 16 {
            return None;
        }
        Some((u64::from_be_bytes(b[..8].try_into().ok()?), u64::from_be_bytes(b[8..].try_into().ok()?)))
    }
}

/// (lite id, group): every group's progress on one lite topic sits together, so deleting the lite
/// topic reads only its own rows.
impl DiskKey for (u64, String) {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(self.1.as_bytes());
    }
    fn decode(b: &[u8]) -> Option<(u64, String)> {
        let id = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        Some((id, std::str::from_utf8(&b[8..]).ok()?.to_string()))
    }
}

/// One lite topic: one row on disk, nothing in memory once checkpointed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiteTopic {
    pub id: u64,
    /// The offset its next message gets.
    pub next: u64,
    /// The store time of its newest message (the leader's clock): expiry counts from it.
    pub last_write_ms: i64,
    /// The queue positions of the offsets of the chunk being filled: `next - tail.len() .. next`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tail: Vec<u64>,
}

impl LiteTopic {
    /// The offset of `tail[0]`.
    fn tail_start(&self) -> u64 {
        self.next - self.tail.len() as u64
    }
}

/// A group's progress on one lite topic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiteProgress {
    /// Offsets below this were taken: acked, in flight, or gone from the log.
    pub position: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inflight: BTreeMap<u64, Inflight>,
    /// Exclusive groups: the client that holds the lite topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl Channel for LiteProgress {
    fn position(&self) -> u64 {
        self.position
    }
    fn inflight(&self) -> &BTreeMap<u64, Inflight> {
        &self.inflight
    }
    fn inflight_mut(&mut self) -> &mut BTreeMap<u64, Inflight> {
        &mut self.inflight
    }
}

/// The lite topics one client of a lite group subscribes to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiteSubscription {
    pub lites: BTreeSet<String>,
    /// When the client last synced its subscriptions (the leader's clock).
    pub synced_ms: i64,
    /// The user (access key) whose client it is: the first that synced it with authentication
    /// on. `None`: made with authentication off (or before owners were kept); the next user to
    /// sync it owns it. Client ids are the clients' own choice, so this, not the id, says whose
    /// subscriptions they are on every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Who acts on a client's lite subscriptions (a sync, a receive, an unsubscribe). Carried in the
/// entry, so apply decides from the entry and the replicated state alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LiteActor {
    /// Authentication off, or the cluster itself (the upkeep of departed clients): may act on
    /// any subscription, and owns none it makes. Entries from before owners were kept read so.
    #[default]
    Open,
    /// An authenticated user (access key): acts only on its own subscriptions and on unowned
    /// ones (which a sync makes its own).
    User(String),
    /// An admin (access key): may act on any subscription, as an operator; one it makes is its own.
    Admin(String),
}

impl LiteActor {
    pub fn is_open(&self) -> bool {
        *self == LiteActor::Open
    }

    /// May it act on a subscription owned by `owner`?
    pub fn may_act_on(&self, owner: Option<&str>) -> bool {
        match (self, owner) {
            (LiteActor::User(user), Some(owner)) => user == owner,
            _ => true,
        }
    }

    /// The owner of a subscription it makes.
    fn owner(&self) -> Option<String> {
        match self {
            LiteActor::Open => None,
            LiteActor::User(key) | LiteActor::Admin(key) => Some(key.clone()),
        }
    }
}

/// One lite topic of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiteTopicInfo {
    pub lite: String,
    /// Messages ever stored (its next offset).
    pub messages: u64,
    pub last_write_ms: i64,
    /// For the group asked about: messages not taken yet, and deliveries in flight.
    pub backlog: u64,
    pub inflight: usize,
}

/// (group, client id).
pub type SubscriberKey = (String, String);

/// The replicated state of lite topics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiteTables {
    pub topics: DiskTable<LiteName, LiteTopic>,
    pub records: DiskTable<(u64, u64), Vec<u64>>,
    pub progress: DiskTable<(u64, String), LiteProgress>,
    pub subscriptions: Table<SubscriberKey, LiteSubscription>,
}

/// How a sync changes a client's subscriptions (RocketMQ's `LiteSubscriptionAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncAction {
    Add,
    Remove,
    /// The client's whole set (sent every 30 s; may be empty).
    Replace,
}

/// New messages of one lite topic: the proposer looked at `from..to` and delivers `deliver`
/// (the others are gone from the log).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiteTake {
    pub lite: String,
    pub id: u64,
    pub from: u64,
    pub to: u64,
    pub deliver: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LitePop {
    pub group: String,
    pub parent: String,
    /// The client whose subscriptions were planned from, and who receives.
    #[serde(default)]
    pub client: String,
    #[serde(default, skip_serializing_if = "LiteActor::is_open")]
    pub by: LiteActor,
    pub now_ms: i64,
    pub invisible_ms: i64,
    pub takes: Vec<LiteTake>,
    /// Expired deliveries to hand out again, with the generation the proposer saw.
    pub redeliveries: Vec<LiteRedelivery>,
}

/// An expired delivery of lite topic `lite` (id `id`) to hand out again: stale if the message
/// was acked or redelivered since the proposer saw `generation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RedeliveryForm", into = "RedeliveryForm")]
pub struct LiteRedelivery {
    pub lite: String,
    pub id: u64,
    pub offset: u64,
    pub generation: u64,
}

/// A lite redelivery's serde form, as entries of format 1 wrote it: the lite topic's name and
/// the delivery's receipt.
type RedeliveryForm = (String, LiteReceiptForm);

#[derive(Serialize, Deserialize)]
struct LiteReceiptForm {
    group: String,
    id: u64,
    offset: u64,
    generation: u64,
}

impl From<RedeliveryForm> for LiteRedelivery {
    fn from((lite, r): RedeliveryForm) -> LiteRedelivery {
        LiteRedelivery { lite, id: r.id, offset: r.offset, generation: r.generation }
    }
}

impl From<LiteRedelivery> for RedeliveryForm {
    fn from(r: LiteRedelivery) -> RedeliveryForm {
        // The group is the pop's; the receipt's copy of it is never read.
        (r.lite, LiteReceiptForm { group: String::new(), id: r.id, offset: r.offset, generation: r.generation })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LiteCommand {
    Sync {
        group: String,
        parent: String,
        client: String,
        action: SyncAction,
        lites: Vec<String>,
        now_ms: i64,
        #[serde(default, skip_serializing_if = "LiteActor::is_open")]
        by: LiteActor,
    },
    /// A receive: its deliveries are acked, changed and dead-lettered by receipt, as a queue's
    /// are (`ConsumeCommand`, `DeadLetter`).
    Pop(LitePop),
    /// Deletes lite topics of `parent` nobody wrote to since `before_ms` (the leader's clock
    /// minus the parent's TTL): records, progress and subscriptions. A lite topic written to
    /// since the leader looked is kept.
    Expire { parent: String, before_ms: i64, lites: Vec<(String, u64)> },
    /// Forgets a client's subscriptions (it went away).
    Unsubscribe {
        group: String,
        client: String,
        #[serde(default, skip_serializing_if = "LiteActor::is_open")]
        by: LiteActor,
    },
}

impl LiteCommand {
    pub fn set_time(&mut self, now: i64) {
        match self {
            LiteCommand::Sync { now_ms, .. } => *now_ms = now,
            LiteCommand::Pop(p) => p.now_ms = now,
            _ => {}
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LiteOutcome {
    Done,
    /// What the subscriptions of the sync's client are now (the names it asked for that were
    /// taken from other clients of an exclusive group come with the previous holder).
    Synced {
        taken_from: Vec<(String, String)>,
    },
    GroupNotFound(String),
    TopicNotFound(String),
    /// The group is not a lite group of this parent.
    IllegalGroup(String),
    IllegalLiteTopic(String),
    QuotaExceeded(String),
    /// The deliveries of a receive, with the names of their lite topics by id.
    Delivered {
        deliveries: Vec<Delivery>,
        names: BTreeMap<u64, String>,
    },
    /// The client's subscriptions belong to another user: nothing was changed or delivered.
    NotOwner(String),
}

impl LiteTables {
    /// Why `by` may not act on the subscriptions of `client` of `group`, if it may not.
    pub fn not_owner(&self, group: &str, client: &str, by: &LiteActor) -> Option<String> {
        let owner = self.subscriptions.get(&(group.to_string(), client.to_string()))?.owner.as_deref();
        (!by.may_act_on(owner)).then(|| format!("the lite subscriptions of client {client:?} belong to another user"))
    }

    /// The registry row of (`parent`, `lite`).
    pub fn topic(&self, parent: &str, lite: &str) -> DiskResult<Option<LiteTopic>> {
        self.topics.get(&LiteName { parent: parent.to_string(), lite: lite.to_string() })
    }

    /// `group`'s progress on lite topic `id` (new groups start at the oldest record kept).
    pub fn progress_of(&self, id: u64, group: &str) -> DiskResult<LiteProgress> {
        Ok(self.progress.get(&(id, group.to_string()))?.unwrap_or_default())
    }

    /// Appends one message to lite topic (`parent`, `lite`), creating it: at `position`, stored
    /// at `store_ms`.
    pub fn append(&mut self, parent: &str, lite: &str, position: u64, store_ms: i64) -> DiskResult<()> {
        let name = LiteName { parent: parent.to_string(), lite: lite.to_string() };
        let mut row = self.topics.get(&name)?.unwrap_or(LiteTopic {
            id: position,
            last_write_ms: store_ms,
            ..Default::default()
        });
        row.tail.push(position);
        row.next += 1;
        row.last_write_ms = row.last_write_ms.max(store_ms);
        if row.next % RECORD_CHUNK == 0 {
            self.records.insert((row.id, row.next / RECORD_CHUNK - 1), std::mem::take(&mut row.tail));
        }
        self.topics.insert(name, row);
        Ok(())
    }

    /// The queue position of `row`'s message at `offset`.
    pub fn record(&self, row: &LiteTopic, offset: u64) -> DiskResult<Option<u64>> {
        if offset >= row.next {
            return Ok(None);
        }
        if offset >= row.tail_start() {
            return Ok(row.tail.get((offset - row.tail_start()) as usize).copied());
        }
        let chunk = self.records.get(&(row.id, offset / RECORD_CHUNK))?;
        Ok(chunk.and_then(|c| c.get((offset % RECORD_CHUNK) as usize).copied()))
    }

    /// Deletes everything of a parent topic's lite topics (the parent was deleted). Bounded by
    /// what the parent held; rare.
    pub fn parent_deleted(&mut self, parent: &str) -> DiskResult<()> {
        let from = LiteName { parent: parent.to_string(), lite: String::new() };
        loop {
            let rows = self.topics.range_while(&from, 1024, |k| k.parent == parent)?;
            if rows.is_empty() {
                break;
            }
            for (name, row) in rows {
                self.delete(&name, row.id, u64::MAX)?;
            }
        }
        Ok(())
    }

    /// Deletes lite topic `name` (id `id`): up to `max_records` of its records, and once none
    /// are left its progress rows and its registry row. Returns the records deleted and whether
    /// the lite topic is gone.
    fn delete(&mut self, name: &LiteName, id: u64, max_records: u64) -> DiskResult<(u64, bool)> {
        let limit = usize::try_from(max_records.saturating_add(1)).unwrap_or(usize::MAX);
        let records = self.records.range_while(&(id, 0), limit, |k| k.0 == id)?;
        let all = records.len() as u64 <= max_records;
        let mut deleted = 0;
        for (key, _) in records.into_iter().take(usize::try_from(max_records).unwrap_or(usize::MAX)) {
            self.records.remove(&key)?;
            deleted += 1;
        }
        if !all {
            return Ok((deleted, false));
        }
        for (key, _) in self.progress.range_while(&(id, String::new()), usize::MAX, |k| k.0 == id)? {
            self.progress.remove(&key)?;
        }
        self.topics.remove(name)?;
        Ok((deleted, true))
    }

    /// Applies `command`, committed at `index`. `group_of` finds a consumer group.
    pub fn apply(
        &mut self,
        index: u64,
        command: &LiteCommand,
        group_of: &dyn Fn(&str) -> Option<GroupConfig>,
    ) -> DiskResult<LiteOutcome> {
        match command {
            LiteCommand::Sync { group, parent, client, action, lites, now_ms, by } => {
                let sync = SyncRequest { group, parent, client, action: *action, lites, now_ms: *now_ms, by };
                match lite_group(group_of, group, parent) {
                    Ok((_, binding)) => self.sync(&binding, &sync),
                    Err(o) => Ok(o),
                }
            }
            LiteCommand::Pop(pop) => match lite_group(group_of, &pop.group, &pop.parent) {
                Ok((group, _)) => self.pop(index, &group, pop),
                Err(o) => Ok(o),
            },
            LiteCommand::Expire { parent, before_ms, lites } => self.expire(parent, *before_ms, lites, group_of),
            LiteCommand::Unsubscribe { group, client, by } => Ok(self.unsubscribe(group, client, by)),
        }
    }

    /// Changes the subscriptions of `client` of `group` (a lite group bound to `parent` as
    /// `binding` says); in an exclusive group, the lite topics it adds become its own.
    fn sync(&mut self, binding: &LiteBinding, sync: &SyncRequest) -> DiskResult<LiteOutcome> {
        let SyncRequest { group, parent, client, action, lites, now_ms, by } = *sync;
        if let Some(bad) = lites.iter().find_map(|l| validate_lite_name(l).err()) {
            return Ok(LiteOutcome::IllegalLiteTopic(bad.to_string()));
        }
        if let Some(why) = self.not_owner(group, client, by) {
            return Ok(LiteOutcome::NotOwner(why));
        }
        let key = (group.to_string(), client.to_string());
        let mut sub = match self.subscriptions.get(&key) {
            Some(s) => s.clone(),
            None => LiteSubscription { owner: by.owner(), ..Default::default() },
        };
        // An unowned subscription (made with authentication off) becomes the first user's
        // to sync it; an admin acting on another's client leaves the owner as it was.
        if sub.owner.is_none() && matches!(by, LiteActor::User(_)) {
            sub.owner = by.owner();
        }
        match action {
            SyncAction::Add => sub.lites.extend(lites.iter().cloned()),
            SyncAction::Remove => lites.iter().for_each(|l| {
                sub.lites.remove(l);
            }),
            SyncAction::Replace => sub.lites = lites.iter().cloned().collect(),
        }
        if sub.lites.len() as u64 > u64::from(binding.quota) {
            return Ok(LiteOutcome::QuotaExceeded(format!(
                "client {client} of group {group} may subscribe to {} lite topics, not {}",
                binding.quota,
                sub.lites.len()
            )));
        }
        let mut taken_from = Vec::new();
        if binding.model == LiteModel::Exclusive {
            for lite in lites {
                let Some(row) = self.topic(parent, lite)? else { continue };
                let mut p = self.progress_of(row.id, group)?;
                if action == SyncAction::Remove {
                    // An unsubscribing holder lets the lite topic go to the next subscriber.
                    if p.owner.as_deref() == Some(client) {
                        p.owner = None;
                        self.progress.insert((row.id, group.to_string()), p);
                    }
                    continue;
                }
                match p.owner.clone() {
                    Some(owner) if owner == client => continue,
                    // The whole-set sync repeats what the client had: it does not take a
                    // lite topic back from the subscriber that took it over since.
                    Some(_) if action == SyncAction::Replace => {
                        sub.lites.remove(lite);
                        continue;
                    }
                    Some(previous) => {
                        // The newest subscriber takes the lite topic over.
                        if let Some(s) = self.subscriptions.get_mut(&(group.to_string(), previous.clone())) {
                            s.lites.remove(lite);
                        }
                        taken_from.push((lite.clone(), previous));
                    }
                    None => {}
                }
                p.owner = Some(client.to_string());
                self.progress.insert((row.id, group.to_string()), p);
            }
        }
        sub.synced_ms = now_ms;
        if sub.lites.is_empty() {
            self.subscriptions.remove(&key);
        } else {
            self.subscriptions.insert(key, sub);
        }
        Ok(LiteOutcome::Synced { taken_from })
    }

    /// Hands out what `pop` planned, as the entry at `index`: expired deliveries again, then new
    /// messages of lite topics with nothing in flight. A part planned from a stale view is left.
    fn pop(&mut self, index: u64, group: &GroupConfig, pop: &LitePop) -> DiskResult<LiteOutcome> {
        if let Some(why) = self.not_owner(&pop.group, &pop.client, &pop.by) {
            return Ok(LiteOutcome::NotOwner(why));
        }
        let until = pop.now_ms.saturating_add(pop.invisible_ms);
        let (mut deliveries, mut names) = (Vec::new(), BTreeMap::new());
        for r in &pop.redeliveries {
            let mut p = self.progress_of(r.id, &group.name)?;
            let Some(f) = delivery::redeliver(&mut p, r.offset, r.generation, index, pop.now_ms, until) else {
                continue;
            };
            deliveries.push(Delivery::of(ChannelId::Lite(r.id), r.offset, f));
            names.insert(r.id, r.lite.clone());
            self.progress.insert((r.id, group.name.clone()), p);
        }
        for take in &pop.takes {
            let mut p = self.progress_of(take.id, &group.name)?;
            if !take_applies(&p, take) {
                continue;
            }
            for &offset in &take.deliver {
                let f = delivery::deliver(&mut p, offset, String::new(), index, until);
                deliveries.push(Delivery::of(ChannelId::Lite(take.id), offset, f));
                names.insert(take.id, take.lite.clone());
            }
            p.position = take.to;
            self.progress.insert((take.id, group.name.clone()), p);
        }
        Ok(LiteOutcome::Delivered { deliveries, names })
    }

    /// Takes `step` on the lite delivery `r` names (a queue's receipt names none here).
    pub fn settle(&mut self, r: &Receipt, step: Settle) -> DiskResult<Settled> {
        let ChannelId::Lite(id) = r.channel else { return Ok(Settled::Stale) };
        let mut p = self.progress_of(id, &r.group)?;
        let (settled, changed) = delivery::settle(&mut p, r, step);
        if changed {
            self.progress.insert((id, r.group.clone()), p);
        }
        Ok(settled)
    }

    /// Deletes the lite topics of `parent` in `lites` nobody wrote to since `before_ms` (within
    /// one entry's budget of records), and the subscriptions to those fully gone.
    fn expire(
        &mut self,
        parent: &str,
        before_ms: i64,
        lites: &[(String, u64)],
        group_of: &dyn Fn(&str) -> Option<GroupConfig>,
    ) -> DiskResult<LiteOutcome> {
        let mut budget = MAX_EXPIRED_RECORDS_PER_ENTRY;
        let mut gone = BTreeSet::new();
        for (lite, id) in lites {
            let name = LiteName { parent: parent.to_string(), lite: lite.clone() };
            let Some(row) = self.topics.get(&name)? else { continue };
            if row.id != *id || row.last_write_ms >= before_ms || budget == 0 {
                continue;
            }
            let (deleted, all) = self.delete(&name, row.id, budget)?;
            budget = budget.saturating_sub(deleted);
            if all {
                gone.insert(lite.clone());
            }
        }
        // Subscriptions to a deleted lite topic go too, in the groups bound to the parent.
        let bound: BTreeSet<String> = self
            .subscriptions
            .keys()
            .map(|(g, _)| g.clone())
            .filter(|g| group_of(g).and_then(|c| c.lite).is_some_and(|b| b.topic == parent))
            .collect();
        if !gone.is_empty() {
            let keys: Vec<SubscriberKey> =
                self.subscriptions.keys().filter(|(g, _)| bound.contains(g)).cloned().collect();
            for key in keys {
                let Some(s) = self.subscriptions.get_mut(&key) else { continue };
                s.lites.retain(|l| !gone.contains(l));
                if s.lites.is_empty() {
                    self.subscriptions.remove(&key);
                }
            }
        }
        Ok(LiteOutcome::Done)
    }

    /// Forgets the subscriptions of `client` of `group`, unless they are another user's.
    fn unsubscribe(&mut self, group: &str, client: &str, by: &LiteActor) -> LiteOutcome {
        if let Some(why) = self.not_owner(group, client, by) {
            return LiteOutcome::NotOwner(why);
        }
        self.subscriptions.remove(&(group.to_string(), client.to_string()));
        LiteOutcome::Done
    }
}

/// A [`LiteCommand::Sync`], borrowed.
#[derive(Clone, Copy)]
struct SyncRequest<'a> {
    group: &'a str,
    parent: &'a str,
    client: &'a str,
    action: SyncAction,
    lites: &'a [String],
    now_ms: i64,
    by: &'a LiteActor,
}

/// `group` (found by `group_of`) with its binding, if it is a lite group of `parent`; else the
/// outcome that says why not.
fn lite_group(
    group_of: &dyn Fn(&str) -> Option<GroupConfig>,
    group: &str,
    parent: &str,
) -> Result<(GroupConfig, LiteBinding), LiteOutcome> {
    let g = group_of(group).ok_or_else(|| LiteOutcome::GroupNotFound(group.to_string()))?;
    match g.lite.clone() {
        Some(b) if b.topic == parent => Ok((g, b)),
        _ => Err(LiteOutcome::IllegalGroup(format!("group {group} is not a lite group of topic {parent}"))),
    }
}

/// Whether a take still fits the lite topic: it continues from the current position with nothing
/// in flight (a lite topic goes out one batch at a time) and delivers only what it looked at.
fn take_applies(p: &LiteProgress, take: &LiteTake) -> bool {
    p.position == take.from
        && take.to >= take.from
        && p.inflight.is_empty()
        && take.deliver.iter().all(|o| (take.from..take.to).contains(o))
}

/// What a lite receive should do, planned from the leader's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LitePlan {
    pub pop: LitePop,
    /// Deliveries that used their last attempt, with their lite topic: they go to the
    /// dead-letter topic.
    pub dead: Vec<(String, Receipt)>,
    /// When the earliest delivery in flight of the lite topics looked at falls due.
    pub next_due_ms: Option<i64>,
    /// Whether every subscribed lite topic was looked at (else the scan limit stopped it).
    pub scanned_all: bool,
    /// Where in the subscriptions the next plan starts.
    pub next_first: usize,
    /// How many subscribed lite topics it looked at, of how many.
    pub scanned: usize,
    pub subscribed: usize,
}

impl LitePlan {
    pub fn delivers(&self) -> bool {
        !self.pop.redeliveries.is_empty() || self.pop.takes.iter().any(|t| t.to > t.from)
    }
}

/// A lite receive to plan.
pub struct LiteRequest<'a> {
    pub group: &'a GroupConfig,
    pub parent: &'a str,
    pub client: &'a str,
    /// Who receives (checked again at apply against the subscriptions' owner).
    pub by: &'a LiteActor,
    pub max_messages: usize,
    pub invisible_ms: i64,
    pub now_ms: i64,
    /// Where in the client's subscriptions to start, so each gets its turn.
    pub first: usize,
    /// The most subscribed lite topics to look at.
    pub scan_limit: usize,
}

impl LiteTables {
    /// Plans a receive for `r.client`: expired deliveries of its lite topics first, then new
    /// messages of lite topics with nothing in flight, in offset order. Reads only the client's
    /// subscriptions (at most its quota), never every lite topic of the parent. `gone` says
    /// whether the log no longer holds a position (retention): such messages are passed over.
    pub fn plan_pop(&self, r: &LiteRequest, gone: &dyn Fn(u64) -> bool) -> DiskResult<LitePlan> {
        let mut plan = LitePlan {
            pop: LitePop {
                group: r.group.name.clone(),
                parent: r.parent.to_string(),
                client: r.client.to_string(),
                by: r.by.clone(),
                now_ms: r.now_ms,
                invisible_ms: r.invisible_ms,
                takes: Vec::new(),
                redeliveries: Vec::new(),
            },
            dead: Vec::new(),
            next_due_ms: None,
            scanned_all: true,
            next_first: 0,
            scanned: 0,
            subscribed: 0,
        };
        let key = (r.group.name.clone(), r.client.to_string());
        let Some(sub) = self.subscriptions.get(&key) else { return Ok(plan) };
        let exclusive = r.group.lite.as_ref().is_some_and(|b| b.model == LiteModel::Exclusive);
        let lites: Vec<&String> = sub.lites.iter().collect();
        let start = r.first % lites.len().max(1);
        let mut budget = r.max_messages;
        let mut scanned = 0;
        for lite in lites[start..].iter().chain(&lites[..start]) {
            if budget == 0 || scanned == r.scan_limit {
                break;
            }
            scanned += 1;
            let Some(row) = self.topic(r.parent, lite)? else { continue };
            let p = self.progress_of(row.id, &r.group.name)?;
            if exclusive && p.owner.as_deref().is_some_and(|o| o != r.client) {
                continue;
            }
            if !p.inflight.is_empty() {
                let due = delivery::due(&p, r.now_ms, r.group.max_attempts, &mut budget, &mut plan.next_due_ms);
                let dead = |(offset, generation)| {
                    let channel = ChannelId::Lite(row.id);
                    let receipt = Receipt {
                        group: r.group.name.clone(),
                        topic: r.parent.to_string(),
                        channel,
                        offset,
                        generation,
                    };
                    (lite.to_string(), receipt)
                };
                plan.dead.extend(due.dead.into_iter().map(dead));
                let again =
                    |(offset, generation)| LiteRedelivery { lite: lite.to_string(), id: row.id, offset, generation };
                plan.pop.redeliveries.extend(due.redeliver.into_iter().map(again));
                continue;
            }
            if row.next <= p.position {
                continue;
            }
            let to = row.next.min(p.position.saturating_add(budget as u64));
            let mut deliver = Vec::new();
            for offset in p.position..to {
                if self.record(&row, offset)?.is_some_and(|position| !gone(position)) {
                    deliver.push(offset);
                }
            }
            budget -= deliver.len();
            plan.pop.takes.push(LiteTake { lite: lite.to_string(), id: row.id, from: p.position, to, deliver });
        }
        plan.scanned_all = scanned == lites.len();
        (plan.scanned, plan.subscribed) = (scanned, lites.len());
        plan.next_first = (start + scanned) % lites.len().max(1);
        Ok(plan)
    }

    /// `group`'s backlog on each lite topic of `parent` from `from` on (at most `limit` rows):
    /// (lite topic, messages stored, messages not yet taken, in flight).
    pub fn listing(
        &self,
        parent: &str,
        group: Option<&str>,
        from: &str,
        limit: usize,
    ) -> DiskResult<Vec<(String, LiteTopic, u64, usize)>> {
        let start = LiteName { parent: parent.to_string(), lite: from.to_string() };
        let rows = self.topics.range_while(&start, limit, |k| k.parent == parent)?;
        let mut out = Vec::with_capacity(rows.len());
        for (name, row) in rows {
            let (waiting, inflight) = match group {
                Some(g) => {
                    let p = self.progress_of(row.id, g)?;
                    (row.next.saturating_sub(p.position), p.inflight.len())
                }
                None => (row.next, 0),
            };
            out.push((name.lite, row, waiting, inflight));
        }
        Ok(out)
    }
}
