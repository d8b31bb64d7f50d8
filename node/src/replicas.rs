//! The Raft groups this node holds a replica of: the metadata group (group 0: topics, consumer
//! groups, access, plugins, settings) and every data group the metadata lists (groups 1 to
//! `ClusterSettings::data_groups`, only ever growing). A data directory of layout 2, written
//! before the metadata had a group of its own, keeps the metadata in group 1 with the first
//! data partition (`store::layout`).
//!
//! Each replica has its own directory (`store::layout`), its own Raft (its own ticks, heartbeats
//! and elections, so one group's snapshot or slow disk does not stall another's), its own cluster
//! handle and its own jobs. A node opens the replicas its copy of the metadata lists when it
//! starts, and those the metadata adds while it runs ([`Replicas::follow_metadata`]); the metadata
//! group's leader starts each new group with the metadata group's voters, and each group's leader
//! hands the leadership to the node whose turn it is ([`crate::jobs::balance_leaders`]).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::admin::NodeConfig;
use crate::broker::transaction::TransactionChecker;
use crate::broker::{Broker, BrokerOptions};
use crate::cluster::{Cluster, ClusterOptions};
use crate::jobs::ScrubOptions;
use crate::jobs::{CheckOptions, Jobs, RetentionOptions};
use crate::plugin::PluginHost;
use crate::plugin::checker::PluginChecker;
use crate::raft::{Dialer, Group, GroupId, GroupOptions, GroupRegistry, LogStore, Network, RaftGroups, StateMachine};
use crate::store::layout::DataLayout;
use crate::store::record::HEADER_LEN;

/// Why a group's replica could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Log(#[from] crate::store::StoreError),
    #[error(transparent)]
    Broker(#[from] crate::broker::BrokerError),
    #[error("{0}")]
    Snapshot(#[source] std::io::Error),
    #[error("starting raft: {0}")]
    Raft(#[source] crate::raft::GroupError),
}

/// How often a node looks whether the metadata lists a data group it does not run yet.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);
/// Pause after a replica failed to open, doubled up to [`MAX_OPEN_BACK_OFF`].
const OPEN_BACK_OFF: Duration = Duration::from_secs(1);
const MAX_OPEN_BACK_OFF: Duration = Duration::from_secs(30);

/// One Raft group's replica on this node: the way to the group's leader, the state its log
/// built, and the log.
#[derive(Clone)]
pub struct Replica {
    pub cluster: Cluster,
    pub broker: Broker,
    pub log: crate::store::LogReader,
    /// `true` while this node leads the group: its leader-only jobs run then.
    pub leadership: tokio::sync::watch::Receiver<bool>,
}

/// What every replica on a node shares.
pub struct Context {
    pub config: Arc<NodeConfig>,
    pub layout: DataLayout,
    /// How calls to other members prove this node is one; one for every group, so they share
    /// each member's refusal gate.
    pub dialer: Dialer,
    pub plugins: Arc<PluginHost>,
    pub meters: crate::metrics::Meters,
    pub sessions: Arc<crate::sessions::ProducerSessions>,
    pub jobs: Jobs,
}

/// The replicas this node runs. Clones share them.
#[derive(Clone)]
pub struct Replicas {
    inner: Arc<Inner>,
}

struct Inner {
    context: Context,
    /// What the Raft service serves each group with.
    raft: RaftGroups,
    /// What the peer service serves each group with.
    clusters: GroupRegistry<Cluster>,
    /// This node's free space and the cluster's disk alarm, for every group.
    disk: Arc<crate::cluster::disk::DiskWatch>,
    /// The group holding the metadata here (`DataLayout::metadata_group`).
    metadata: GroupId,
    /// Every replica opened, by group. Written only after a replica is open: no lock is held
    /// while one opens.
    open: RwLock<BTreeMap<GroupId, Replica>>,
}

impl Replicas {
    /// Opens the metadata group's replica, then those of the data groups its metadata lists.
    pub async fn open(context: Context) -> Result<Replicas, OpenError> {
        let metadata = GroupId(context.layout.metadata_group());
        let config = &context.config;
        let disk = Arc::new(crate::cluster::disk::DiskWatch::new(config.data_dir.clone(), config.storage.watermarks()));
        let replicas = Replicas {
            inner: Arc::new(Inner {
                metadata,
                disk,
                context,
                raft: RaftGroups::default(),
                clusters: GroupRegistry::default(),
                open: RwLock::default(),
            }),
        };
        let replica = replicas.open_replica(metadata).await?;
        replicas.spawn_metadata_jobs(&replica);
        for id in replicas.missing() {
            replicas.open_replica(id).await?;
        }
        Ok(replicas)
    }

    /// The replica of the group holding the metadata.
    pub fn metadata(&self) -> Replica {
        self.get(self.inner.metadata).expect("the metadata group is opened first")
    }

    pub fn get(&self, id: GroupId) -> Option<Replica> {
        self.inner.open.read().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// Every replica opened, by group.
    pub fn all(&self) -> BTreeMap<GroupId, Replica> {
        self.inner.open.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The replicas as the Raft service serves them.
    pub fn raft_groups(&self) -> RaftGroups {
        self.inner.raft.clone()
    }

    /// The cluster handle of each group, as the peer service and the operator API find them.
    pub fn clusters(&self) -> GroupRegistry<Cluster> {
        self.inner.clusters.clone()
    }

    /// The groups as the data path finds them.
    pub fn groups(&self) -> crate::cluster::Groups {
        crate::cluster::Groups::new(self.clusters(), self.inner.metadata).expect("the metadata group is opened first")
    }

    /// The data groups the metadata lists that this node does not run yet.
    fn missing(&self) -> Vec<GroupId> {
        let listed = self.metadata().broker.settings().data_groups;
        let open = self.inner.open.read().unwrap_or_else(|p| p.into_inner());
        (GroupId::FIRST.0..=listed).map(GroupId).filter(|id| !open.contains_key(id)).collect()
    }

    /// Opens the replicas of data groups the metadata adds while the node runs (a job: the only
    /// one that opens replicas after start, so no two open the same group).
    pub async fn follow_metadata(self) {
        let mut back_off = OPEN_BACK_OFF;
        loop {
            let mut failed = false;
            for id in self.missing() {
                match self.open_replica(id).await {
                    Ok(_) => tracing::info!(group = id.0, "opened a replica of a data group the metadata added"),
                    Err(e) => {
                        tracing::warn!(group = id.0, error = %e, "opening a data group's replica failed; trying again");
                        failed = true;
                        break;
                    }
                }
            }
            if failed {
                tokio::time::sleep(back_off).await;
                back_off = (back_off * 2).min(MAX_OPEN_BACK_OFF);
            } else {
                back_off = OPEN_BACK_OFF;
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        }
    }

    /// Whom group `id`'s replica asks for the records or snapshot it lost: the other members its
    /// last applied membership names. A replica that applied none yet (damage in its very first
    /// entries) asks the cluster's members, as the metadata group's replica here knows them, or
    /// else as the configuration lists them: what they send is checked against this node's own
    /// records before it is kept (`raft/repair.rs`).
    fn repair_members(
        &self,
        id: GroupId,
        broker: &Broker,
    ) -> Result<Vec<(crate::raft::NodeId, crate::raft::NodeInfo)>, OpenError> {
        let me = self.inner.context.config.node_id;
        let members = crate::raft::other_members(broker, me).map_err(OpenError::Snapshot)?;
        if !members.is_empty() {
            return Ok(members);
        }
        if id != self.inner.metadata
            && let Some(metadata) = self.get(self.inner.metadata)
        {
            let members = crate::raft::other_members(&metadata.broker, me).map_err(OpenError::Snapshot)?;
            if !members.is_empty() {
                return Ok(members);
            }
        }
        let configured = self.inner.context.config.members.iter().filter(|m| m.id != me);
        Ok(configured
            .map(|m| {
                let info = crate::raft::NodeInfo {
                    raft_addr: m.raft_addr.clone(),
                    client_addr: m.client_addr.clone(),
                    admin_addr: m.admin_addr.clone(),
                    rack: m.rack.clone(),
                };
                (m.id, info)
            })
            .collect())
    }

    /// Opens group `id`'s storage under its directory, starts its Raft, registers it with the
    /// Raft and peer services, and starts its jobs.
    async fn open_replica(&self, id: GroupId) -> Result<Replica, OpenError> {
        let Context { config, layout, dialer, jobs, meters, plugins, sessions } = &self.inner.context;
        let dir = layout.group(id.0);
        let mut log_store = LogStore::open(config.log_config(dir.log()))?;
        let broker = Broker::open(
            BrokerOptions {
                dir: dir.broker(),
                cq_records_per_file: config.storage.consume_queue_records_per_file,
                message_index_entries_per_file: crate::store::DEFAULT_MESSAGE_INDEX_ENTRIES_PER_FILE,
                checkpoint_interval: Duration::from_millis(config.broker.checkpoint_interval_ms),
                partition: crate::broker::position::PartitionId(id.0),
                holds_metadata: id == self.inner.metadata,
            },
            log_store.commit_log(),
        )?;
        broker.report_repairs_to(meters.clone());
        let log = log_store.commit_log();
        if let Some(why) = crate::raft::damaged_snapshot(&dir.snapshot()) {
            // The snapshot is what a lagging member starts from, and the base of the next one:
            // a damaged file is replaced by another member's before anything reads it.
            tracing::error!(group = id.0, %why, "the snapshot file is damaged; fetching another member's");
            meters.corruption_found(1);
            let members = self.repair_members(id, &broker)?;
            let sources = crate::raft::repair::Sources { group: id, members, dialer };
            let purged = log.bounds().first_index.checked_sub(1);
            let began_ms = crate::simulation::system_ms();
            let (meta, data, from) = crate::raft::repair::fetch_snapshot(&sources, purged).await;
            crate::raft::replace_snapshot(&dir.snapshot(), &meta, &data).map_err(OpenError::Snapshot)?;
            tracing::info!(group = id.0, at = ?meta.last_log_id, from, "the damaged snapshot file was replaced by another member's");
            let at = meta.last_log_id.map_or(0, |l| l.index);
            meters.corruption_repaired(crate::metrics::RepairNote {
                group: id.0,
                repaired: crate::metrics::Repaired::Snapshot,
                first: at,
                last: at,
                source: Some(from),
                place: dir.snapshot().display().to_string(),
                began_ms,
                done_ms: crate::simulation::system_ms(),
            });
        }
        let state_machine = StateMachine::open(broker.clone(), log.clone(), dir.snapshot())
            .map_err(OpenError::Snapshot)?
            .with_meters(meters.clone());
        // Recovery walks only the tail segment whole; Raft reads every entry after the last
        // checkpoint as it starts, and the ends of each term: those are read here first, so
        // damage among them is filled before the group starts instead of stopping Raft.
        let applied = broker.last_applied().map_or(0, |a| a.index + 1);
        loop {
            // What Raft reads as it starts, read first; an error is damage now known (below).
            let _ = log_store.read_as_raft_starts(applied).await;
            let damage = log_store.commit_log_mut().damage();
            if damage.is_empty() {
                break;
            }
            // Records this node had synced that no longer read back: the group starts (votes,
            // leads) only once it holds them again.
            meters.corruption_found(damage.iter().map(|d| d.end_index - d.first_index).sum());
            let members = self.repair_members(id, &broker)?;
            let sources = crate::raft::repair::Sources { group: id, members, dialer };
            crate::raft::repair::fill_all(log_store.commit_log_mut(), &sources, meters).await;
        }
        log_store.set_read_repair(crate::raft::ReadRepair {
            group: id,
            me: config.node_id,
            broker: broker.clone(),
            dialer: dialer.clone(),
            meters: meters.clone(),
        });
        let network = Network { dialer: dialer.clone(), group: id };
        let group =
            Group::start(&group_options(config), network, log_store, state_machine).await.map_err(OpenError::Raft)?;
        let options = ClusterOptions {
            node_id: config.node_id,
            max_entry_bytes: max_entry_bytes(config.storage.segment_size),
            plugins: Arc::clone(plugins),
            dialer: dialer.clone(),
            election_timeout_max: Duration::from_millis(config.raft.election_timeout_max_ms),
            meters: meters.clone(),
            sessions: Arc::clone(sessions),
            disk: Arc::clone(&self.inner.disk),
            metadata: (id != self.inner.metadata).then(|| self.metadata().broker),
            cluster_members: (id != self.inner.metadata).then(|| self.metadata().cluster.group().clone()),
        };
        let cluster = Cluster::new(group, broker.clone(), options);
        self.inner.raft.insert(id, cluster.group().raft().clone(), cluster.leader_contact(), log.clone());
        self.inner.clusters.insert(id, cluster.clone());

        jobs.spawn("checkpoints", in_group(id, crate::jobs::checkpoints(broker.clone())));
        let storage = &config.storage;
        let retention = RetentionOptions {
            max_age: Duration::from_secs_f64(storage.retention_hours.max(0.0) * 3600.0),
            check_every: Duration::from_secs_f64(storage.retention_check_secs.max(0.1)),
            disk_budget_bytes: storage.disk_budget_bytes,
        };
        let health = crate::jobs::watch_health(cluster.group().clone(), broker.clone(), log.clone(), jobs.clone());
        jobs.spawn("health", in_group(id, health));
        let purging = crate::jobs::retention(cluster.clone(), broker.clone(), meters.clone(), log.clone(), retention);
        jobs.spawn("retention", in_group(id, purging));
        let scrubbing = ScrubOptions {
            bytes_per_sec: storage.scrub_mb_per_sec * 1e6,
            pause: Duration::from_secs_f64(storage.scrub_pause_secs.max(1.0)),
        };
        let scrub = crate::jobs::scrub(cluster.clone(), log.clone(), meters.clone(), dialer.clone(), scrubbing);
        jobs.spawn("scrub", in_group(id, scrub));
        jobs.spawn("leaders", in_group(id, crate::jobs::watch_leaders(cluster.clone(), meters.clone())));
        let leadership = jobs.follow_leadership(&cluster);
        let replica = Replica { cluster, broker, log, leadership };
        if id != GroupId::METADATA {
            self.spawn_data_jobs(&replica);
        }
        self.inner.open.write().unwrap_or_else(|p| p.into_inner()).insert(id, replica.clone());
        Ok(replica)
    }

    /// The leader-only jobs of the group that holds the metadata: the first key for receipt
    /// handles, and starting the data groups the metadata adds.
    fn spawn_metadata_jobs(&self, replica: &Replica) {
        let Context { jobs, meters, .. } = &self.inner.context;
        jobs.spawn("repair history", crate::jobs::record_repairs(replica.cluster.clone(), meters.clone()));
        let (keyed, keys, id) = (replica.cluster.clone(), replica.broker.clone(), replica.cluster.group().id());
        jobs.spawn_leader("handle key", replica.leadership.clone(), move || {
            in_group(id, crate::jobs::first_handle_key(keyed.clone(), keys.clone()))
        });
        let (starting, metadata, clusters) = (replica.cluster.clone(), replica.broker.clone(), self.clusters());
        jobs.spawn_leader("data groups", replica.leadership.clone(), move || {
            in_group(id, crate::jobs::start_data_groups(starting.clone(), metadata.clone(), clusters.clone()))
        });
    }

    /// The leader-only jobs of a group that holds queues: its timers, its metadata placement, its
    /// lite topics' upkeep, its transactions' checks, and handing its leadership to the node
    /// whose turn it is.
    fn spawn_data_jobs(&self, replica: &Replica) {
        let Context { config, jobs, meters, plugins, .. } = &self.inner.context;
        let (leadership, id) = (&replica.leadership, replica.cluster.group().id());
        // The metadata: the metadata group's state (this replica's own, in layout 2's group 1).
        let (metadata, members) = match id == self.inner.metadata {
            true => (replica.broker.clone(), replica.cluster.clone()),
            false => {
                let (following, members) = (replica.cluster.clone(), self.metadata().cluster);
                jobs.spawn_leader("members", leadership.clone(), move || {
                    in_group(id, crate::jobs::follow_membership(following.clone(), members.clone()))
                });
                (self.metadata().broker, self.metadata().cluster)
            }
        };
        let (placing, placed_from) = (replica.cluster.clone(), metadata.clone());
        jobs.spawn_leader("placement", leadership.clone(), move || {
            in_group(id, crate::jobs::placement(placing.clone(), placed_from.clone()))
        });
        let (timers, held, counted) = (replica.cluster.clone(), replica.broker.clone(), meters.clone());
        jobs.spawn_leader("timers", leadership.clone(), move || {
            in_group(id, crate::jobs::fire_timers(timers.clone(), held.clone(), counted.clone()))
        });
        let (lite, lites) = (replica.cluster.clone(), replica.broker.clone());
        jobs.spawn_leader("lite topics", leadership.clone(), move || {
            in_group(id, crate::jobs::lite_upkeep(lite.clone(), lites.clone()))
        });
        let broker_config = &config.broker;
        // Its plugin bindings are in the metadata.
        let checker: Arc<dyn TransactionChecker> = Arc::new(PluginChecker::new(
            Arc::clone(plugins),
            metadata.clone(),
            Duration::from_secs(broker_config.transaction_max_age_secs),
            broker_config.transaction_max_checks,
        ));
        let checks = CheckOptions {
            interval: Duration::from_secs(broker_config.transaction_check_interval_secs.max(1)),
            max_age: Duration::from_secs(broker_config.transaction_max_age_secs),
        };
        let (checking, halves, checked) = (replica.cluster.clone(), replica.broker.clone(), meters.clone());
        jobs.spawn_leader("transaction checks", leadership.clone(), move || {
            let (checker, checks) = (Arc::clone(&checker), checks.clone());
            in_group(
                id,
                crate::jobs::check_transactions(checking.clone(), halves.clone(), checked.clone(), checker, checks),
            )
        });
        let balancing = replica.cluster.clone();
        jobs.spawn_leader("leader balance", leadership.clone(), move || {
            in_group(id, crate::jobs::balance_leaders(balancing.clone(), metadata.clone(), members.clone()))
        });
    }
}

/// The largest command one log entry holds: a segment, less the segment file's header (64 bytes,
/// private to `store/`) and one record header.
fn max_entry_bytes(segment_size: u64) -> u64 {
    segment_size.saturating_sub(64 + HEADER_LEN as u64)
}

fn group_options(config: &NodeConfig) -> GroupOptions {
    GroupOptions {
        node_id: config.node_id,
        name: config.group.clone(),
        heartbeat_ms: config.raft.heartbeat_ms,
        election_timeout_min_ms: config.raft.election_timeout_min_ms,
        election_timeout_max_ms: config.raft.election_timeout_max_ms,
    }
}

/// A group's job, its log lines naming the group when debug logging is on (`RUST_LOG=debug`;
/// at the default level the lines that matter name it themselves: a span of that level would log
/// a line each time a leader job stops).
fn in_group<F>(id: GroupId, job: F) -> tracing::instrument::Instrumented<F> {
    tracing::Instrument::instrument(job, tracing::debug_span!("group", id = id.0))
}
