//! Topics, lite topics and consumer groups.

use crate::admin::AdminServer;
use crate::admin::api::{GroupInfo, TopicInfo};
use crate::admin::error::AdminError;
use crate::broker::group::GroupConfig;
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

    /// Every topic with its queues' spans and held counts, as this node has applied them.
    pub fn list_topics(&self) -> Vec<TopicInfo> {
        let broker = &self.parts.broker;
        let held = broker.held_counts();
        broker
            .topics()
            .into_iter()
            .map(|config| {
                let queues =
                    broker.queue_status(&config.name).into_iter().map(|q| (q.queue_id, q.start, q.next)).collect();
                let held = held.iter().find(|(t, _)| *t == config.name).map(|(_, c)| *c).unwrap_or_default();
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
        let mut rows = self.parts.broker.lite_topics(parent, group, from, limit + 1)?;
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

    /// Every group with its progress per topic, as this node has applied them.
    pub fn list_groups(&self) -> Vec<GroupInfo> {
        let broker = &self.parts.broker;
        let progress = broker.group_progress();
        broker
            .groups()
            .into_iter()
            .map(|config| GroupInfo {
                progress: progress.iter().filter(|p| p.group == config.name).cloned().collect(),
                config,
            })
            .collect()
    }

    /// On the leader, whose state is current: moves the group to each queue's first offset at or
    /// after the time; says where each queue now starts.
    pub(super) async fn reset_offset(&self, group: String, topic: String, time_ms: i64) -> Result<String, AdminError> {
        let broker = &self.parts.broker;
        let no_topic = || AdminError::NotFound(format!("topic {topic} does not exist"));
        let config = broker.topic(&topic).ok_or_else(no_topic)?;
        if broker.group(&group).is_none() {
            return Err(AdminError::NotFound(format!("group {group} does not exist")));
        }
        let mut positions = Vec::new();
        for q in 0..config.queues {
            positions.push((q, broker.offset_at_time(&topic, q, time_ms)?));
        }
        let summary = positions.iter().map(|(q, o)| format!("queue {q} → {o}")).collect::<Vec<_>>().join(", ");
        let topic_epoch = broker.topic_epoch(&topic).ok_or_else(no_topic)?;
        self.write(Command::Consume(ConsumeCommand::ResetOffset { group, topic, topic_epoch, positions })).await?;
        Ok(summary)
    }
}
