//! The transaction checker the leader's check job asks: the plugin a topic is bound to, else the
//! built-in `default-tx-checker` configured from `[broker]`. A checker that fails (trap, fuel,
//! an answer that is no decision) counts as WAIT: the half is looked at again next interval.

use std::sync::Arc;
use std::time::Duration;

use rockraft_plugin_sdk::Decision as PluginDecision;

use crate::broker::transaction::{Decision, HalfView, TransactionChecker};
use crate::broker::{Broker, StoredEntry};
use crate::plugin::{ModuleSource, PluginHost, PluginKind, blocking, builtin};

pub struct PluginChecker {
    host: Arc<PluginHost>,
    broker: Broker,
    /// The built-in checker's configuration, from the node's `[broker]` settings.
    default_config: String,
}

impl PluginChecker {
    pub fn new(host: Arc<PluginHost>, broker: Broker, max_age: Duration, max_checks: u32) -> PluginChecker {
        let default_config = format!("max_age_ms={} max_checks={max_checks}", max_age.as_millis());
        PluginChecker { host, broker, default_config }
    }
}

impl TransactionChecker for PluginChecker {
    fn decide(&self, half: &HalfView, age: Duration, checks: u32) -> Decision {
        // What to run is read under the broker's lock; it is compiled (if it is not yet) after.
        let (name, config, source) = {
            let state = self.broker.state();
            let (name, config) = match state.meta.plugins.topic_checkers.get(&half.topic) {
                Some(b) => (b.plugin.clone(), b.config.clone()),
                None => (builtin::DEFAULT_TX_CHECKER.to_string(), self.default_config.clone()),
            };
            let source = ModuleSource::find(&state.meta.plugins, &name, PluginKind::TxChecker);
            (name, config, source)
        };
        let module = blocking(|| source.and_then(|s| self.host.compiled(&s)));
        let module = match module {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(plugin = %name, topic = %half.topic, error = %e, "transaction checker unavailable; waiting");
                return Decision::Wait;
            }
        };
        let entry = StoredEntry::new(&half.topic, 0, 0, half.store_ms, half.message.clone());
        let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        let now_ms = half.store_ms.saturating_add(age_ms);
        match blocking(|| self.host.check(&module, &config, &entry, age_ms, checks, now_ms)) {
            Ok(PluginDecision::Commit) => Decision::Commit,
            Ok(PluginDecision::Rollback) => Decision::Rollback,
            Ok(PluginDecision::AskProducer) => Decision::AskProducer,
            Ok(PluginDecision::Wait) | Err(_) => Decision::Wait,
        }
    }
}
