//! `rockraft topic …` and `rockraft group …`: topics, lite topics and consumer groups.

use clap::Subcommand;
use rockraft_proto::rockraft as pb;

use super::{Admin, CliError, Listing, parse_time};
use crate::broker::TopicKind;

#[derive(Subcommand)]
pub(super) enum TopicCmd {
    Create {
        name: String,
        #[arg(long, default_value_t = 4)]
        queues: u32,
        #[arg(long = "type", default_value = "normal")]
        kind: TopicKind,
        /// Lite parents (`--type lite`): minutes after its last write that a lite topic is
        /// deleted, with its offsets and subscriptions.
        #[arg(long, default_value_t = crate::broker::lite::DEFAULT_LITE_TTL_MINUTES)]
        lite_ttl_minutes: u32,
    },
    /// The lite topics of a lite parent, with their messages and, for a group, its backlog.
    Lite {
        parent: String,
        /// Show this group's backlog (not taken yet) and in-flight count per lite topic.
        #[arg(long)]
        group: Option<String>,
        /// List lite topics from this name on (where a listing cut at `--limit` says to go on).
        #[arg(long, default_value = "")]
        from: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Each topic: kind, queues, messages stored, timers pending and open halves.
    List(Listing),
    Delete {
        name: String,
    },
}

#[derive(Subcommand)]
pub(super) enum GroupCmd {
    Create {
        name: String,
        /// Deliver each message group of a FIFO topic one message at a time, in order.
        #[arg(long)]
        fifo: bool,
        /// Deliveries before a message goes to the dead-letter topic `%DLQ%<name>`.
        #[arg(long, default_value_t = crate::broker::group::DEFAULT_MAX_ATTEMPTS)]
        max_attempts: u32,
        /// On priority topics: the percentage of receives that take the highest priority first;
        /// the others take from every queue in turn, so low priorities are not starved.
        #[arg(long, default_value_t = crate::broker::group::FULL_PRIORITY,
              value_parser = clap::value_parser!(u8).range(0..=100))]
        priority_factor: u8,
        /// Make this a lite consumer group of this lite parent topic.
        #[arg(long)]
        lite_bind_topic: Option<String>,
        /// Lite groups: `shared` (each message to one subscriber) or `exclusive` (the newest
        /// subscriber of a lite topic takes it over).
        #[arg(long, default_value = "shared")]
        lite_model: crate::broker::lite::LiteModel,
        /// Lite groups: how many lite topics one client may subscribe to.
        #[arg(long, default_value_t = crate::broker::lite::DEFAULT_LITE_QUOTA)]
        lite_quota: u32,
    },
    /// Each group, and per topic it consumed: lag (messages not acked yet) and in-flight count.
    List(Listing),
    Delete {
        name: String,
    },
    /// Replay (or skip) to the first message stored at or after a time; nothing stays in flight.
    ResetOffset {
        group: String,
        #[arg(long)]
        topic: String,
        /// RFC 3339 (`2026-11-30T04:00:00Z`) or milliseconds since the Unix epoch.
        #[arg(long)]
        to_time: String,
    },
}

pub(super) async fn topic(admin: &Admin, cmd: TopicCmd) -> Result<(), CliError> {
    let done = match cmd {
        TopicCmd::Create { name, queues, kind, lite_ttl_minutes } => {
            let lite_ttl_minutes = (kind == TopicKind::Lite).then_some(lite_ttl_minutes);
            let kind = kind.to_string().to_uppercase();
            admin.send(pb::CreateTopicRequest { name, queues, kind, lite_ttl_minutes }).await?
        }
        TopicCmd::Delete { name } => admin.send(pb::DeleteTopicRequest { name }).await?,
        TopicCmd::List(listing) => {
            let ask = |after: &String, limit| pb::ListTopicsRequest { after: after.clone(), limit };
            let rows = |r: pb::ListTopicsReply| (r.topics, Some(r.next_after).filter(|n| !n.is_empty()));
            return admin
                .page_through(listing.after, listing.limit, "--after", ask, rows, |t| {
                    println!(
                        "{}\t{}\tqueues={}\tmessages={}\ttimers={}\topen_halves={}{}",
                        t.name,
                        t.kind.to_lowercase(),
                        t.queues,
                        t.messages,
                        t.timers,
                        t.open_halves,
                        groups_column(&t.groups)
                    )
                })
                .await;
        }
        TopicCmd::Lite { parent, group, from, limit } => {
            let with_group = group.is_some();
            let group = group.unwrap_or_default();
            let ask = |from: &String, limit| pb::ListLiteTopicsRequest {
                parent: parent.clone(),
                group: group.clone(),
                from: from.clone(),
                limit,
            };
            let rows = |r: pb::ListLiteTopicsReply| (r.topics, Some(r.next_from).filter(|n| !n.is_empty()));
            return admin
                .page_through(from, limit, "--from", ask, rows, |r| match with_group {
                    true => println!(
                        "{}\tmessages={}\tbacklog={}\tinflight={}\tlast_write={}",
                        r.name, r.messages, r.backlog, r.inflight, r.last_write_ms
                    ),
                    false => println!("{}\tmessages={}\tlast_write={}", r.name, r.messages, r.last_write_ms),
                })
                .await;
        }
    };
    println!("{}", done.message);
    Ok(())
}

pub(super) async fn group(admin: &Admin, cmd: GroupCmd) -> Result<(), CliError> {
    let done = match cmd {
        GroupCmd::Create { name, fifo, max_attempts, priority_factor, lite_bind_topic, lite_model, lite_quota } => {
            let lite = lite_bind_topic.is_some();
            let request = pb::CreateGroupRequest {
                name,
                fifo,
                max_attempts,
                priority_factor: Some(u32::from(priority_factor)),
                lite_bind_topic: lite_bind_topic.unwrap_or_default(),
                lite_model: if lite { lite_model.to_string() } else { String::new() },
                lite_quota: lite.then_some(lite_quota),
            };
            admin.send(request).await?
        }
        GroupCmd::Delete { name } => admin.send(pb::DeleteGroupRequest { name }).await?,
        GroupCmd::ResetOffset { group, topic, to_time } => {
            let time_ms = parse_time(&to_time)?;
            admin.send(pb::ResetOffsetRequest { group, topic, time_ms, data_group: None }).await?
        }
        GroupCmd::List(listing) => {
            let ask = |after: &String, limit| pb::ListGroupsRequest { after: after.clone(), limit };
            let rows = |r: pb::ListGroupsReply| (r.groups, Some(r.next_after).filter(|n| !n.is_empty()));
            return admin.page_through(listing.after, listing.limit, "--after", ask, rows, print_group).await;
        }
    };
    println!("{}", done.message);
    Ok(())
}

fn print_group(g: pb::Group) {
    let kind = if g.fifo { "fifo" } else { "normal" };
    let (name, attempts, factor) = (&g.name, g.max_attempts, g.priority_factor);
    let lite = match g.lite_bind_topic.is_empty() {
        false => {
            format!("\tlite_bind_topic={}\tlite_model={}\tlite_quota={}", g.lite_bind_topic, g.lite_model, g.lite_quota)
        }
        true => String::new(),
    };
    println!("{name}\t{kind}\tmax_attempts={attempts}\tpriority_factor={factor}{lite}");
    for p in g.progress {
        println!("  topic={}\tlag={}\tinflight={}", p.topic, p.lag, p.inflight);
    }
}

/// `\tgroups=2,3,1,2` (queue 0's group first) when a topic's queues are spread over data groups;
/// nothing when they are all in the first.
fn groups_column(groups: &[u32]) -> String {
    match groups.is_empty() {
        true => String::new(),
        false => format!("\tgroups={}", groups.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
    }
}
