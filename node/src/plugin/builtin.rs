//! The plugins built into the node, compiled from `plugins/` to wasm32 by `build.rs`. They use
//! the same ABI as user plugins; their names are reserved.

use crate::plugin::PluginKind;

pub const TAG: &str = "tag";
pub const SQL92: &str = "sql92";
pub const DEFAULT_TX_CHECKER: &str = "default-tx-checker";

pub const NAMES: [&str; 3] = [TAG, SQL92, DEFAULT_TX_CHECKER];

static TAG_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tag.wasm"));
static SQL92_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sql92.wasm"));
static DEFAULT_TX_CHECKER_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/default_tx_checker.wasm"));

/// The module and kind of a built-in plugin.
pub fn module(name: &str) -> Option<(&'static [u8], PluginKind)> {
    match name {
        TAG => Some((TAG_WASM, PluginKind::Filter)),
        SQL92 => Some((SQL92_WASM, PluginKind::Filter)),
        DEFAULT_TX_CHECKER => Some((DEFAULT_TX_CHECKER_WASM, PluginKind::TxChecker)),
        _ => None,
    }
}
