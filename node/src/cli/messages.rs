//! `rockraft message …`, `rockraft timer …` and `rockraft transaction …`: messages by queue
//! offset and by id; delayed messages and transactional halves.

use clap::Subcommand;
use rockraft_proto::rockraft as pb;

use super::{Admin, CliError, format_ms};
use crate::broker::group::is_dead_letter_topic;

#[derive(Subcommand)]
pub(super) enum TimerCmd {
    /// Pending timers, earliest first: due time, topic, queue, message id, recall handle.
    List {
        #[arg(long)]
        topic: Option<String>,
        /// The next page: the timers after this recall handle (the last one listed).
        #[arg(long)]
        after: Option<String>,
        /// At most this many (asked for 1000 at a time).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
}

#[derive(Subcommand)]
pub(super) enum TransactionCmd {
    /// Open halves (with `--all`, also committed and rolled back ones still kept).
    List {
        #[arg(long)]
        topic: Option<String>,
        #[arg(long)]
        all: bool,
        /// The next page: the halves after this transaction id (the last one listed).
        #[arg(long)]
        after: Option<String>,
        /// At most this many (asked for 1000 at a time).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Commits a half by message id: it is delivered. Also resumes one the checker rolled back.
    Commit {
        #[arg(long)]
        id: String,
    },
    /// Rolls a half back by message id: it is never delivered.
    Rollback {
        #[arg(long)]
        id: String,
    },
}

#[derive(Subcommand)]
pub(super) enum MessageCmd {
    /// One line per message: queue offset, message id, tag, keys, body length. A dead-letter
    /// topic (`%DLQ%group`) has a copy in every data group: each is listed after a
    /// `# data group N` line, unless `--data-group` names one.
    List {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        queue: u32,
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// At most this many (asked for 1000 at a time), per data group; a listing cut here says
        /// where to go on.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Read the answering node's own store (to compare replicas).
        #[arg(long)]
        local: bool,
        /// Only this data group's copy of a dead-letter topic.
        #[arg(long)]
        data_group: Option<u32>,
    },
    Get {
        #[arg(long)]
        id: String,
        #[arg(long)]
        local: bool,
    },
}

pub(super) async fn message(admin: &Admin, cmd: MessageCmd) -> Result<(), CliError> {
    match cmd {
        MessageCmd::List { topic, queue, from, limit, local, data_group } => {
            let copies = match data_group {
                None if is_dead_letter_topic(&topic) => {
                    (1..=admin.send(pb::GetSettingsRequest {}).await?.data_groups.max(1)).map(Some).collect()
                }
                one => vec![one],
            };
            let headed = copies.len() > 1;
            for data_group in copies {
                let flag = match data_group {
                    Some(g) if headed => {
                        println!("# data group {g}");
                        format!("--data-group {g} --from")
                    }
                    _ => "--from".to_string(),
                };
                let ask = |from: &u64, limit| pb::ListMessagesRequest {
                    topic: topic.clone(),
                    queue,
                    from: *from,
                    limit,
                    local,
                    data_group,
                };
                let rows = |r: pb::ListMessagesReply| (r.messages, Some(r.next_from).filter(|n| *n != 0));
                admin
                    .page_through(from, limit, &flag, ask, rows, |m| {
                        println!("{}\t{}\t{}\t{}\t{}", m.offset, m.message_id, m.tag, m.keys.join(","), m.body_len)
                    })
                    .await?;
            }
            Ok(())
        }
        MessageCmd::Get { id, local } => {
            let found = admin.send(pb::GetMessageRequest { message_id: id, local, data_group: None }).await?;
            if let Some(m) = found.message {
                println!(
                    "topic={} queue={} offset={} id={} tag={} keys={} body_len={} store_time_ms={}",
                    m.topic,
                    m.queue,
                    m.offset,
                    m.message_id,
                    m.tag,
                    m.keys.join(","),
                    m.body_len,
                    m.store_timestamp_ms
                );
            }
            if let Some(h) = found.held {
                print_held(h);
            }
            Ok(())
        }
    }
}

pub(super) async fn timer(admin: &Admin, cmd: TimerCmd) -> Result<(), CliError> {
    let TimerCmd::List { topic, after, limit } = cmd;
    list_held(admin, "TIMER", topic, false, after, limit).await
}

pub(super) async fn transaction(admin: &Admin, cmd: TransactionCmd) -> Result<(), CliError> {
    let (message_id, commit) = match cmd {
        TransactionCmd::List { topic, all, after, limit } => {
            return list_held(admin, "HALF", topic, all, after, limit).await;
        }
        TransactionCmd::Commit { id } => (id, true),
        TransactionCmd::Rollback { id } => (id, false),
    };
    println!("{}", admin.send(pb::ResolveTransactionRequest { message_id, commit, data_group: None }).await?.message);
    Ok(())
}

async fn list_held(
    admin: &Admin,
    kind: &str,
    topic: Option<String>,
    all: bool,
    after: Option<String>,
    limit: usize,
) -> Result<(), CliError> {
    let topic = topic.unwrap_or_default();
    let ask = |after: &String, limit| pb::ListHeldRequest {
        kind: kind.to_string(),
        topic: topic.clone(),
        all,
        after: after.clone(),
        limit,
        data_group: None,
    };
    let rows = |r: pb::ListHeldReply| (r.held, Some(r.next_after).filter(|n| !n.is_empty()));
    admin.page_through(after.unwrap_or_default(), limit, "--after", ask, rows, print_held).await
}

fn print_held(h: pb::HeldMessage) {
    let kind = h.kind.to_lowercase();
    let state = match h.state.as_str() {
        "" => "pending".to_string(),
        s => s.to_lowercase(),
    };
    println!(
        "{}\t{}\ttopic={}\tqueue={}\tid={}\t{}={}\tstate={}\tchecks={}\tbody_bytes={}",
        kind,
        format_ms(h.at_ms),
        h.topic,
        h.queue,
        h.message_id,
        if kind == "timer" { "recall_handle" } else { "transaction_id" },
        h.handle,
        state,
        h.checks,
        h.body_bytes
    );
}
