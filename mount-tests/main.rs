//! Real-mount tests for `reftablefs mount`, one test binary with a module per area. A test
//! is a `fn(&Ctx) -> TestResult` registered by `mount_test!` right after it; the runner
//! finds every registered test. Run with `make mount-test` (or `REFTABLEFS_MOUNT_TESTS=1 cargo test --test
//! mount -- [filter]`). Tests that need a mount print a SKIP line when /dev/fuse,
//! fusermount3 or the `mount` subcommand is missing, or outside `make mount-test`.
//! See `harness.rs` for the watchdog and the always-unmount guard.

#[macro_use]
mod harness;
mod bounds;
mod clients;
mod crash;
mod differential;
mod exec;
mod expected;
mod foreign;
mod gogit;
mod lifecycle;
mod packaging;
mod read_path;
mod security;
#[path = "../tests/support/shells.rs"]
mod shells;
mod status;
mod stuck;
mod times;
mod worktrees;
mod write_path;

fn main() -> std::process::ExitCode {
    harness::run_all()
}

/// Every module's source, for [`every_test_function_is_registered`].
const SOURCES: &[(&str, &str)] = &[
    ("bounds", include_str!("bounds.rs")),
    ("clients", include_str!("clients.rs")),
    ("crash", include_str!("crash.rs")),
    ("differential", include_str!("differential.rs")),
    ("exec", include_str!("exec.rs")),
    ("expected", include_str!("expected.rs")),
    ("foreign", include_str!("foreign.rs")),
    ("gogit", include_str!("gogit.rs")),
    ("lifecycle", include_str!("lifecycle.rs")),
    ("packaging", include_str!("packaging.rs")),
    ("read_path", include_str!("read_path.rs")),
    ("security", include_str!("security.rs")),
    ("status", include_str!("status.rs")),
    ("stuck", include_str!("stuck.rs")),
    ("times", include_str!("times.rs")),
    ("worktrees", include_str!("worktrees.rs")),
    ("write_path", include_str!("write_path.rs")),
];

/// A public `fn(&Ctx) -> TestResult` in a test module that nobody registered would never
/// run: every one must be followed by its `mount_test!`, and every module must be listed
/// in [`SOURCES`].
fn every_test_function_is_registered(_ctx: &harness::Ctx) -> harness::TestResult {
    let registered: Vec<String> = harness::all_tests().into_iter().map(|(n, _)| n).collect();
    let mut missing = Vec::new();
    for (module, src) in SOURCES {
        for line in src.lines() {
            let Some(rest) = line.strip_prefix("pub fn ") else {
                continue;
            };
            let Some((name, sig)) = rest.split_once('(') else {
                continue;
            };
            if sig.contains("&Ctx) -> TestResult") {
                let full = format!("{module}::{name}");
                if !registered.contains(&full) {
                    missing.push(full);
                }
            }
        }
    }
    for (name, _) in harness::all_tests() {
        let Some((module, _)) = name.split_once("::") else {
            continue;
        };
        if !SOURCES.iter().any(|(m, _)| *m == module) {
            missing.push(format!("module {module} (of {name}) is not in SOURCES"));
        }
    }
    ensure!(missing.is_empty(), "never run: {missing:?}");
    Ok(())
}
mount_test!(every_test_function_is_registered, timeout = 30, no_mount);
