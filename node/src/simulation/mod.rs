//! The seams a deterministic simulation (the `sim/` crate, on turmoil) swaps: the listeners, the
//! dialling of other nodes, the wall clock, randomness, and the disk syncs and blocking work that
//! otherwise run on threads.
//!
//! Every function here asks [`active`] first, which is true only on a thread that runs a
//! simulated host (and only in builds with the `sim` feature); everywhere else the node behaves
//! as it always does. The node's monotonic time is tokio's (`tokio::time::Instant`) throughout,
//! which a simulated host's runtime drives, so nothing else needs swapping.
//!
//! Below every other module: it imports none of them.

/// True while the calling thread runs a simulated host.
pub fn active() -> bool {
    #[cfg(feature = "sim")]
    {
        turmoil::in_simulation()
    }
    #[cfg(not(feature = "sim"))]
    {
        false
    }
}

/// The wall-clock time (ms since the Unix epoch) every simulation starts at, so every run of a
/// seed reads the same clock (the simulator gives turmoil the same epoch).
pub const EPOCH_MS: i64 = 1_800_000_000_000;

/// Milliseconds since the Unix epoch by the simulation's clock (its epoch plus the simulated time
/// run), or `None` outside a simulation.
pub fn wall_ms() -> Option<i64> {
    #[cfg(feature = "sim")]
    if active() {
        return Some(EPOCH_MS + turmoil::sim_elapsed()?.as_millis() as i64);
    }
    None
}

/// The wall clock as `SystemTime`: the simulation's inside one, the system's otherwise.
pub fn system_time() -> std::time::SystemTime {
    match wall_ms() {
        Some(ms) => std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64),
        None => std::time::SystemTime::now(),
    }
}

thread_local! {
    /// The simulation's random numbers: every simulated host runs on the simulator's one thread,
    /// in an order the seed fixes, so draws from one generator repeat with the seed.
    static RNG: std::cell::RefCell<Option<rand::rngs::SmallRng>> = const { std::cell::RefCell::new(None) };
}

/// Seeds the random numbers the nodes of a simulation draw (on the simulator's thread).
/// Wall milliseconds since the Unix epoch by [`system_time`]: for records of what a node did
/// (not for anything replicated state reads; leaders stamp those).
pub fn system_ms() -> i64 {
    system_time().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

pub fn seed(seed: u64) {
    use rand::SeedableRng;
    RNG.with(|rng| *rng.borrow_mut() = Some(rand::rngs::SmallRng::seed_from_u64(seed)));
}

/// A random number from the simulation's generator, or `None` outside a simulation.
pub fn draw() -> Option<u64> {
    if !active() {
        return None;
    }
    RNG.with(|rng| rng.borrow_mut().as_mut().map(rand::RngExt::random))
}

/// Runs `work` where blocking work belongs: on tokio's blocking pool, or inline in a simulation
/// (a thread there would run on real time and reorder the run).
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, BlockingFailed> {
    if active() {
        return Ok(work());
    }
    tokio::task::spawn_blocking(work).await.map_err(|e| BlockingFailed(e.to_string()))
}

/// Blocking work that panicked or was cancelled.
#[derive(Debug, thiserror::Error)]
#[error("blocking work failed: {0}")]
pub struct BlockingFailed(pub String);

#[cfg(feature = "sim")]
pub use network::{Accepted, Connector, connector, incoming, listen};

#[cfg(feature = "sim")]
mod network;
