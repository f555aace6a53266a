//! With the `etcd` feature only: fails first, with what to install, when the machine cannot build
//! etcd's gRPC client (its build runs `protoc`, which must find protobuf's well-known types).
//! Otherwise that client's own build fails later, deep in its dependencies, with a message
//! that says neither what to install nor that leaving out `etcd` avoids it.
//!
//! Cheap on purpose: it looks for files, as `protoc` itself would, and runs nothing.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    // Run once per feature set: a failed run is run again on the next build anyway, and a
    // successful one need not follow PATH (which would rebuild the crate whenever it changes).
    println!("cargo::rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_ETCD").is_none() {
        return;
    }
    let protoc = match env::var_os("PROTOC").filter(|p| !p.is_empty()) {
        Some(given) => {
            let given = PathBuf::from(given);
            if !given.is_file() {
                fail(&format!(
                    "PROTOC is set to {}, which is not a file. Point it at the protoc \
                     executable, or unset it to use the protoc on PATH.",
                    given.display()
                ));
            }
            given
        }
        None => match on_path(&format!("protoc{}", env::consts::EXE_SUFFIX)) {
            Some(found) => found,
            None => fail("protoc, the Protocol Buffers compiler, is not on PATH."),
        },
    };
    if !has_well_known_types(&protoc) {
        fail(&format!(
            "{} is there, but protobuf's well-known types (google/protobuf/descriptor.proto) \
             are not where it looks for them (its ../include). On Debian/Ubuntu they come with \
             libprotobuf-dev; elsewhere set PROTOC_INCLUDE to the directory holding \
             google/protobuf/.",
            protoc.display()
        ));
    }
}

/// Stops the build, saying `what` is missing, what to install, and how to build without etcd.
fn fail(what: &str) -> ! {
    eprintln!(
        "\n\
         error: distlock's `etcd` feature cannot be built on this machine: {what}\n\
         \n\
         etcd's gRPC client generates its code with protoc at build time. Install it:\n\
         \x20   Debian/Ubuntu:  apt install protobuf-compiler libprotobuf-dev\n\
         \x20   macOS:          brew install protobuf\n\
         \x20   elsewhere:      a protoc release, with PROTOC set to its path\n\
         or build without etcd: leave the `etcd` feature out (every other store needs no \
         protoc); for the command, `cargo install distlock-cli` without `--features etcd`.\n"
    );
    std::process::exit(1);
}

/// `name` in a directory of `$PATH`, as a shell would find it.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Whether `descriptor.proto` is in `$PROTOC_INCLUDE` or where protoc looks beside itself
/// (`include/` and `../include/` of its directory, for the path as given and as resolved through
/// symlinks, e.g. Homebrew's).
fn has_well_known_types(protoc: &Path) -> bool {
    let wanted = Path::new("google/protobuf/descriptor.proto");
    let mut includes: Vec<PathBuf> = env::var_os("PROTOC_INCLUDE")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    let resolved = protoc.canonicalize().ok();
    for exe in std::iter::once(protoc).chain(resolved.as_deref()) {
        if let Some(dir) = exe.parent() {
            includes.push(dir.join("include"));
            includes.push(dir.join("../include"));
        }
    }
    includes.iter().any(|dir| dir.join(wanted).is_file())
}
