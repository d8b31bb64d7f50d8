//! Records this node's repairs (`metrics::RepairNote`) in the cluster's repair history: each is
//! proposed to the metadata group, from wherever that group's leader is, until it is stored or
//! refused. A proposal that fails is tried again after a growing pause.

use std::time::Duration;

use crate::broker::repair::{Repair, RepairedPart};
use crate::broker::{AdminCommand, Command, Reply};
use crate::cluster::Cluster;
use crate::metrics::{Meters, RepairNote, Repaired};

const FIRST_BACK_OFF: Duration = Duration::from_millis(500);
const MAX_BACK_OFF: Duration = Duration::from_secs(30);

pub async fn record_repairs(metadata: Cluster, meters: Meters) {
    let node = metadata.id();
    loop {
        for note in meters.take_repairs().await {
            let record = repair_of(node, note);
            let mut back_off = FIRST_BACK_OFF;
            loop {
                match metadata.write(&Command::Admin(AdminCommand::RecordRepair(record.clone()))).await {
                    Ok(Reply::Applied) => break,
                    Ok(other) => {
                        tracing::warn!(key = %record.key(), reply = ?other, "the repair history refused a record");
                        break;
                    }
                    Err(e) => {
                        // One line per attempt, and the attempts back off to one per 30 s.
                        tracing::warn!(key = %record.key(), error = %e, retry_in = ?back_off, "repair not recorded yet");
                        tokio::time::sleep(back_off).await;
                        back_off = (back_off * 2).min(MAX_BACK_OFF);
                    }
                }
            }
        }
    }
}

fn repair_of(node: u64, n: RepairNote) -> Repair {
    let part = match n.repaired {
        Repaired::LogRecords => RepairedPart::LogRecords,
        Repaired::Snapshot => RepairedPart::Snapshot,
        Repaired::QueueRecord => RepairedPart::QueueRecord,
    };
    Repair {
        node,
        group: n.group,
        part,
        first: n.first,
        last: n.last.max(n.first),
        source: n.source,
        place: within(n.place, crate::broker::repair::MAX_PLACE),
        began_ms: n.began_ms,
        done_ms: n.done_ms.max(n.began_ms),
    }
}

/// `text` cut to at most `max` bytes, at a character boundary (apply refuses a longer place).
fn within(mut text: String, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}
