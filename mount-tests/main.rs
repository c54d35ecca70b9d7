//! Real-mount tests for `reftablefs mount`, one test binary with a module per area. A test
//! is a `fn(&Ctx) -> TestResult` registered by `mount_test!` right after it; the runner
//! finds every registered test (one that is not registered is dead code: the build warns,
//! and clippy -D warnings fails). Run with `make mount-test` (or `REFTABLEFS_MOUNT_TESTS=1 cargo test --test
//! mount -- [filter]`). Tests that need a mount print a SKIP line when /dev/fuse,
//! fusermount3 or the `mount` subcommand is missing, or outside `make mount-test`.
//! See `harness.rs` for the watchdog and the always-unmount guard.

#[macro_use]
mod harness;
mod bounds;
mod broken;
mod broken_links;
mod clients;
mod crash;
mod differential;
mod exec;
mod expected;
mod files_bugs;
mod foreign;
mod gogit;
mod lifecycle;
mod packaging;
mod packed;
mod packed_link;
mod read_path;
mod security;
#[path = "../tests/support/shells.rs"]
mod shells;
mod status;
mod stuck;
mod times;
mod uring;
mod worktrees;
mod write_path;

fn main() -> std::process::ExitCode {
    harness::run_all()
}
