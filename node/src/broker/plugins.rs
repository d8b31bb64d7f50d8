//! The replicated plugin registry: registered modules and bindings, changed only by Raft entries.
//! (Running plugins is `crate::plugin`'s; this is the state every replica keeps about them.)
//!
//! A registration carries the module's bytes, so every replica — and a node that becomes leader
//! after a failover — runs exactly the module the operator registered. The leader compiles and
//! checks a module before proposing it (`admin/service.rs`); apply only enforces what is
//! deterministic: names, sizes, counts, kinds and what is bound to what.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use sha2::{Digest, Sha256};

use crate::broker::Reply;
use crate::broker::table::Table;
use crate::broker::topic::{TopicConfig, TopicKind, validate_name};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    Filter,
    TxChecker,
}

impl PluginKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Filter => "filter",
            PluginKind::TxChecker => "tx-checker",
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plugin kind no plugin has; holds what was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown plugin kind {0:?} (filter, tx-checker)")]
pub struct UnknownPluginKind(pub String);

impl std::str::FromStr for PluginKind {
    type Err = UnknownPluginKind;
    fn from_str(s: &str) -> Result<Self, UnknownPluginKind> {
        match s {
            "filter" => Ok(PluginKind::Filter),
            "tx-checker" => Ok(PluginKind::TxChecker),
            other => Err(UnknownPluginKind(other.to_string())),
        }
    }
}

/// Why a plugin cannot be bound. Its text goes into the replicated reply: it must not change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    #[error("configuration longer than {MAX_BINDING_CONFIG_BYTES} bytes")]
    ConfigTooLong,
    #[error("no plugin named {0}")]
    NoPlugin(String),
    #[error("plugin {plugin} is a {is}, not a {wanted}")]
    WrongKind { plugin: String, is: PluginKind, wanted: PluginKind },
}

/// The plugins built into every node, by name; their names are reserved.
pub const BUILT_IN: [(&str, PluginKind); 3] =
    [("tag", PluginKind::Filter), ("sql92", PluginKind::Filter), ("default-tx-checker", PluginKind::TxChecker)];

fn built_in_kind(name: &str) -> Option<PluginKind> {
    BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}

/// The hex SHA-256 of a module: its identity in the registry and in each node's compiled cache.
pub fn module_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Registered plugins at most.
pub const MAX_PLUGINS: usize = 32;
/// The largest module any node accepts in an entry, whatever its configured limit.
pub const MAX_MODULE_BYTES: usize = 4 << 20;
/// Longest configuration a binding carries.
pub const MAX_BINDING_CONFIG_BYTES: usize = 4 << 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRecord {
    pub kind: PluginKind,
    /// From the module's manifest, as the leader read it.
    pub version: String,
    /// Hex SHA-256 of the module.
    pub hash: String,
    pub registered_ms: i64,
    /// Shared, not copied, by whoever compiles it.
    #[serde(with = "base64_bytes")]
    pub module: Bytes,
    /// Set while the plugin is quarantined: it failed too often and is not called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<Quarantine>,
}

/// Why a plugin is quarantined: the failures its leader counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    pub failures: u32,
    pub window_secs: u64,
    /// The leader's clock when it proposed the quarantine.
    pub since_ms: i64,
}

/// A filter plugin could not be run on an entry at all (its host failed, not the message), so the
/// entry and those after it are undecided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterUnavailable {
    /// The answers for the entries before it.
    pub decided: Vec<bool>,
    pub reason: String,
}

/// A plugin a group or topic is bound to, with the configuration it is opened with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub plugin: String,
    #[serde(default)]
    pub config: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginTables {
    pub modules: Table<String, PluginRecord>,
    /// Consumer group → a filter applied after the subscription's own expression.
    pub group_filters: Table<String, Binding>,
    /// Transaction topic → the checker that decides its unresolved halves.
    pub topic_checkers: Table<String, Binding>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PluginCommand {
    Register {
        name: String,
        kind: PluginKind,
        version: String,
        now_ms: i64,
        #[serde(with = "base64_bytes")]
        module: Vec<u8>,
    },
    Remove {
        name: String,
    },
    /// `None` unbinds.
    BindGroup {
        group: String,
        binding: Option<Binding>,
    },
    BindTopic {
        topic: String,
        binding: Option<Binding>,
    },
    /// Stops calling the plugin `name`, proposed by a leader that counted too many failures of
    /// the module with `hash` (a stale proposal does not touch a module registered since).
    Quarantine {
        name: String,
        hash: String,
        quarantine: Quarantine,
    },
    /// An operator's `plugin enable`: the plugin is called again.
    Enable {
        name: String,
    },
}

/// What a binding may name: a registered plugin, or a built-in one.
fn plugin_kind(modules: &Table<String, PluginRecord>, name: &str) -> Option<PluginKind> {
    modules.get(name).map(|r| r.kind).or_else(|| built_in_kind(name))
}

impl PluginTables {
    pub fn apply(
        &mut self,
        command: PluginCommand,
        topics: &Table<String, TopicConfig>,
        group_exists: impl Fn(&str) -> bool,
    ) -> Reply {
        match command {
            PluginCommand::Register { name, kind, version, now_ms, module } => {
                if validate_name(&name).is_err() {
                    return Reply::Rejected(format!("illegal plugin name {name:?}: 1-127 of [A-Za-z0-9_%|-]"));
                }
                if built_in_kind(&name).is_some() {
                    return Reply::Rejected(format!("{name} is the name of a built-in plugin"));
                }
                if module.len() > MAX_MODULE_BYTES {
                    return Reply::Rejected(format!("module of {} bytes exceeds {MAX_MODULE_BYTES}", module.len()));
                }
                let hash = module_hash(&module);
                match self.modules.get(&name) {
                    Some(r) if r.hash == hash && r.kind == kind => return Reply::Applied,
                    Some(_) => {
                        return Reply::Rejected(format!("a different plugin {name} is registered; remove it first"));
                    }
                    None if self.modules.len() >= MAX_PLUGINS => {
                        return Reply::Rejected(format!(
                            "{MAX_PLUGINS} plugins are registered, the most a cluster keeps"
                        ));
                    }
                    None => {}
                }
                let record = PluginRecord {
                    kind,
                    version,
                    hash,
                    registered_ms: now_ms,
                    module: module.into(),
                    quarantine: None,
                };
                self.modules.insert(name, record);
                Reply::Applied
            }
            PluginCommand::Remove { name } => {
                if self.modules.get(&name).is_none() {
                    return Reply::Rejected(format!("no plugin named {name}"));
                }
                let users = self.group_filters.iter().map(|(g, b)| ("group", g, b));
                let users = users.chain(self.topic_checkers.iter().map(|(t, b)| ("topic", t, b)));
                let bound: Vec<String> =
                    users.filter(|(_, _, b)| b.plugin == name).map(|(w, n, _)| format!("{w} {n}")).collect();
                if !bound.is_empty() {
                    return Reply::Rejected(format!("plugin {name} is bound to {}; unbind it first", bound.join(", ")));
                }
                self.modules.remove(&name);
                Reply::Applied
            }
            PluginCommand::BindGroup { group, binding } => {
                if !group_exists(&group) {
                    return Reply::Rejected(format!("consumer group {group} does not exist"));
                }
                match binding {
                    None => {
                        self.group_filters.remove(&group);
                        Reply::Applied
                    }
                    Some(b) => match self.check_binding(&b, PluginKind::Filter) {
                        Err(reason) => Reply::Rejected(reason.to_string()),
                        Ok(()) => {
                            self.group_filters.insert(group, b);
                            Reply::Applied
                        }
                    },
                }
            }
            PluginCommand::Quarantine { name, hash, quarantine } => match self.modules.get(&name) {
                Some(r) if r.hash == hash && r.quarantine.is_none() => {
                    let record = PluginRecord { quarantine: Some(quarantine), ..r.clone() };
                    self.modules.insert(name, record);
                    Reply::Applied
                }
                // Already quarantined, or removed or replaced since: nothing to do.
                _ => Reply::Applied,
            },
            PluginCommand::Enable { name } => match self.modules.get(&name) {
                None if built_in_kind(&name).is_some() => {
                    Reply::Rejected(format!("{name} is a built-in plugin, never quarantined"))
                }
                None => Reply::Rejected(format!("no plugin named {name}")),
                Some(r) if r.quarantine.is_none() => Reply::Applied,
                Some(r) => {
                    let record = PluginRecord { quarantine: None, ..r.clone() };
                    self.modules.insert(name, record);
                    Reply::Applied
                }
            },
            PluginCommand::BindTopic { topic, binding } => {
                match topics.get(&topic) {
                    None => return Reply::TopicNotFound(topic),
                    Some(t) if t.kind != TopicKind::Transaction => {
                        return Reply::Rejected(format!("topic {topic} is not a transaction topic"));
                    }
                    Some(_) => {}
                }
                match binding {
                    None => {
                        self.topic_checkers.remove(&topic);
                        Reply::Applied
                    }
                    Some(b) => match self.check_binding(&b, PluginKind::TxChecker) {
                        Err(reason) => Reply::Rejected(reason.to_string()),
                        Ok(()) => {
                            self.topic_checkers.insert(topic, b);
                            Reply::Applied
                        }
                    },
                }
            }
        }
    }

    fn check_binding(&self, b: &Binding, kind: PluginKind) -> Result<(), BindingError> {
        if b.config.len() > MAX_BINDING_CONFIG_BYTES {
            return Err(BindingError::ConfigTooLong);
        }
        match plugin_kind(&self.modules, &b.plugin) {
            None => Err(BindingError::NoPlugin(b.plugin.clone())),
            Some(is) if is != kind => Err(BindingError::WrongKind { plugin: b.plugin.clone(), is, wanted: kind }),
            Some(_) => Ok(()),
        }
    }

    /// Bindings of a topic that is gone.
    pub fn topic_deleted(&mut self, topic: &str) {
        self.topic_checkers.remove(topic);
    }
}

/// Module bytes as base64 in the JSON entries and rows (a JSON array of numbers is 3-4× larger).
pub(crate) mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: From<Vec<u8>>>(d: D) -> Result<T, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map(T::from).map_err(serde::de::Error::custom)
    }
}
