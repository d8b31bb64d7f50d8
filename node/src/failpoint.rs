//! Crash points: named places in the write paths where a test can make the node fail, to prove
//! that whatever a crash leaves on disk recovers to the state of the other replicas.
//!
//! `crash_point!("name")` goes in a function returning `Result<_, E>` with `E: From<StoreError>`.
//! It is compiled in only with the `failpoints` cargo feature (release builds leave it out) and
//! is configured like any `fail` point, by `fail::cfg` or `FAILPOINTS=name=ACTIONS`:
//! - `return`: the function fails right there with an injected I/O error. An in-process test then
//!   drops its handles and reopens the directory, which is what a process crash leaves behind
//!   (the page cache survives a process crash, so every completed write is still there).
//! - `return(abort)`: the process aborts right there (SIGABRT: no unwinding, no flush), for the
//!   multi-process crash suite.
//!
//! Counts work as in `fail`: `3*off->return(abort)` aborts on the fourth pass.

use crate::store::StoreError;

/// The error an armed crash point raises, or the abort it asked for.
pub fn injected(name: &str, arg: Option<&str>) -> StoreError {
    if arg == Some("abort") {
        eprintln!("crash point {name}: aborting");
        std::process::abort();
    }
    StoreError::Io {
        path: std::path::PathBuf::from(format!("<crash point {name}>")),
        source: std::io::Error::other(format!("injected failure at crash point {name}")),
    }
}

/// See the module docs.
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        ::fail::fail_point!($name, |arg: Option<String>| Err($crate::failpoint::injected($name, arg.as_deref()).into()))
    };
}

/// Reads `FAILPOINTS` from the environment (a no-op without the `failpoints` feature). Held for
/// the life of the process.
pub fn from_env() -> fail::FailScenario<'static> {
    fail::FailScenario::setup()
}
