//! Tells the crate's own tests what the building host allows, as cfgs: `#[ignore]` is
//! decided when a test compiles, and a test that cannot run here must say why rather than
//! pass without running (`./scripts/test` runs the ignored ones).
//!
//! - `otpmcp_as_root`: built by root. Tests that run programs as other users, in PID
//!   namespaces or cgroups, or that read another process's socket, need it.
//! - `otpmcp_python3`: `/usr/bin/python3` is there. The `[exec]` tests' programs are
//!   Python scripts, and `scripts/capacity` is one.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(otpmcp_as_root)");
    println!("cargo::rustc-check-cfg=cfg(otpmcp_python3)");
    println!("cargo::rerun-if-changed=build.rs");
    // Another user building the same checkout: su and sudo set USER.
    println!("cargo::rerun-if-env-changed=USER");
    // A directory's modification time changes when a file is added or removed in it (a
    // path that does not exist would make cargo run this script on every build).
    println!("cargo::rerun-if-changed=/usr/bin");

    if root() {
        println!("cargo::rustc-cfg=otpmcp_as_root");
    }
    // A file (through the link): not a link to nothing, nor something mounted over it.
    if Path::new("/usr/bin/python3").is_file() {
        println!("cargo::rustc-cfg=otpmcp_python3");
    }
}

/// Whether this process runs as root: /proc/self is owned by its effective user.
fn root() -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }
    #[cfg(not(unix))]
    {
        false
    }
}
