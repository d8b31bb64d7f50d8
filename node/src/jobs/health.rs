//! Fail-stop: once the log or the broker state could not be written in a way that leaves the
//! disk unknown (a failed fsync), or Raft itself stopped on a storage error, the node must stop
//! acknowledging and exit rather than carry on (the lesson of PostgreSQL's and etcd's
//! "fsyncgate"). This job notices and asks the node to stop.

use std::time::Duration;

use crate::broker::Broker;
use crate::jobs::Jobs;
use crate::raft::Group;
use crate::store::LogReader;

/// A failed write already refuses every later one (the log and the state check their failure
/// first): this only bounds how long the process lingers before it exits.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// The first fatal condition of this node, if any.
pub fn fatal_condition(group: &Group, broker: &Broker, log: &LogReader) -> Option<String> {
    if let Some(why) = log.failure() {
        return Some(format!("the log stopped after a failed write: {why}"));
    }
    if let Some(why) = broker.failure() {
        return Some(format!("the broker state stopped after a failed write: {why}"));
    }
    group.fatal().map(|fatal| format!("raft stopped: {fatal}"))
}

/// Checks for a fatal condition every [`CHECK_EVERY`] and reports it to [`Jobs::fail_stop`].
pub async fn watch_health(group: Group, broker: Broker, log: LogReader, jobs: Jobs) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    loop {
        tick.tick().await;
        if let Some(why) = fatal_condition(&group, &broker, &log) {
            tracing::error!(reason = %why, "stopping this node");
            jobs.fail_stop(why);
            return;
        }
    }
}
