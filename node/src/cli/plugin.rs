//! `rockraft plugin …`: register, list, bind and remove plugins on a cluster, and `eval`, which
//! runs a plugin on one message locally (no node needed).

use std::path::PathBuf;

use bytes::Bytes;
use clap::Subcommand;
use rockraft_plugin_sdk::Decision;
use rockraft_proto::rockraft::StoredMessage;
use serde::Deserialize;

use rockraft_proto::rockraft as pb;

use super::{Admin, CliError, Listing};
use crate::broker::{MessageFilter, StoredEntry};
use crate::plugin::subscription::{FilterKind, Subscription};
use crate::plugin::{LoadedModule, PluginHost, PluginKind, PluginLimits, builtin};

#[derive(Subcommand)]
pub enum PluginCmd {
    /// Registers a module built with rockraft-plugin-sdk (wasm32-unknown-unknown) on the cluster.
    Register {
        #[arg(long)]
        name: String,
        /// `filter` or `tx-checker`.
        #[arg(long)]
        kind: PluginKind,
        file: PathBuf,
    },
    /// Built-in and registered plugins: kind, version, size, what uses them, this node's counts.
    List(Listing),
    /// Removes a registered plugin (unbind it first).
    Remove {
        #[arg(long)]
        name: String,
    },
    /// Calls a quarantined plugin again (a plugin that failed too often is quarantined: `list`
    /// says so).
    Enable { name: String },
    /// Binds a consumer group to a filter (run after each subscription's own expression), or a
    /// transaction topic to a checker. `--config` is what the plugin is opened with.
    Bind {
        #[arg(long, conflicts_with = "topic", required_unless_present = "topic")]
        group: Option<String>,
        #[arg(long)]
        topic: Option<String>,
        #[arg(long)]
        plugin: String,
        #[arg(long, default_value = "")]
        config: String,
    },
    /// Removes a group's filter or a topic's checker (topics fall back to the default checker).
    Unbind {
        #[arg(long, conflicts_with = "topic", required_unless_present = "topic")]
        group: Option<String>,
        #[arg(long)]
        topic: Option<String>,
    },
    /// Runs a plugin on one message, here: prints `true`/`false` for a filter (the decision for
    /// a transaction checker), or `error: …` and exits 1.
    Eval {
        /// A built-in plugin (`tag`, `sql92`, `default-tx-checker`) or a `.wasm` file.
        #[arg(long)]
        plugin: String,
        /// The expression (filters) or configuration (checkers) the plugin is opened with.
        #[arg(long, default_value = "")]
        expr: String,
        /// `{"topic": "T", "tag": "A", "keys": ["k"], "properties": {"a": "1"}, "body": "text",
        /// "age_ms": 0, "checks": 0}`, every field optional.
        #[arg(long, default_value = "{}")]
        message: String,
    },
}

fn target(group: Option<String>, topic: Option<String>) -> Result<pb::bind_plugin_request::Target, CliError> {
    use pb::bind_plugin_request::Target;
    match (group, topic) {
        (Some(g), None) => Ok(Target::Group(g)),
        (None, Some(t)) => Ok(Target::Topic(t)),
        _ => Err(CliError::Usage("name either --group or --topic".into())),
    }
}

/// A cluster command (`Eval` runs here, in `main`).
pub(super) async fn run(admin: &Admin, cmd: PluginCmd) -> Result<(), CliError> {
    let done = match cmd {
        PluginCmd::Register { name, kind, file } => {
            let module = std::fs::read(&file).map_err(|e| CliError::Usage(format!("{}: {e}", file.display())))?;
            let kind = kind.as_str().to_ascii_uppercase().replace('-', "_");
            admin.send(pb::RegisterPluginRequest { name, kind, module: module.into() }).await?
        }
        PluginCmd::List(listing) => {
            let ask = |after: &String, limit| pb::ListPluginsRequest { after: after.clone(), limit };
            let rows = |r: pb::ListPluginsReply| (r.plugins, Some(r.next_after).filter(|n| !n.is_empty()));
            return admin.page_through(listing.after, listing.limit, "--after", ask, rows, print).await;
        }
        PluginCmd::Remove { name } => admin.send(pb::RemovePluginRequest { name }).await?,
        PluginCmd::Enable { name } => admin.send(pb::EnablePluginRequest { name }).await?,
        PluginCmd::Bind { group, topic, plugin, config } => {
            admin.send(pb::BindPluginRequest { target: Some(target(group, topic)?), plugin, config }).await?
        }
        PluginCmd::Unbind { group, topic } => {
            let target = Some(target(group, topic)?);
            admin.send(pb::BindPluginRequest { target, plugin: String::new(), config: String::new() }).await?
        }
        PluginCmd::Eval { .. } => return Err(CliError::Usage("eval runs locally".into())),
    };
    println!("{}", done.message);
    Ok(())
}

fn print(p: pb::Plugin) {
    let origin = if p.builtin { "built-in" } else { "registered" };
    let bound = if p.bound_to.is_empty() { "-".to_string() } else { p.bound_to.join(",") };
    let kind = p.kind.to_ascii_lowercase().replace('_', "-");
    println!(
        "{}\t{kind}\t{origin}\tversion={}\tbytes={}\tsha256={:.12}\tbound_to={bound}\tcalls={}\tmessages={}\tfailures={}",
        p.name, p.version, p.size, p.hash, p.calls, p.messages, p.failures
    );
    if !p.quarantined.is_empty() {
        println!("  QUARANTINED: {}", p.quarantined);
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct EvalMessage {
    topic: String,
    tag: String,
    keys: Vec<String>,
    properties: std::collections::HashMap<String, String>,
    body: String,
    age_ms: i64,
    checks: u32,
}

/// `plugin eval`: the line to print, or the error.
pub fn eval(plugin: &str, expr: &str, message: &str) -> Result<String, CliError> {
    let m: EvalMessage = serde_json::from_str(message).map_err(|e| CliError::Usage(format!("--message: {e}")))?;
    let host = std::sync::Arc::new(PluginHost::new(PluginLimits::default())?);
    let message = StoredMessage {
        tag: m.tag,
        keys: m.keys,
        properties: m.properties,
        body: Bytes::from(m.body.into_bytes()),
        ..Default::default()
    };
    let entry = StoredEntry::new(&m.topic, 0, 0, 0, message);
    // The built-in filters run exactly as a subscription does, host-side tag prefilter included.
    let kind = match plugin {
        builtin::TAG => Some(FilterKind::Tag),
        builtin::SQL92 => Some(FilterKind::Sql92),
        _ => None,
    };
    if let Some(kind) = kind {
        let sub = Subscription::compile(&host, kind, expr)?;
        let tag_ok = sub.may_match(crate::store::tag_hash(&entry.message.tag));
        let passed = tag_ok
            && (!sub.reads_messages()
                || sub.passes(&[entry.view().map_err(|e| CliError::Usage(e.to_string()))?], 0)[0]);
        return Ok(passed.to_string());
    }
    let module: std::sync::Arc<LoadedModule> = if let Some((bytes, kind)) = builtin::module(plugin) {
        host.load(bytes, kind)?
    } else {
        let bytes = std::fs::read(plugin)
            .map_err(|e| CliError::Usage(format!("{plugin}: {e} (not a built-in plugin either)")))?;
        match host.load(&bytes, PluginKind::Filter) {
            Ok(m) => m,
            Err(as_filter) => host.load(&bytes, PluginKind::TxChecker).map_err(|_| as_filter)?,
        }
    };
    module.check_expression(expr)?;
    match module.kind {
        PluginKind::Filter => {
            let answer = host.filter_one(&module, expr, &entry, 0)?;
            Ok(answer.to_string())
        }
        PluginKind::TxChecker => {
            let d = host.check(&module, expr, &entry, m.age_ms, m.checks, m.age_ms)?;
            Ok(match d {
                Decision::Commit => "commit",
                Decision::Rollback => "rollback",
                Decision::AskProducer => "ask-producer",
                Decision::Wait => "wait",
            }
            .to_string())
        }
    }
}
