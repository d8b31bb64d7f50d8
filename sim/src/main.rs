//! Runs simulations: `SIM_SEEDS` seeds (default 1) from `SIM_SEED` (default 1), one line each,
//! `SIM_JOBS` at a time (default 1); a failing seed prints its faults and problems, and how to run
//! it again. `SIM_TRACE=1` prints each run's whole client history; `RUST_LOG` shows the nodes'
//! logs with simulated times.
//!
//! Each seed runs in a process of its own (this program, again): state a run leaves in the
//! process (the libraries' statics) must not change the next, so that a seed that failed among
//! many fails the same way when run alone.

use std::process::ExitCode;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Log lines stamped with the simulated time.
struct SimulatedTime;

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:>9.3}s", turmoil::sim_elapsed().unwrap_or_default().as_secs_f64())
    }
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(SimulatedTime)
            .with_writer(std::io::stderr)
            .init();
    }
    let (first, count) = (env_u64("SIM_SEED", 1), env_u64("SIM_SEEDS", 1));
    if count == 1 {
        return run_here(first);
    }
    let mut failed = run_apart(first..first + count, env_u64("SIM_JOBS", 1).max(1));
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    failed.sort_unstable();
    println!("{} of {count} seed(s) failed: {failed:?}", failed.len());
    println!("run one again: SIM_SEED={} SIM_TRACE=1 cargo run -p rockraft-sim", failed[0]);
    ExitCode::FAILURE
}

/// Runs `seed` in this process and prints what it found.
fn run_here(seed: u64) -> ExitCode {
    let trace = std::env::var_os("SIM_TRACE").is_some();
    let started = std::time::Instant::now();
    let report = rockraft_sim::run(&rockraft_sim::Options::for_seed(seed));
    println!("{} ({:.1} s)", report.summary(), started.elapsed().as_secs_f64());
    if trace || !report.problems.is_empty() {
        for line in &report.faults {
            println!("  fault {line}");
        }
    }
    if trace {
        for line in &report.history.trace {
            println!("  {line}");
        }
    }
    match report.problems.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

/// Runs each seed in a process of its own, `jobs` at a time; answers the seeds that failed.
fn run_apart(seeds: std::ops::Range<u64>, jobs: u64) -> Vec<u64> {
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let failed = std::sync::Mutex::new(Vec::new());
    let program = std::env::current_exe().expect("this program's path");
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seed >= seeds.end {
                        return;
                    }
                    let out = std::process::Command::new(&program)
                        .env("SIM_SEED", seed.to_string())
                        .env("SIM_SEEDS", "1")
                        .stderr(std::process::Stdio::inherit())
                        .output();
                    let ok = match out {
                        Ok(out) => {
                            print!("{}", String::from_utf8_lossy(&out.stdout));
                            out.status.success()
                        }
                        Err(e) => {
                            println!("seed {seed}: could not run: {e}");
                            false
                        }
                    };
                    if !ok {
                        failed.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                    }
                }
            });
        }
    });
    failed.into_inner().unwrap_or_else(|p| p.into_inner())
}
