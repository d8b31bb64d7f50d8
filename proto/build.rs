//! Generates the gRPC code from `apache/rocketmq/v2/*.proto` and `rockraft/v1/*.proto` with
//! protox (a protobuf compiler in Rust), so no `protoc` is needed on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "apache/rocketmq/v2/service.proto",
        "rockraft/v1/raft.proto",
        "rockraft/v1/broker.proto",
        "rockraft/v1/reply.proto",
        "rockraft/v1/log.proto",
        "rockraft/v1/peer.proto",
        "rockraft/v1/admin.proto",
    ];
    for f in std::iter::once("apache/rocketmq/v2/definition.proto").chain(files) {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        // Payload bytes become `bytes::Bytes`: decoding slices the request buffer instead of copying.
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
