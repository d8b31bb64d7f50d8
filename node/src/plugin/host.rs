//! Runs plugin modules under wasmtime: compiled once per module, instances reused, every call
//! bounded by fuel and a memory cap, and every pointer a guest answers bounds-checked.
//!
//! A failed call (trap, fuel exhausted, memory cap, a malformed answer) drops the instance it ran
//! in; the next call instantiates afresh, so a half-updated guest heap is never reused.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use rockraft_plugin_sdk::{KIND_FILTER, KIND_TX_CHECKER};
use serde::{Deserialize, Serialize};
use wasmtime::{Engine, Instance, Memory, Module, ResourceLimiter, Store, Trap, TypedFunc};

use crate::broker::plugins::MAX_MODULE_BYTES;
use crate::plugin::{PluginError, PluginKind, PluginLimits, call_export};

/// Fuel for a call that only allocates or compiles an expression.
const SETUP_FUEL: u64 = 5_000_000;
/// Open handles kept per instance (one per distinct expression); beyond it they are all closed.
const HANDLES_PER_INSTANCE: usize = 1024;
/// Instances of one module alive at once (in use or idle) at most: with the memory cap, this bounds
/// what one plugin can hold. A call that finds them all in use waits for one.
fn max_instances() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8)
}
/// What one table element costs the host (a function reference is a pointer).
const TABLE_ELEMENT_BYTES: usize = 8;
/// Table elements one instance may have in all, whatever its memory cap (real plugins have a few
/// hundred to a few thousand).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;
/// The marker export of the one ABI major version this host speaks.
pub const ABI_MARKER: &str = "rockraft_abi_v1";

/// What a module says about itself (`rockraft_manifest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub kinds: Vec<String>,
    /// Whether the plugin reads message bodies (the host reads and passes them only then).
    #[serde(default)]
    pub bodies: bool,
}

/// Calls made, messages looked at, and failures, per module.
#[derive(Debug, Default)]
pub struct CallCounters {
    pub calls: AtomicU64,
    pub messages: AtomicU64,
    pub failures: AtomicU64,
    /// Messages the plugin itself answered "error" for.
    pub eval_errors: AtomicU64,
    pub instances_built: AtomicU64,
    /// Fuel burned by batch calls, and the time they took.
    pub fuel: AtomicU64,
    pub busy_nanos: AtomicU64,
}

/// A module compiled for this node, with its idle instances.
pub struct LoadedModule {
    pub manifest: Manifest,
    /// The key it was compiled under: the module's hash, or `builtin:NAME`.
    pub hash: String,
    pub kind: PluginKind,
    module: Module,
    pool: Mutex<Pool>,
    /// Signalled when an instance is given back or dropped.
    returned: Condvar,
    pub counters: CallCounters,
    limits: PluginLimits,
    /// When recent calls failed (at most `quarantine_failures` kept), for quarantine.
    recent_failures: Mutex<VecDeque<Instant>>,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Guest>,
    /// Instances alive: idle, or in a call.
    live: usize,
}

/// Caps what one instance holds. Linear memory and table elements count together against the
/// plugin's memory cap: a table grown by `table.grow` is host memory too.
struct GuestState {
    cap: usize,
    memory_bytes: usize,
    table_elements: usize,
}

impl GuestState {
    fn fits(&self, memory_bytes: usize, table_elements: usize) -> bool {
        table_elements <= MAX_TABLE_ELEMENTS
            && memory_bytes.saturating_add(table_elements.saturating_mul(TABLE_ELEMENT_BYTES)) <= self.cap
    }
}

impl ResourceLimiter for GuestState {
    fn memory_growing(&mut self, current: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        let memory_bytes = self.memory_bytes.saturating_sub(current).saturating_add(desired);
        let fits = self.fits(memory_bytes, self.table_elements);
        if fits {
            self.memory_bytes = memory_bytes;
        }
        Ok(fits)
    }

    fn table_growing(&mut self, current: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        let table_elements = self.table_elements.saturating_sub(current).saturating_add(desired);
        let fits = self.fits(self.memory_bytes, table_elements);
        if fits {
            self.table_elements = table_elements;
        }
        Ok(fits)
    }

    fn instances(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        4
    }

    fn memories(&self) -> usize {
        1
    }
}

/// One instance of a module and the exports the ABI uses.
struct Guest {
    store: Store<GuestState>,
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    open: TypedFunc<(i32, i32, i32), i32>,
    close: TypedFunc<i32, ()>,
    last_error: TypedFunc<(), i64>,
    call: TypedFunc<(i32, i32, i32, i32, i32), i32>,
    manifest: TypedFunc<(), i64>,
    /// Expression (or configuration) → open handle.
    handles: HashMap<String, i32>,
    /// Fuel the last batch call burned.
    fuel_used: u64,
}

/// The engine every module of this node is compiled with.
pub fn engine() -> Result<Engine, PluginError> {
    let mut config = wasmtime::Config::new();
    config.consume_fuel(true);
    // A deep recursion traps instead of growing the host's stack.
    config.max_wasm_stack(256 << 10);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    Engine::new(&config).map_err(|e| PluginError::Engine(e.to_string()))
}

impl LoadedModule {
    /// Compiles and checks a module: no imports, the ABI marker, the exports its kind needs,
    /// and a manifest naming that kind.
    pub fn load(
        engine: &Engine,
        hash: String,
        bytes: &[u8],
        kind: PluginKind,
        limits: PluginLimits,
    ) -> Result<LoadedModule, PluginError> {
        // What registration accepts is the cluster's `max_module_bytes`, checked when it is
        // proposed and applied; every node loads what was accepted, up to the hard cap.
        if bytes.len() > MAX_MODULE_BYTES {
            return Err(PluginError::Invalid(format!(
                "module of {} bytes exceeds the limit of {MAX_MODULE_BYTES} bytes",
                bytes.len()
            )));
        }
        let module =
            Module::new(engine, bytes).map_err(|e| PluginError::Invalid(format!("not a valid WASM module: {e:#}")))?;
        if let Some(import) = module.imports().next() {
            return Err(PluginError::Invalid(format!(
                "the module imports {}::{}; plugins may import nothing (build for wasm32-unknown-unknown, without WASI)",
                import.module(),
                import.name()
            )));
        }
        let exports: Vec<&str> = module.exports().map(|e| e.name()).collect();
        if !exports.contains(&ABI_MARKER) {
            let other = exports.iter().find(|e| e.starts_with("rockraft_abi_v"));
            return Err(PluginError::Invalid(match other {
                Some(v) => format!(
                    "the module speaks plugin ABI {}, this node speaks {ABI_MARKER}",
                    v.trim_start_matches("rockraft_abi_")
                ),
                None => format!("the module has no {ABI_MARKER} export: build it with rockraft-plugin-sdk"),
            }));
        }
        let call = call_export(kind);
        for needed in [
            "memory",
            "rockraft_manifest",
            "rockraft_alloc",
            "rockraft_open",
            "rockraft_close",
            "rockraft_last_error",
            call,
        ] {
            if !exports.contains(&needed) {
                return Err(PluginError::Invalid(format!("the module does not export {needed} (a {kind} needs it)")));
            }
        }
        let mut loaded = LoadedModule {
            manifest: Manifest { name: String::new(), version: String::new(), kinds: Vec::new(), bodies: false },
            hash,
            kind,
            module,
            pool: Mutex::new(Pool::default()),
            returned: Condvar::new(),
            counters: CallCounters::default(),
            limits,
            recent_failures: Mutex::new(VecDeque::new()),
        };
        let mut guest = loaded.instantiate()?;
        loaded.manifest = guest.manifest()?;
        if !loaded.manifest.kinds.iter().any(|k| k == kind.as_str()) {
            return Err(PluginError::Invalid(format!(
                "the module's manifest says it is {:?}, not a {kind}",
                loaded.manifest.kinds
            )));
        }
        let pool = loaded.pool.get_mut().expect("instances");
        pool.idle.push(guest);
        pool.live = 1;
        Ok(loaded)
    }

    fn memory_cap(&self) -> usize {
        match self.kind {
            PluginKind::Filter => self.limits.filter_memory_bytes,
            PluginKind::TxChecker => self.limits.checker_memory_bytes,
        }
    }

    fn instantiate(&self) -> Result<Guest, PluginError> {
        self.counters.instances_built.fetch_add(1, Ordering::Relaxed);
        let limits = GuestState { cap: self.memory_cap(), memory_bytes: 0, table_elements: 0 };
        let mut store = Store::new(self.module.engine(), limits);
        store.limiter(|s| s);
        store.set_fuel(SETUP_FUEL).map_err(fault)?;
        let instance = Instance::new(&mut store, &self.module, &[]).map_err(fault)?;
        let memory =
            instance.get_memory(&mut store, "memory").ok_or_else(|| PluginError::Invalid("no memory".into()))?;
        let call = call_export(self.kind);
        let typed =
            |what: &str, e: wasmtime::Error| PluginError::Invalid(format!("{what} has the wrong signature: {e}"));
        Ok(Guest {
            alloc: instance.get_typed_func(&mut store, "rockraft_alloc").map_err(|e| typed("rockraft_alloc", e))?,
            open: instance.get_typed_func(&mut store, "rockraft_open").map_err(|e| typed("rockraft_open", e))?,
            close: instance.get_typed_func(&mut store, "rockraft_close").map_err(|e| typed("rockraft_close", e))?,
            last_error: instance
                .get_typed_func(&mut store, "rockraft_last_error")
                .map_err(|e| typed("rockraft_last_error", e))?,
            call: instance.get_typed_func(&mut store, call).map_err(|e| typed(call, e))?,
            manifest: instance
                .get_typed_func(&mut store, "rockraft_manifest")
                .map_err(|e| typed("rockraft_manifest", e))?,
            memory,
            store,
            handles: HashMap::new(),
            fuel_used: 0,
        })
    }

    /// Takes an idle instance, or builds one, or waits for one if as many as may be are alive.
    fn guest(&self) -> Result<Guest, PluginError> {
        let mut pool = self.pool.lock().expect("instances");
        loop {
            if let Some(g) = pool.idle.pop() {
                return Ok(g);
            }
            if pool.live < max_instances() {
                pool.live += 1;
                break;
            }
            pool = self.returned.wait(pool).expect("instances");
        }
        drop(pool);
        self.instantiate().inspect_err(|_| self.discard(None))
    }

    fn give_back(&self, guest: Guest) {
        self.pool.lock().expect("instances").idle.push(guest);
        self.returned.notify_one();
    }

    /// Drops an instance (after a failed call: its heap may be half-updated).
    fn discard(&self, guest: Option<Guest>) {
        self.pool.lock().expect("instances").live -= 1;
        self.returned.notify_one();
        drop(guest);
    }

    /// Instances of this module alive now (idle or in a call).
    pub fn live_instances(&self) -> usize {
        self.pool.lock().expect("instances").live
    }

    /// Counts a failed call toward quarantine.
    fn failed(&self) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        let keep = self.limits.quarantine_failures as usize;
        if keep == 0 || self.hash.starts_with("builtin:") {
            return;
        }
        let mut recent = self.recent_failures.lock().expect("recent failures");
        recent.push_back(Instant::now());
        while recent.len() > keep {
            recent.pop_front();
        }
    }

    /// The failures counted in the last `quarantine_window_secs`, if as many as
    /// `quarantine_failures`: the plugin should be quarantined. Built-in plugins never are.
    pub fn failing(&self) -> Option<u32> {
        let threshold = self.limits.quarantine_failures as usize;
        if threshold == 0 {
            return None;
        }
        let window = Duration::from_secs(self.limits.quarantine_window_secs);
        let recent = self.recent_failures.lock().expect("recent failures");
        let counted = recent.iter().filter(|t| t.elapsed() <= window).count();
        (counted >= threshold).then_some(counted as u32)
    }

    /// Starts counting failures afresh (the plugin was quarantined).
    pub fn forget_failures(&self) {
        self.recent_failures.lock().expect("recent failures").clear();
    }

    /// Compiles `expression` in a guest: `Err(PluginError::Rejected)` carries the plugin's reason.
    pub fn check_expression(&self, expression: &str) -> Result<(), PluginError> {
        let mut guest = self.guest()?;
        let opened = guest.handle(self.kind, expression);
        match opened {
            Ok(_) => {
                self.give_back(guest);
                Ok(())
            }
            Err(e @ PluginError::Rejected(_)) => {
                self.give_back(guest);
                Err(e)
            }
            Err(e) => {
                self.discard(Some(guest));
                self.failed();
                Err(e)
            }
        }
    }

    /// The reason the guest gave for its last failure or "error" answer, asked of the instance
    /// that just answered (the most recently returned one).
    pub fn last_reason(&self) -> Option<String> {
        let mut guest = self.pool.lock().expect("instances").idle.pop()?;
        let reason =
            guest.store.set_fuel(SETUP_FUEL).ok().and_then(|()| guest.last_error.call(&mut guest.store, ()).ok());
        let text = reason.and_then(|packed| guest.text(packed).ok());
        self.give_back(guest);
        text.filter(|t| !t.is_empty())
    }

    /// Runs the module's batch call (`rockraft_filter` or `rockraft_tx_check`) on an encoded
    /// batch of `count` messages; one answer byte per message. `Err(Unavailable)`: the plugin was
    /// not run on the batch (no instance, the expression not opened, no buffer for the batch).
    pub fn call(&self, expression: &str, batch: &[u8], count: usize, fuel: u64) -> Result<Vec<u8>, PluginError> {
        if let Some(failures) = self.failing() {
            // Being quarantined: calling it again would only fail again (and skip messages).
            return Err(PluginError::Unavailable(format!(
                "it failed {failures} times in {} s and is being quarantined",
                self.limits.quarantine_window_secs
            )));
        }
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        self.counters.messages.fetch_add(count as u64, Ordering::Relaxed);
        let mut guest = match self.guest() {
            Ok(g) => g,
            Err(e) => {
                self.failed();
                return Err(PluginError::Unavailable(format!("no instance: {e}")));
            }
        };
        let started = tokio::time::Instant::now();
        let ran = guest.run(self.kind, expression, batch, count, fuel);
        self.counters.busy_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.counters.fuel.fetch_add(std::mem::take(&mut guest.fuel_used), Ordering::Relaxed);
        match ran {
            Ok(out) => {
                self.give_back(guest);
                Ok(out)
            }
            Err(e) => {
                // The instance is dropped: its heap may be half-updated.
                self.discard(Some(guest));
                self.failed();
                Err(e)
            }
        }
    }
}

/// A failure inside the guest or at the boundary, named for logs and metrics.
fn fault(e: wasmtime::Error) -> PluginError {
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => PluginError::OutOfFuel,
        Some(trap) => PluginError::Trap(trap.to_string()),
        None => PluginError::Trap(format!("{e:#}")),
    }
}

/// Splits a packed (pointer << 32 | length) answer.
fn unpack(packed: i64) -> (usize, usize) {
    let p = packed as u64;
    ((p >> 32) as usize, (p & 0xFFFF_FFFF) as usize)
}

/// Longest manifest or error message read from a guest.
const MAX_GUEST_TEXT: usize = 64 << 10;

impl Guest {
    /// Reads `len` bytes at `ptr` of guest memory, or says the guest answered out of bounds.
    fn read(&self, ptr: usize, len: usize) -> Result<Vec<u8>, PluginError> {
        let mut buf = vec![0; len];
        self.memory
            .read(&self.store, ptr, &mut buf)
            .map_err(|_| PluginError::Malformed(format!("{len} bytes at {ptr} lie outside the guest's memory")))?;
        Ok(buf)
    }

    fn text(&mut self, packed: i64) -> Result<String, PluginError> {
        let (ptr, len) = unpack(packed);
        if len > MAX_GUEST_TEXT {
            return Err(PluginError::Malformed(format!("a text of {len} bytes")));
        }
        Ok(String::from_utf8_lossy(&self.read(ptr, len)?).into_owned())
    }

    fn manifest(&mut self) -> Result<Manifest, PluginError> {
        self.store.set_fuel(SETUP_FUEL).map_err(fault)?;
        let packed = self.manifest.call(&mut self.store, ()).map_err(fault)?;
        let text = self.text(packed)?;
        serde_json::from_str(&text).map_err(|e| PluginError::Invalid(format!("unreadable manifest {text:?}: {e}")))
    }

    /// Asks for a guest buffer of `len` bytes and copies `bytes` to its start.
    fn stage(&mut self, bytes: &[u8], len: usize) -> Result<usize, PluginError> {
        let size = i32::try_from(len).map_err(|_| PluginError::Malformed("batch too large".into()))?;
        // Fuel of its own: never what an earlier call left.
        self.store.set_fuel(SETUP_FUEL).map_err(fault)?;
        let ptr = self.alloc.call(&mut self.store, size).map_err(fault)? as u32 as usize;
        if ptr.checked_add(len).is_none_or(|end| end > self.memory.data_size(&self.store)) {
            return Err(PluginError::Malformed(format!("rockraft_alloc({len}) answered {ptr}, outside its memory")));
        }
        self.memory.write(&mut self.store, ptr, bytes).map_err(|_| PluginError::Malformed("staging failed".into()))?;
        Ok(ptr)
    }

    /// The open handle for `expression`, opening it if needed.
    fn handle(&mut self, kind: PluginKind, expression: &str) -> Result<i32, PluginError> {
        if let Some(&h) = self.handles.get(expression) {
            return Ok(h);
        }
        if self.handles.len() >= HANDLES_PER_INSTANCE {
            self.store.set_fuel(SETUP_FUEL).map_err(fault)?;
            for (_, h) in self.handles.drain() {
                self.close.call(&mut self.store, h).map_err(fault)?;
            }
        }
        self.store.set_fuel(SETUP_FUEL).map_err(fault)?;
        let ptr = self.stage(expression.as_bytes(), expression.len())?;
        let code = match kind {
            PluginKind::Filter => KIND_FILTER,
            PluginKind::TxChecker => KIND_TX_CHECKER,
        };
        let h = self.open.call(&mut self.store, (code, ptr as i32, expression.len() as i32)).map_err(fault)?;
        if h < 0 {
            let packed = self.last_error.call(&mut self.store, ()).map_err(fault)?;
            return Err(PluginError::Rejected(self.text(packed)?));
        }
        self.handles.insert(expression.to_string(), h);
        Ok(h)
    }

    fn run(
        &mut self,
        kind: PluginKind,
        expression: &str,
        batch: &[u8],
        count: usize,
        fuel: u64,
    ) -> Result<Vec<u8>, PluginError> {
        // Failing here says nothing about the messages: none was looked at.
        let unavailable = |e: PluginError| PluginError::Unavailable(e.to_string());
        let handle = self.handle(kind, expression).map_err(unavailable)?;
        let ptr = self.stage(batch, batch.len() + count).map_err(unavailable)?;
        let out = ptr + batch.len();
        self.store.set_fuel(fuel).map_err(fault)?;
        let args = (handle, ptr as i32, batch.len() as i32, count as i32, out as i32);
        let called = self.call.call(&mut self.store, args);
        self.fuel_used = fuel.saturating_sub(self.store.get_fuel().unwrap_or(0));
        let rc = called.map_err(fault)?;
        if rc < 0 {
            self.store.set_fuel(SETUP_FUEL).map_err(fault)?;
            let packed = self.last_error.call(&mut self.store, ()).map_err(fault)?;
            return Err(PluginError::Failed(self.text(packed)?));
        }
        self.read(out, count)
    }
}
