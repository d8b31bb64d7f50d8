fn main() {
    std::process::exit(rockraft::cli::main());
}
