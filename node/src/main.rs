// Every message allocates a few buffers that live for one round trip; glibc malloc spent a
// quarter of the leader's CPU on them (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Test builds arm crash points from `FAILPOINTS`; release builds have none.
    #[cfg(feature = "failpoints")]
    let _crash_points = rockraft::failpoint::from_env();
    std::process::exit(rockraft::cli::main());
}
