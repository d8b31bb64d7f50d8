//! Builds the built-in plugins (`../plugins`) for wasm32 and leaves the modules in OUT_DIR, where
//! `src/plugin/builtin.rs` embeds them. Installs the wasm32 target with rustup when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-unknown-unknown";
const BUILT_IN: [&str; 3] = ["tag", "sql92", "default-tx-checker"];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("..");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for dir in ["plugins", "sdk"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    ensure_target(&rustc);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // One wasm build shared by the debug, release and clippy builds of the node: OUT_DIR is
    // <target>/<profile>/build/<crate>-<hash>/out.
    let target_dir = out.ancestors().nth(4).map_or_else(|| out.join("plugins-target"), |t| t.join("wasm-plugins"));
    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "--locked", "--target", TARGET, "--manifest-path"])
        .arg(root.join("plugins/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    for p in BUILT_IN {
        build.args(["-p", p]);
    }
    // The outer build's flags and wrappers (clippy, coverage) are for the host, not for wasm.
    for var in
        ["CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS", "RUSTC_WORKSPACE_WRAPPER", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET"]
    {
        build.env_remove(var);
    }
    let status = build.status().expect("run cargo to build the built-in plugins");
    assert!(status.success(), "building the built-in plugins for {TARGET} failed (see above)");
    for p in BUILT_IN {
        let file = format!("{}.wasm", p.replace('-', "_"));
        let built = target_dir.join(TARGET).join("release").join(&file);
        std::fs::copy(&built, out.join(&file)).unwrap_or_else(|e| panic!("copy {}: {e}", built.display()));
    }
}

/// `rustup target add` when the standard library for wasm32 is not installed.
fn ensure_target(rustc: &str) {
    let sysroot = Command::new(rustc).args(["--print", "sysroot"]).output().ok();
    let installed = sysroot.is_some_and(|o| {
        let root = String::from_utf8_lossy(&o.stdout).trim().to_string();
        Path::new(&root).join("lib/rustlib").join(TARGET).exists()
    });
    if !installed {
        let added = Command::new("rustup").args(["target", "add", TARGET]).status();
        if !added.is_ok_and(|s| s.success()) {
            println!("cargo:warning=could not install the {TARGET} target with rustup");
        }
    }
}
