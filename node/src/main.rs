fn main() {
    // Test builds arm crash points from `FAILPOINTS`; release builds have none.
    #[cfg(feature = "failpoints")]
    let _crash_points = rockraft::failpoint::from_env();
    std::process::exit(rockraft::cli::main());
}
