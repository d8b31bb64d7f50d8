//! WASM plugins: message filters and transaction checkers run in a sandbox (wasmtime).
//!
//! - `host.rs` compiles modules, keeps instances and bounds every call (fuel, memory).
//! - `builtin.rs` holds the modules built into the node (`tag`, `sql92`, `default-tx-checker`),
//!   built from `plugins/` with the same SDK and ABI as user plugins.
//! - The replicated part (registered modules, what groups and topics are bound to) is broker
//!   state: `broker/plugins.rs`.
//! - `subscription.rs` is a consumer's filter as pop planning uses it.
//! - `checker.rs` is the transaction checker the leader's check job asks.
//!
//! The ABI is documented in `sdk/ABI.md`.

pub mod builtin;
pub mod checker;
pub mod host;
#[cfg(test)]
mod plugin_test;
pub mod subscription;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rockraft_plugin_sdk::{BatchWriter, MessageData};
use serde::{Deserialize, Serialize};
use wasmtime::Engine;

use crate::broker::StoredEntry;
pub use crate::broker::plugins::{PluginKind, module_hash};
pub use host::{LoadedModule, Manifest};

fn call_export(kind: PluginKind) -> &'static str {
    match kind {
        PluginKind::Filter => "rockraft_filter",
        PluginKind::TxChecker => "rockraft_tx_check",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// The module cannot be used (refused at registration).
    #[error("invalid plugin: {0}")]
    Invalid(String),
    /// The plugin refused an expression or configuration; the reason is the plugin's.
    #[error("{0}")]
    Rejected(String),
    #[error("plugin trapped: {0}")]
    Trap(String),
    #[error("plugin ran out of fuel (its per-call limit)")]
    OutOfFuel,
    #[error("plugin answered out of bounds: {0}")]
    Malformed(String),
    #[error("plugin call failed: {0}")]
    Failed(String),
    #[error("no plugin named {0:?}")]
    NotFound(String),
    #[error("{0}")]
    Engine(String),
}

/// Limits on plugins; `[plugins]` in the node's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginLimits {
    /// Linear memory one filter instance may grow to.
    pub filter_memory_bytes: usize,
    /// Fuel (roughly, WASM instructions) a filter call may use: this much per call ...
    pub filter_fuel_per_call: u64,
    /// ... plus this much per message in the batch.
    pub filter_fuel_per_message: u64,
    /// Messages per filter call.
    pub filter_batch: usize,
    pub checker_memory_bytes: usize,
    /// Fuel a transaction checker may use per message.
    pub checker_fuel_per_message: u64,
    /// The largest module `plugin register` accepts.
    pub max_module_bytes: u64,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            filter_memory_bytes: 16 << 20,
            filter_fuel_per_call: 100_000,
            filter_fuel_per_message: 20_000,
            filter_batch: 256,
            checker_memory_bytes: 32 << 20,
            checker_fuel_per_message: 10_000_000,
            max_module_bytes: 1 << 20,
        }
    }
}

/// A module being compiled, compiled, or refused: set once by whoever asks first.
type Compiling = OnceLock<Result<Arc<LoadedModule>, PluginError>>;

/// Compiles and caches modules, and runs them with the node's limits.
pub struct PluginHost {
    engine: Engine,
    limits: PluginLimits,
    /// Compiled modules (or why they do not load) by (hash, kind).
    loaded: Mutex<HashMap<(String, PluginKind), Arc<Compiling>>>,
    /// When a plugin failure was last logged, so a poison message does not flood the log.
    last_logged_ms: AtomicI64,
}

impl fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginHost").field("limits", &self.limits).finish_non_exhaustive()
    }
}

thread_local! {
    static BATCH_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Extra fuel per body byte for plugins that read bodies: scanning a body costs per byte.
const FUEL_PER_BODY_BYTE: u64 = 32;

/// The largest encoding buffer a thread keeps between calls (bodies can make one large).
const MAX_KEPT_BUFFER: usize = 1 << 20;

/// Modules compiled and kept at most (registered ones are few; see `registry::MAX_PLUGINS`).
const MAX_LOADED: usize = 128;

impl PluginHost {
    pub fn new(limits: PluginLimits) -> Result<PluginHost, PluginError> {
        Ok(PluginHost {
            engine: host::engine()?,
            limits,
            loaded: Mutex::new(HashMap::new()),
            last_logged_ms: AtomicI64::new(0),
        })
    }

    pub fn limits(&self) -> &PluginLimits {
        &self.limits
    }

    /// The module with these bytes, compiled once and checked to be a `kind`.
    pub fn load(&self, bytes: &[u8], kind: PluginKind) -> Result<Arc<LoadedModule>, PluginError> {
        self.load_hashed(module_hash(bytes), bytes, kind)
    }

    /// A built-in plugin.
    pub fn builtin(&self, name: &str) -> Result<Arc<LoadedModule>, PluginError> {
        let (bytes, kind) = builtin::module(name).ok_or_else(|| PluginError::NotFound(name.to_string()))?;
        self.load_hashed(format!("builtin:{name}"), bytes, kind)
    }

    /// The plugin `name`: registered in `tables`, or built in.
    pub fn resolve(
        &self,
        tables: &crate::broker::plugins::PluginTables,
        name: &str,
        kind: PluginKind,
    ) -> Result<Arc<LoadedModule>, PluginError> {
        match tables.modules.get(name) {
            Some(r) if r.kind != kind => {
                Err(PluginError::Invalid(format!("plugin {name} is a {}, not a {kind}", r.kind)))
            }
            Some(r) => self.load_hashed(r.hash.clone(), &r.module, kind),
            None => {
                let m = self.builtin(name)?;
                if m.kind != kind {
                    return Err(PluginError::Invalid(format!("plugin {name} is a {}, not a {kind}", m.kind)));
                }
                Ok(m)
            }
        }
    }

    /// `load` with the module's hash known (registered modules carry it; hashing is not free).
    fn load_hashed(&self, hash: String, bytes: &[u8], kind: PluginKind) -> Result<Arc<LoadedModule>, PluginError> {
        let cell = {
            let mut loaded = self.loaded.lock().expect("loaded modules");
            if loaded.len() >= MAX_LOADED && !loaded.contains_key(&(hash.clone(), kind)) {
                loaded.clear();
            }
            Arc::clone(loaded.entry((hash.clone(), kind)).or_default())
        };
        // Compiled outside the map's lock (it takes tens of milliseconds) and once: concurrent
        // first users of a module wait for the one compilation.
        let compiled =
            cell.get_or_init(|| LoadedModule::load(&self.engine, hash, bytes, kind, self.limits).map(Arc::new));
        compiled.clone()
    }

    /// Every module compiled here, for metrics.
    pub fn loaded(&self) -> Vec<Arc<LoadedModule>> {
        let loaded = self.loaded.lock().expect("loaded modules");
        loaded.values().filter_map(|c| c.get().and_then(|r| r.as_ref().ok()).cloned()).collect()
    }

    fn log_failure(&self, module: &LoadedModule, e: &PluginError) {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        if now - last >= 1000
            && self.last_logged_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::warn!(plugin = %module.manifest.name, error = %e, "plugin call failed (further failures this second are counted, not logged)");
        }
    }

    /// Which `entries` pass the filter `module` compiled from `expression`. A message the call
    /// fails on (trap, fuel, evaluation error) does not pass; a failed batch is run again one
    /// message at a time so only the message it fails on is affected.
    pub fn filter(&self, module: &LoadedModule, expression: &str, entries: &[&StoredEntry], now_ms: i64) -> Vec<bool> {
        let mut passed = Vec::with_capacity(entries.len());
        // The encoding buffer is kept per thread: pops filter often.
        let mut buf = BATCH_BUFFER.with(|b| std::mem::take(&mut *b.borrow_mut()));
        for chunk in entries.chunks(self.limits.filter_batch.max(1)) {
            match self.filter_call(module, expression, chunk, now_ms, &mut buf) {
                Ok(answers) => passed.extend(answers),
                Err(e) if chunk.len() > 1 => {
                    self.log_failure(module, &e);
                    for one in chunk {
                        let answer = self.filter_call(module, expression, std::slice::from_ref(one), now_ms, &mut buf);
                        passed.push(answer.is_ok_and(|a| a[0]));
                    }
                }
                Err(e) => {
                    self.log_failure(module, &e);
                    passed.push(false);
                }
            }
        }
        if buf.capacity() <= MAX_KEPT_BUFFER {
            BATCH_BUFFER.with(|b| *b.borrow_mut() = buf);
        }
        passed
    }

    fn filter_call(
        &self,
        module: &LoadedModule,
        expression: &str,
        entries: &[&StoredEntry],
        now_ms: i64,
        buf: &mut Vec<u8>,
    ) -> Result<Vec<bool>, PluginError> {
        let answers = self.filter_answers(module, expression, entries, now_ms, buf)?;
        let errors = answers.iter().filter(|a| a.is_none()).count() as u64;
        module.counters.eval_errors.fetch_add(errors, Ordering::Relaxed);
        Ok(answers.into_iter().map(|a| a == Some(true)).collect())
    }

    /// Each message's answer: `None` where the plugin said "error".
    fn filter_answers(
        &self,
        module: &LoadedModule,
        expression: &str,
        entries: &[&StoredEntry],
        now_ms: i64,
        buf: &mut Vec<u8>,
    ) -> Result<Vec<Option<bool>>, PluginError> {
        let mut w = BatchWriter::new(buf, now_ms, module.manifest.bodies);
        for e in entries {
            push_entry(&mut w, e, 0, 0);
        }
        let mut fuel = self.limits.filter_fuel_per_call + self.limits.filter_fuel_per_message * entries.len() as u64;
        if module.manifest.bodies {
            fuel += FUEL_PER_BODY_BYTE * entries.iter().map(|e| e.message.body.len() as u64).sum::<u64>();
        }
        let answers = module.call(expression, buf, entries.len(), fuel)?;
        answers
            .iter()
            .map(|&a| match a {
                1 => Ok(Some(true)),
                0 => Ok(Some(false)),
                0xFF => Ok(None),
                other => Err(PluginError::Malformed(format!("filter answered {other}"))),
            })
            .collect()
    }

    /// One message through a filter, its failure reported (`plugin eval`).
    pub fn filter_one(
        &self,
        module: &LoadedModule,
        expression: &str,
        entry: &StoredEntry,
        now_ms: i64,
    ) -> Result<bool, PluginError> {
        let answers = self.filter_answers(module, expression, &[entry], now_ms, &mut Vec::new())?;
        answers[0].ok_or_else(|| {
            PluginError::Failed(
                module.last_reason().unwrap_or_else(|| "the filter could not evaluate this message".into()),
            )
        })
    }

    /// Asks a transaction checker about one half message.
    pub fn check(
        &self,
        module: &LoadedModule,
        config: &str,
        entry: &StoredEntry,
        age_ms: i64,
        checks: u32,
        now_ms: i64,
    ) -> Result<rockraft_plugin_sdk::Decision, PluginError> {
        let mut buf = Vec::new();
        let mut w = BatchWriter::new(&mut buf, now_ms, module.manifest.bodies);
        push_entry(&mut w, entry, age_ms, checks);
        let answers = module.call(config, &buf, 1, self.limits.checker_fuel_per_message);
        let answer = answers.and_then(|a| {
            rockraft_plugin_sdk::Decision::from_code(a[0])
                .ok_or_else(|| PluginError::Malformed(format!("checker answered {}", a[0])))
        });
        if let Err(e) = &answer {
            self.log_failure(module, e);
        }
        answer
    }
}

/// Adds one stored message to a batch. `attempts`: deliveries (filters) or checks (checkers) so far.
fn push_entry(w: &mut BatchWriter, e: &StoredEntry, age_ms: i64, attempts: u32) {
    let m = &e.message;
    let data = MessageData {
        queue_offset: e.offset,
        queue_id: e.queue_id,
        store_ms: e.store_timestamp_ms,
        born_ms: m.born_timestamp_ms,
        attempts,
        age_ms,
        topic: &e.topic,
        tag: &m.tag,
        keys: &m.keys,
        properties: &[],
        body: &m.body,
    };
    w.push_with(&data, m.properties.iter().map(|(k, v)| (k.as_str(), v.as_str())));
}

/// Runs `f`, which may spend up to a plugin call's limit of CPU, without holding up the async
/// tasks of this worker thread.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// One host for a test process: compiling the built-in modules takes a while in debug builds.
#[cfg(test)]
pub fn test_host() -> &'static Arc<PluginHost> {
    static HOST: OnceLock<Arc<PluginHost>> = OnceLock::new();
    HOST.get_or_init(|| Arc::new(PluginHost::new(PluginLimits::default()).expect("plugin engine")))
}
