//! Topics, lite topics and consumer groups.

use crate::admin::AdminServer;
use crate::admin::api::{GroupInfo, TopicInfo};
use crate::admin::error::AdminError;
use crate::broker::group::GroupConfig;
use crate::broker::held::HeldCounts;
use crate::broker::lite::LiteTopicInfo;
use crate::broker::pop::ConsumeCommand;
use crate::broker::{AdminCommand, Command, TopicConfig};

/// The most lite topics one listing returns (it is paged by name).
const MAX_LITE_LISTING: usize = 10_000;

impl AdminServer {
    pub(super) async fn create_topic(&self, config: TopicConfig) -> Result<String, AdminError> {
        self.write(Command::Admin(AdminCommand::CreateTopic(config))).await
    }

    pub(super) async fn delete_topic(&self, name: String) -> Result<String, AdminError> {
        self.write(Command::Admin(AdminCommand::DeleteTopic { name })).await
    }

    /// Every topic with its queues' spans and held counts, as this node has applied them: each
    /// queue as the data group holding it has it (a dead-letter queue, kept by every data group,
    /// summed over them), held messages summed over the groups.
    pub fn list_topics(&self) -> Vec<TopicInfo> {
        let data = self.data();
        let groups = data.all();
        let held: Vec<_> = groups.iter().flat_map(|g| g.broker().held_counts()).collect();
        self.parts
            .broker
            .topics()
            .into_iter()
            .map(|config| {
                let mut queues: Vec<(u32, u64, u64)> = (0..config.queues).map(|q| (q, 0, 0)).collect();
                for group in data.holding(&config) {
                    let here = group.broker().partition().0;
                    let dead_letters = crate::broker::group::is_dead_letter_topic(&config.name);
                    for q in group.broker().queue_status(&config.name) {
                        let Some(row) = queues.get_mut(q.queue_id as usize) else { continue };
                        if dead_letters || config.group_of(q.queue_id) == here {
                            row.1 += q.start;
                            row.2 += q.next;
                        }
                    }
                }
                let mine = held.iter().filter(|(t, _)| *t == config.name).map(|(_, c)| c);
                let held = mine.fold(HeldCounts::default(), |sum, c| HeldCounts {
                    timers: sum.timers + c.timers,
                    open_halves: sum.open_halves + c.open_halves,
                });
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

    /// Every group with its progress per topic, as this node has applied them, summed over the
    /// data groups.
    pub fn list_groups(&self) -> Vec<GroupInfo> {
        let mut progress: Vec<crate::broker::GroupProgress> = Vec::new();
        for group in self.data().all() {
            for p in group.broker().group_progress() {
                match progress.iter_mut().find(|q| q.group == p.group && q.topic == p.topic) {
                    Some(q) => {
                        q.lag += p.lag;
                        q.inflight += p.inflight;
                    }
                    None => progress.push(p),
                }
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
    pub(super) async fn reset_offset(&self, group: String, topic: String, time_ms: i64) -> Result<String, AdminError> {
        let broker = &self.parts.broker;
        let no_topic = || AdminError::NotFound(format!("topic {topic} does not exist"));
        let config = broker.topic(&topic).ok_or_else(no_topic)?;
        if broker.group(&group).is_none() {
            return Err(AdminError::NotFound(format!("group {group} does not exist")));
        }
        let mut summary = Vec::new();
        let dead_letters = crate::broker::group::is_dead_letter_topic(&topic);
        for holder in self.data().holding(&config) {
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
