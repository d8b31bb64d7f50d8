//! Topics, lite topics and consumer groups.

use crate::admin::AdminServer;
use crate::admin::api::{GroupInfo, TopicInfo};
use crate::admin::error::AdminError;
use crate::broker::group::GroupConfig;
use crate::broker::held::HeldCounts;
use crate::broker::lite::LiteTopicInfo;
use crate::broker::pop::ConsumeCommand;
use crate::broker::{AdminCommand, Command, GroupFigures, TopicConfig};

/// The most lite topics one listing returns (it is paged by name).
const MAX_LITE_LISTING: usize = 10_000;

impl AdminServer {
    pub(super) async fn create_topic(&self, config: TopicConfig) -> Result<String, AdminError> {
        self.write(Command::Admin(AdminCommand::CreateTopic(config))).await
    }

    pub(super) async fn delete_topic(&self, name: String) -> Result<String, AdminError> {
        self.write(Command::Admin(AdminCommand::DeleteTopic { name })).await
    }

    /// Every topic with its queues' spans and held counts: each queue as the data group holding
    /// it has it (a dead-letter queue, kept by every data group, summed over them), held messages
    /// summed over the groups. A group this node holds a replica of is read here; another is
    /// asked of its leader.
    pub async fn list_topics(&self) -> Vec<TopicInfo> {
        self.topics_from(&self.figures().await)
    }

    /// [`Self::list_topics`] over the data groups this node holds a replica of only (what its
    /// `/metrics` report).
    pub fn list_topics_here(&self) -> Vec<TopicInfo> {
        self.topics_from(&self.figures_here())
    }

    /// The figures of each data group this node holds a replica of.
    fn figures_here(&self) -> Vec<(u32, GroupFigures)> {
        let held = self.data().all().into_iter().filter(|g| g.holds_replica());
        held.map(|g| (g.group().id().0, g.broker().figures())).collect()
    }

    /// Each data group's figures: read from this node's replica, or asked of the group's leader,
    /// all groups at once (a group that does not answer is left out).
    async fn figures(&self) -> Vec<(u32, GroupFigures)> {
        let asked = self.data().all().into_iter().map(async |group| {
            let id = group.group().id().0;
            match group.figures().await {
                Ok(figures) => Some((id, figures)),
                Err(e) => {
                    tracing::debug!(group = id, error = %e, "a data group's figures could not be read");
                    None
                }
            }
        });
        futures_util::future::join_all(asked).await.into_iter().flatten().collect()
    }

    fn topics_from(&self, figures: &[(u32, GroupFigures)]) -> Vec<TopicInfo> {
        self.parts
            .broker
            .topics()
            .into_iter()
            .map(|config| {
                let mut queues: Vec<(u32, u64, u64)> = (0..config.queues).map(|q| (q, 0, 0)).collect();
                let dead_letters = crate::broker::group::is_dead_letter_topic(&config.name);
                let mut held = HeldCounts::default();
                for (here, f) in figures {
                    for q in f.queues.iter().filter(|q| q.topic == config.name) {
                        let Some(row) = queues.get_mut(q.queue_id as usize) else { continue };
                        if dead_letters || config.group_of(q.queue_id) == *here {
                            row.1 += q.start;
                            row.2 += q.next;
                        }
                    }
                    for (_, c) in f.held.iter().filter(|(t, _)| *t == config.name) {
                        held.timers += c.timers;
                        held.open_halves += c.open_halves;
                    }
                }
                TopicInfo { config, queues, held }
            })
            .collect()
    }

    /// The lite topics of `parent` from `from` on, at most `limit`, with `group`'s backlog; and
    /// the name the next page starts from, if more follow.
    pub(super) fn lite_topics(
        &self,
        parent: &str,
        group: Option<&str>,
        from: &str,
        limit: usize,
    ) -> Result<(Vec<LiteTopicInfo>, Option<String>), AdminError> {
        let limit = limit.clamp(1, MAX_LITE_LISTING);
        // One more than shown: whether another page follows, and where it starts.
        // A lite topic's lite topics are kept in the one group holding its queues.
        let holder = match self.parts.broker.topic(parent) {
            Some(config) => self.data().of_queue(&config, 0)?,
            None => self.cluster.clone(),
        };
        let mut rows = holder.broker().lite_topics(parent, group, from, limit + 1)?;
        let next = if rows.len() > limit { rows.pop().map(|r| r.lite) } else { None };
        Ok((rows, next))
    }

    /// A configuration apply would refuse is refused here first, as an invalid argument.
    pub(super) async fn create_group(&self, config: GroupConfig) -> Result<String, AdminError> {
        config.validate().map_err(AdminError::invalid)?;
        self.write(Command::Admin(AdminCommand::CreateGroup(config))).await
    }

    pub(super) async fn delete_group(&self, name: String) -> Result<String, AdminError> {
        self.write(Command::Admin(AdminCommand::DeleteGroup { name })).await
    }

    /// Every group with its progress per topic, summed over the data groups (read as
    /// [`Self::list_topics`] reads them).
    pub async fn list_groups(&self) -> Vec<GroupInfo> {
        self.groups_from(&self.figures().await)
    }

    /// [`Self::list_groups`] over the data groups this node holds a replica of only.
    pub fn list_groups_here(&self) -> Vec<GroupInfo> {
        self.groups_from(&self.figures_here())
    }

    fn groups_from(&self, figures: &[(u32, GroupFigures)]) -> Vec<GroupInfo> {
        let mut progress: Vec<crate::broker::GroupProgress> = Vec::new();
        for p in figures.iter().flat_map(|(_, f)| f.progress.iter()) {
            match progress.iter_mut().find(|q| q.group == p.group && q.topic == p.topic) {
                Some(q) => {
                    q.lag += p.lag;
                    q.inflight += p.inflight;
                }
                None => progress.push(p.clone()),
            }
        }
        self.parts
            .broker
            .groups()
            .into_iter()
            .map(|config| GroupInfo {
                progress: progress.iter().filter(|p| p.group == config.name).cloned().collect(),
                config,
            })
            .collect()
    }

    /// On the leader of each data group holding the topic, whose state is current: moves the
    /// group to each queue's first offset at or after the time; says where each queue now
    /// starts. One entry per data group (each moves its own queues).
    /// `only`: the queues of that data group alone.
    pub(super) async fn reset_offset(
        &self,
        group: String,
        topic: String,
        time_ms: i64,
        only: Option<u32>,
    ) -> Result<String, AdminError> {
        let broker = &self.parts.broker;
        let no_topic = || AdminError::NotFound(format!("topic {topic} does not exist"));
        let config = broker.topic(&topic).ok_or_else(no_topic)?;
        if broker.group(&group).is_none() {
            return Err(AdminError::NotFound(format!("group {group} does not exist")));
        }
        let mut summary = Vec::new();
        let dead_letters = crate::broker::group::is_dead_letter_topic(&topic);
        let holders = self.data().holding(&config).into_iter();
        for holder in holders.filter(|h| only.is_none_or(|id| h.broker().partition().0 == id)) {
            let here = holder.broker().partition().0;
            // The epoch the group placed the topic with: a reset names it, so one worked out
            // before a deletion and re-creation changes nothing.
            let topic_epoch = holder.broker().topic_epoch(&topic).ok_or_else(no_topic)?;
            let mut positions = Vec::new();
            for q in (0..config.queues).filter(|q| dead_letters || config.group_of(*q) == here) {
                positions.push((q, holder.broker().offset_at_time(&topic, q, time_ms)?));
            }
            summary.extend(positions.iter().map(|(q, o)| (*q, *o)));
            let (group, topic) = (group.clone(), topic.clone());
            let command = Command::Consume(ConsumeCommand::ResetOffset { group, topic, topic_epoch, positions });
            self.write_in(&holder, command).await?;
        }
        summary.sort_unstable();
        Ok(summary.iter().map(|(q, o)| format!("queue {q} → {o}")).collect::<Vec<_>>().join(", "))
    }
}
