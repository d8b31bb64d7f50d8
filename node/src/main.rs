// Every message allocates a few buffers that live for one round trip; glibc malloc spent a
// quarter of the leader's CPU on them (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // A command piped into `head` ends quietly, as Unix tools do, instead of panicking on the
    // closed pipe. A node keeps Rust's default (SIGPIPE ignored): a peer's closed socket is an
    // error to handle, never a reason to die.
    if !std::env::args().skip(1).any(|a| a == "node") {
        // SAFETY: restoring a signal's default disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // Test builds arm crash points from `FAILPOINTS`; release builds have none.
    #[cfg(feature = "failpoints")]
    let _crash_points = rockraft::failpoint::from_env();
    std::process::exit(rockraft::cli::main());
}
