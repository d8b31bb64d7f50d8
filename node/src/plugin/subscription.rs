//! A consumer's filter as pop planning uses it: the subscription's TAG or SQL92 expression, run
//! by the built-in `tag` or `sql92` plugin, then the filter the group is bound to, if any.
//!
//! For tag expressions the host first compares the ConsumeQueue record's tag hash with the
//! expression's tags, so a message that cannot match is passed over before it is read. A match-all
//! subscription (`*`, empty) without a group filter reads nothing and calls no plugin.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::broker::plugins::FilterUnavailable;
use crate::broker::{Broker, MessageFilter, StoredView};
use crate::plugin::{LoadedModule, ModuleSource, PluginError, PluginHost, PluginKind, builtin};
use crate::store::tag_hash;

/// The language of a subscription's expression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterKind {
    #[default]
    Tag,
    Sql92,
}

/// A plugin opened with an expression or configuration.
#[derive(Clone)]
pub struct Opened {
    pub module: Arc<LoadedModule>,
    pub expression: String,
}

#[derive(Clone, Default)]
pub struct Subscription {
    /// Runs the plugins (none for match-all).
    host: Option<Arc<PluginHost>>,
    /// Hashes of the tags a tag expression names; `None`: any tag may match.
    tag_hashes: Option<BTreeSet<u64>>,
    /// The plugin evaluating the subscription's expression; `None` for match-all.
    expression: Option<Opened>,
    /// The group's own filter, applied to what the expression lets through.
    group_filter: Option<Opened>,
}

impl Subscription {
    /// Every message, nothing read.
    pub fn all() -> Subscription {
        Subscription::default()
    }

    /// Compiles an expression with the built-in plugin for its kind. `Err(Rejected)` carries the
    /// reason a client is shown with ILLEGAL_FILTER_EXPRESSION.
    pub fn compile(host: &Arc<PluginHost>, kind: FilterKind, expression: &str) -> Result<Subscription, PluginError> {
        let (plugin, tag_hashes) = match kind {
            FilterKind::Tag => {
                let trimmed = expression.trim();
                if trimmed.is_empty() || trimmed == "*" {
                    return Ok(Subscription::all());
                }
                let hashes: BTreeSet<u64> =
                    trimmed.split("||").map(str::trim).filter(|t| !t.is_empty()).map(tag_hash).collect();
                (builtin::TAG, (!hashes.is_empty()).then_some(hashes))
            }
            FilterKind::Sql92 => (builtin::SQL92, None),
        };
        let module = host.builtin(plugin)?;
        module.check_expression(expression)?;
        Ok(Subscription {
            host: Some(Arc::clone(host)),
            tag_hashes,
            expression: Some(Opened { module, expression: expression.to_string() }),
            group_filter: None,
        })
    }

    /// Adds the filter `group` is bound to, if any. The binding is read under the broker's lock
    /// and the module compiled (if it is not yet) after it is released: call it off the async
    /// workers.
    pub fn with_group_filter(
        mut self,
        host: &Arc<PluginHost>,
        broker: &Broker,
        group: &str,
    ) -> Result<Self, PluginError> {
        let bound = {
            let state = broker.state();
            let plugins = &state.meta.plugins;
            plugins.group_filters.get(group).map(|binding| {
                ModuleSource::find(plugins, &binding.plugin, PluginKind::Filter).map(|s| (s, binding.config.clone()))
            })
        };
        if let Some(bound) = bound {
            let (source, expression) = bound?;
            self.host = Some(Arc::clone(host));
            let module = host.compiled(&source)?;
            self.group_filter = Some(Opened { module, expression });
        }
        Ok(self)
    }
}

impl MessageFilter for Subscription {
    fn may_match(&self, hash: u64) -> bool {
        self.tag_hashes.as_ref().is_none_or(|h| h.contains(&hash))
    }

    fn reads_messages(&self) -> bool {
        self.expression.is_some() || self.group_filter.is_some()
    }

    fn passes(&self, messages: &[StoredView], now_ms: i64) -> Vec<bool> {
        match self.screen(messages, now_ms) {
            Ok(passed) => passed,
            // Undecided is not delivered.
            Err(FilterUnavailable { mut decided, .. }) => {
                decided.resize(messages.len(), false);
                decided
            }
        }
    }

    fn screen(&self, messages: &[StoredView], now_ms: i64) -> Result<Vec<bool>, FilterUnavailable> {
        let mut passed = vec![true; messages.len()];
        let Some(host) = &self.host else { return Ok(passed) };
        for stage in [&self.expression, &self.group_filter].into_iter().flatten() {
            let (idx, left): (Vec<usize>, Vec<StoredView>) =
                messages.iter().enumerate().filter(|(i, _)| passed[*i]).map(|(i, m)| (i, *m)).unzip();
            if left.is_empty() {
                break;
            }
            let (answers, stopped) = match host.filter(&stage.module, &stage.expression, &left, now_ms) {
                Ok(answers) => (answers, None),
                Err(FilterUnavailable { decided, reason }) => (decided, Some(reason)),
            };
            let decided = answers.len();
            for (&i, ok) in idx.iter().zip(answers) {
                passed[i] = ok;
            }
            if let (Some(reason), Some(&at)) = (stopped, idx.get(decided)) {
                // Everything before the entry this stage could not run on is decided.
                passed.truncate(at);
                return Err(FilterUnavailable { decided: passed, reason });
            }
        }
        Ok(passed)
    }
}
