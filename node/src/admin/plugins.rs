//! Filter and transaction-checker plugins: registered, bound, listed with their counts.

use std::sync::atomic::Ordering::Relaxed;

use crate::admin::AdminServer;
use crate::admin::api::{BindTarget, PluginInfo};
use crate::admin::error::AdminError;
use crate::broker::Command;
use crate::broker::plugins::{Binding, PluginCommand};
use crate::plugin::{ModuleSource, PluginError, PluginKind, blocking, builtin, module_hash};

impl AdminServer {
    /// Compiles and checks the module here (the leader) before it is replicated: every node then
    /// runs bytes that are known to load.
    pub(super) async fn register_plugin(
        &self,
        name: String,
        kind: PluginKind,
        module: Vec<u8>,
    ) -> Result<String, AdminError> {
        let host = &self.parts.plugins;
        if builtin::module(&name).is_some() {
            return Err(AdminError::Exists(format!("{name} is the name of a built-in plugin")));
        }
        // Checked again when applied; refused here before anything is compiled.
        let max = self.parts.broker.settings().max_module_bytes;
        if module.len() as u64 > max {
            return Err(AdminError::Refused(format!(
                "a module of {} bytes is over the cluster's max_module_bytes ({max}; `rockraft cluster configure \
                 --max-module-bytes`)",
                module.len()
            )));
        }
        let loaded = blocking(|| host.load(&module, kind)).map_err(|e| AdminError::Invalid(e.to_string()))?;
        let version = loaded.manifest.version.clone();
        self.write(Command::Plugin(PluginCommand::Register { name, kind, version, now_ms: 0, module })).await
    }

    pub(super) async fn remove_plugin(&self, name: String) -> Result<String, AdminError> {
        self.write(Command::Plugin(PluginCommand::Remove { name })).await
    }

    /// Calls a quarantined plugin again.
    pub(super) async fn enable_plugin(&self, name: String) -> Result<String, AdminError> {
        self.write(Command::Plugin(PluginCommand::Enable { name })).await
    }

    /// Binds a group to a filter or a transaction topic to a checker (`None` unbinds); the
    /// plugin is first opened with `config` here, so a configuration it refuses is not bound.
    pub(super) async fn bind_plugin(
        &self,
        target: BindTarget,
        plugin: Option<String>,
        config: String,
    ) -> Result<String, AdminError> {
        let kind = match target {
            BindTarget::Group(_) => PluginKind::Filter,
            BindTarget::Topic(_) => PluginKind::TxChecker,
        };
        let binding = match plugin {
            None => None,
            Some(plugin) => {
                // Read under the broker's lock; compiled (if it is not yet) after it is released.
                let source = {
                    let state = self.parts.broker.state();
                    ModuleSource::find(&state.meta.plugins, &plugin, kind)
                };
                let source = source.map_err(|e| AdminError::NotFound(e.to_string()))?;
                let host = &self.parts.plugins;
                let module = blocking(|| host.compiled(&source)).map_err(AdminError::fault)?;
                blocking(|| module.check_expression(&config)).map_err(|e| {
                    AdminError::Invalid(format!("plugin {plugin} refuses the configuration {config:?}: {e}"))
                })?;
                Some(Binding { plugin, config })
            }
        };
        let command = match target {
            BindTarget::Group(group) => PluginCommand::BindGroup { group, binding },
            BindTarget::Topic(topic) => PluginCommand::BindTopic { topic, binding },
        };
        self.write(Command::Plugin(command)).await
    }

    /// Built-in and registered plugins, what they are bound to, and this node's counts.
    pub fn list_plugins(&self) -> Vec<PluginInfo> {
        #[derive(Default)]
        struct Counts {
            calls: u64,
            messages: u64,
            failures: u64,
            fuel: u64,
            busy_ms: u64,
        }
        let host = &self.parts.plugins;
        let state = self.parts.broker.state();
        let tables = &state.meta.plugins;
        let bound_to = |name: &str| -> Vec<String> {
            let groups =
                tables.group_filters.iter().filter(|(_, b)| b.plugin == name).map(|(g, _)| format!("group {g}"));
            let topics =
                tables.topic_checkers.iter().filter(|(_, b)| b.plugin == name).map(|(t, _)| format!("topic {t}"));
            groups.chain(topics).collect()
        };
        let loaded = host.loaded();
        let counts = |hash: &str, builtin: bool| {
            let m = loaded.iter().find(|m| if builtin { m.hash == format!("builtin:{hash}") } else { m.hash == hash });
            m.map_or(Counts::default(), |m| {
                let c = &m.counters;
                Counts {
                    calls: c.calls.load(Relaxed),
                    messages: c.messages.load(Relaxed),
                    failures: c.failures.load(Relaxed),
                    fuel: c.fuel.load(Relaxed),
                    busy_ms: c.busy_nanos.load(Relaxed) / 1_000_000,
                }
            })
        };
        let mut out = Vec::new();
        for name in builtin::NAMES {
            let Some((bytes, kind)) = builtin::module(name) else { continue };
            let c = counts(name, true);
            out.push(PluginInfo {
                name: name.to_string(),
                kind,
                version: env!("CARGO_PKG_VERSION").to_string(),
                builtin: true,
                size: bytes.len(),
                hash: module_hash(bytes),
                registered_ms: 0,
                bound_to: bound_to(name),
                calls: c.calls,
                messages: c.messages,
                failures: c.failures,
                fuel: c.fuel,
                busy_ms: c.busy_ms,
                quarantined: None,
            });
        }
        for (name, r) in tables.modules.iter() {
            let c = counts(&r.hash, false);
            out.push(PluginInfo {
                name: name.clone(),
                kind: r.kind,
                version: r.version.clone(),
                builtin: false,
                size: r.module.len(),
                hash: r.hash.clone(),
                registered_ms: r.registered_ms,
                bound_to: bound_to(name),
                calls: c.calls,
                messages: c.messages,
                failures: c.failures,
                fuel: c.fuel,
                busy_ms: c.busy_ms,
                quarantined: r.quarantine.as_ref().map(|q| {
                    let why = PluginError::Quarantined {
                        name: name.clone(),
                        failures: q.failures,
                        window_secs: q.window_secs,
                    };
                    why.to_string()
                }),
            });
        }
        out
    }
}
