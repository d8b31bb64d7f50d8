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
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use rockraft_plugin_sdk::{BatchWriter, MessageData};
use serde::{Deserialize, Serialize};
use wasmtime::Engine;

use crate::broker::plugins::{FilterUnavailable, PluginCommand, PluginTables, Quarantine};
pub use crate::broker::plugins::{PluginKind, module_hash};
use crate::broker::{BrokerError, StoredEntry, StoredView};
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
    /// The host could not run the plugin at all (no instance, no buffer, the configuration not
    /// opened): no message was looked at, so none may be treated as filtered out.
    #[error("plugin could not be run: {0}")]
    Unavailable(String),
    /// Failed too often; the cluster stopped calling it until an operator enables it again.
    #[error(
        "plugin {name} is quarantined: {failures} failures in {window_secs} s; re-enable with `rockraft plugin enable {name}`"
    )]
    Quarantined { name: String, failures: u32, window_secs: u64 },
}

impl PluginError {
    /// Whether the same bytes fail this way every time (so the failure may be cached by hash).
    fn is_deterministic(&self) -> bool {
        matches!(self, PluginError::Invalid(_) | PluginError::Malformed(_) | PluginError::Rejected(_))
    }

    /// Whether the failure says nothing about the messages of the call: the plugin was not run.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            PluginError::Unavailable(_)
                | PluginError::Engine(_)
                | PluginError::NotFound(_)
                | PluginError::Quarantined { .. }
        )
    }
}

/// Limits on plugins; `[plugins]` in the node's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginLimits {
    /// Memory one filter instance may grow to: linear memory and tables together.
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
    /// Moved to the replicated cluster settings (`rockraft cluster configure
    /// --max-module-bytes`): a node with a smaller limit than its peers could not load a plugin
    /// they had accepted. Refused here with a pointer there.
    pub max_module_bytes: Option<u64>,
    /// A registered plugin whose calls fail this many times ...
    pub quarantine_failures: u32,
    /// ... within this many seconds is quarantined: not called until `rockraft plugin enable`.
    pub quarantine_window_secs: u64,
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
            max_module_bytes: None,
            quarantine_failures: 100,
            quarantine_window_secs: 60,
        }
    }
}

/// What compiling a plugin needs, copied out of the broker's state: a module is compiled with
/// no lock held (a large one takes seconds in a debug build, and apply waits for the write lock).
#[derive(Clone)]
pub struct ModuleSource {
    pub name: String,
    /// The key it is compiled under: the module's hash, or `builtin:NAME`.
    pub hash: String,
    pub kind: PluginKind,
    /// Shared with the broker's table: cloning copies nothing.
    pub bytes: Bytes,
}

impl fmt::Debug for ModuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleSource").field("name", &self.name).field("hash", &self.hash).finish_non_exhaustive()
    }
}

impl ModuleSource {
    /// The plugin `name` of `kind`: registered in `tables`, or built in. Compiles nothing, so it
    /// may be called under the broker's lock.
    pub fn find(tables: &PluginTables, name: &str, kind: PluginKind) -> Result<ModuleSource, PluginError> {
        match tables.modules.get(name) {
            Some(r) if r.kind != kind => {
                Err(PluginError::Invalid(format!("plugin {name} is a {}, not a {kind}", r.kind)))
            }
            Some(r) => match &r.quarantine {
                Some(q) => Err(PluginError::Quarantined {
                    name: name.to_string(),
                    failures: q.failures,
                    window_secs: q.window_secs,
                }),
                None => {
                    Ok(ModuleSource { name: name.to_string(), hash: r.hash.clone(), kind, bytes: r.module.clone() })
                }
            },
            None => {
                let source = ModuleSource::builtin(name)?;
                if source.kind != kind {
                    return Err(PluginError::Invalid(format!("plugin {name} is a {}, not a {kind}", source.kind)));
                }
                Ok(source)
            }
        }
    }

    pub fn builtin(name: &str) -> Result<ModuleSource, PluginError> {
        let (bytes, kind) = builtin::module(name).ok_or_else(|| PluginError::NotFound(name.to_string()))?;
        Ok(ModuleSource {
            name: name.to_string(),
            hash: format!("builtin:{name}"),
            kind,
            bytes: Bytes::from_static(bytes),
        })
    }
}

/// The one compilation of a module under way: those who need it meanwhile wait for it.
type Compiling = OnceLock<Result<Arc<LoadedModule>, PluginError>>;

/// A module in the host's cache.
enum Slot {
    /// `failures`: transient failures before this attempt (for the backoff after another).
    Compiling {
        cell: Arc<Compiling>,
        failures: u32,
    },
    Ready(Arc<LoadedModule>),
    /// These bytes are not a usable module, and never will be: kept so they are not compiled again.
    Refused(PluginError),
    /// The compilation failed for a reason that may pass; compiled again from `retry_at`.
    Failed {
        error: PluginError,
        failures: u32,
        retry_at: Instant,
    },
}

/// The wait before compiling again after `failures` transient failures in a row.
fn backoff(failures: u32) -> Duration {
    (RETRY_FIRST * 2u32.saturating_pow(failures.saturating_sub(1))).min(RETRY_MAX)
}

const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Compiles and caches modules, and runs them with the node's limits.
pub struct PluginHost {
    engine: Engine,
    limits: PluginLimits,
    /// Compiled modules (or why they do not load) by (hash, kind).
    slots: Mutex<HashMap<(String, PluginKind), Slot>>,
    /// When a plugin failure was last logged, so a poison message does not flood the log.
    last_logged_ms: AtomicI64,
    /// Run before each compilation, failing it if it answers an error (tests).
    #[cfg(test)]
    compile_hook: Mutex<Option<CompileHook>>,
}

#[cfg(test)]
type CompileHook = Arc<dyn Fn() -> Result<(), PluginError> + Send + Sync>;

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
            slots: Mutex::new(HashMap::new()),
            last_logged_ms: AtomicI64::new(0),
            #[cfg(test)]
            compile_hook: Mutex::new(None),
        })
    }

    pub fn limits(&self) -> &PluginLimits {
        &self.limits
    }

    /// The module with these bytes, compiled once and checked to be a `kind`. Compiles: call it
    /// off the async workers and with no lock held.
    pub fn load(&self, bytes: &[u8], kind: PluginKind) -> Result<Arc<LoadedModule>, PluginError> {
        self.compile_keyed(module_hash(bytes), kind, bytes)
    }

    /// A built-in plugin (compiles it the first time: as `load`).
    pub fn builtin(&self, name: &str) -> Result<Arc<LoadedModule>, PluginError> {
        self.compiled(&ModuleSource::builtin(name)?)
    }

    /// The module of `source`, compiled once. Compiles: call it off the async workers
    /// ([`blocking`] or `spawn_blocking`) and with no lock held. A module that failed to compile
    /// for a reason that may pass is compiled again after a backoff; one whose bytes are invalid
    /// is refused by its hash without compiling again.
    pub fn compiled(&self, source: &ModuleSource) -> Result<Arc<LoadedModule>, PluginError> {
        self.compile_keyed(source.hash.clone(), source.kind, &source.bytes)
    }

    /// Whether `source` is neither compiled, being compiled, refused, nor waiting out a backoff.
    pub fn needs_compiling(&self, source: &ModuleSource) -> bool {
        let slots = self.slots.lock().expect("plugin modules");
        match slots.get(&(source.hash.clone(), source.kind)) {
            None => true,
            Some(Slot::Failed { retry_at, .. }) => Instant::now() >= *retry_at,
            Some(_) => false,
        }
    }

    fn compile_keyed(&self, hash: String, kind: PluginKind, bytes: &[u8]) -> Result<Arc<LoadedModule>, PluginError> {
        let key = (hash, kind);
        let cell = {
            let mut slots = self.slots.lock().expect("plugin modules");
            let (compiling, failures) = match slots.get(&key) {
                Some(Slot::Ready(m)) => return Ok(Arc::clone(m)),
                Some(Slot::Refused(e)) => return Err(e.clone()),
                Some(Slot::Failed { error, retry_at, .. }) if Instant::now() < *retry_at => return Err(error.clone()),
                Some(Slot::Failed { failures, .. }) => (None, *failures),
                Some(Slot::Compiling { cell, .. }) => (Some(Arc::clone(cell)), 0),
                None => (None, 0),
            };
            match compiling {
                Some(cell) => cell,
                None => {
                    if slots.len() >= MAX_LOADED {
                        slots.retain(|_, s| matches!(s, Slot::Compiling { .. }));
                    }
                    let cell = Arc::new(Compiling::new());
                    slots.insert(key.clone(), Slot::Compiling { cell: Arc::clone(&cell), failures });
                    cell
                }
            }
        };
        // Compiled outside the map's lock, and once: concurrent first users wait for the one
        // compilation.
        let result = cell
            .get_or_init(|| {
                #[cfg(test)]
                self.run_compile_hook()?;
                LoadedModule::load(&self.engine, key.0.clone(), bytes, kind, self.limits).map(Arc::new)
            })
            .clone();
        let mut slots = self.slots.lock().expect("plugin modules");
        if let Some(Slot::Compiling { cell: current, failures }) = slots.get(&key)
            && Arc::ptr_eq(current, &cell)
        {
            let settled = match &result {
                Ok(m) => Slot::Ready(Arc::clone(m)),
                Err(e) if e.is_deterministic() => Slot::Refused(e.clone()),
                Err(e) => {
                    let failures = failures + 1;
                    tracing::warn!(hash = %key.0, error = %e, failures, "compiling a plugin failed; trying again later");
                    Slot::Failed { error: e.clone(), failures, retry_at: Instant::now() + backoff(failures) }
                }
            };
            slots.insert(key, settled);
        }
        result
    }

    /// Runs `hook` at the start of every compilation; an error it answers fails the compilation.
    #[cfg(test)]
    pub fn on_compile(&self, hook: impl Fn() -> Result<(), PluginError> + Send + Sync + 'static) {
        *self.compile_hook.lock().expect("compile hook") = Some(Arc::new(hook));
    }

    #[cfg(test)]
    fn run_compile_hook(&self) -> Result<(), PluginError> {
        let hook = self.compile_hook.lock().expect("compile hook").clone();
        hook.map_or(Ok(()), |hook| hook())
    }

    /// The built-in and registered modules (of `tables`) not compiled here yet, or due another
    /// try: what the background warm-up compiles. Quarantined plugins are left until enabled.
    pub fn uncompiled(&self, tables: &PluginTables) -> Vec<ModuleSource> {
        let builtins = builtin::NAMES.iter().filter_map(|name| ModuleSource::builtin(name).ok());
        let registered = tables.modules.iter().filter_map(|(name, r)| ModuleSource::find(tables, name, r.kind).ok());
        builtins.chain(registered).filter(|s| self.needs_compiling(s)).collect()
    }

    /// The quarantines to propose: for each registered plugin (of `tables`) whose module failed
    /// `quarantine_failures` times within `quarantine_window_secs` here. A module's count starts
    /// afresh once its quarantine is applied, so an enabled plugin is judged on its calls since.
    pub fn quarantines(&self, tables: &PluginTables, now_ms: i64) -> Vec<PluginCommand> {
        let mut out = Vec::new();
        for module in self.loaded() {
            let users = tables.modules.iter().filter(|(_, r)| r.hash == module.hash && r.kind == module.kind);
            let (quarantined, active): (Vec<_>, Vec<_>) = users.partition(|(_, r)| r.quarantine.is_some());
            if !quarantined.is_empty() {
                module.forget_failures();
                continue;
            }
            let Some(failures) = module.failing() else { continue };
            for (name, _) in active {
                out.push(PluginCommand::Quarantine {
                    name: name.clone(),
                    hash: module.hash.clone(),
                    quarantine: Quarantine {
                        failures,
                        window_secs: self.limits.quarantine_window_secs,
                        since_ms: now_ms,
                    },
                });
            }
        }
        out
    }

    /// Every module compiled here, for metrics.
    pub fn loaded(&self) -> Vec<Arc<LoadedModule>> {
        let slots = self.slots.lock().expect("plugin modules");
        slots.values().filter_map(|s| if let Slot::Ready(m) = s { Some(Arc::clone(m)) } else { None }).collect()
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

    /// Which `messages` pass the filter `module` compiled from `expression`. A message the call
    /// fails on (trap, fuel, evaluation error) does not pass; a failed batch is run again one
    /// message at a time so only the message it fails on is affected. If the host cannot run the
    /// plugin at all on a message (no instance, no buffer), that message and the ones after it
    /// are left undecided: `Err` carries the answers before it.
    pub fn filter(
        &self,
        module: &LoadedModule,
        expression: &str,
        messages: &[StoredView],
        now_ms: i64,
    ) -> Result<Vec<bool>, FilterUnavailable> {
        let mut passed = Vec::with_capacity(messages.len());
        // The encoding buffer is kept per thread: pops filter often.
        let mut buf = BATCH_BUFFER.with(|b| std::mem::take(&mut *b.borrow_mut()));
        let mut stopped = None;
        'chunks: for chunk in messages.chunks(self.limits.filter_batch.max(1)) {
            if chunk.len() > 1 {
                match self.filter_call(module, expression, chunk, now_ms, &mut buf) {
                    Ok(answers) => {
                        passed.extend(answers);
                        continue;
                    }
                    Err(e) => self.log_failure(module, &e),
                }
            }
            // One message at a time: a batch of one, or a batch that failed.
            for one in chunk {
                match self.filter_call(module, expression, std::slice::from_ref(one), now_ms, &mut buf) {
                    Ok(answer) => passed.push(answer[0]),
                    Err(e) if e.is_unavailable() => {
                        self.log_failure(module, &e);
                        stopped = Some(e);
                        break 'chunks;
                    }
                    // The plugin failed on this message: it counts as no match.
                    Err(e) => {
                        self.log_failure(module, &e);
                        passed.push(false);
                    }
                }
            }
        }
        if buf.capacity() <= MAX_KEPT_BUFFER {
            BATCH_BUFFER.with(|b| *b.borrow_mut() = buf);
        }
        match stopped {
            None => Ok(passed),
            Some(e) => {
                Err(FilterUnavailable { decided: passed, reason: format!("filter {}: {e}", module.manifest.name) })
            }
        }
    }

    fn filter_call(
        &self,
        module: &LoadedModule,
        expression: &str,
        messages: &[StoredView],
        now_ms: i64,
        buf: &mut Vec<u8>,
    ) -> Result<Vec<bool>, PluginError> {
        let answers = self.filter_answers(module, expression, messages, now_ms, buf)?;
        let errors = answers.iter().filter(|a| a.is_none()).count() as u64;
        module.counters.eval_errors.fetch_add(errors, Ordering::Relaxed);
        Ok(answers.into_iter().map(|a| a == Some(true)).collect())
    }

    /// Each message's answer: `None` where the plugin said "error".
    fn filter_answers(
        &self,
        module: &LoadedModule,
        expression: &str,
        messages: &[StoredView],
        now_ms: i64,
        buf: &mut Vec<u8>,
    ) -> Result<Vec<Option<bool>>, PluginError> {
        let mut w = BatchWriter::new(buf, now_ms, module.manifest.bodies);
        for m in messages {
            push_view(&mut w, m, 0, 0);
        }
        let mut fuel = self.limits.filter_fuel_per_call + self.limits.filter_fuel_per_message * messages.len() as u64;
        if module.manifest.bodies {
            fuel += FUEL_PER_BODY_BYTE * messages.iter().map(|m| m.message.body.len() as u64).sum::<u64>();
        }
        let answers = module.call(expression, buf, messages.len(), fuel)?;
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
        let view = entry.view().map_err(unreadable)?;
        let answers = self.filter_answers(module, expression, &[view], now_ms, &mut Vec::new())?;
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
        let answers = entry.view().map_err(unreadable).and_then(|view| {
            let mut buf = Vec::new();
            let mut w = BatchWriter::new(&mut buf, now_ms, module.manifest.bodies);
            push_view(&mut w, &view, age_ms, checks);
            module.call(config, &buf, 1, self.limits.checker_fuel_per_message)
        });
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

/// A message the host could not read to hand it to a plugin (the plugin never saw it).
fn unreadable(e: BrokerError) -> PluginError {
    PluginError::Unavailable(format!("the message cannot be read: {e}"))
}

/// Adds one stored message to a batch, written straight from its encoded form.
/// `attempts`: deliveries (filters) or checks (checkers) so far.
fn push_view(w: &mut BatchWriter, v: &StoredView, age_ms: i64, attempts: u32) {
    let m = &v.message;
    let data = MessageData {
        queue_offset: v.offset,
        queue_id: v.queue_id,
        store_ms: v.store_timestamp_ms,
        born_ms: m.born_timestamp_ms,
        attempts,
        age_ms,
        topic: v.topic,
        tag: m.tag,
        keys: &[],
        properties: &[],
        body: m.body,
    };
    w.push_parts(&data, m.keys(), m.properties());
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
