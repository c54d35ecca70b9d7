//! Tests that measure the whole process (its allocations, the block cache every table
//! shares, its children's peak RSS) cannot share it with the other tests: each starts
//! with `if !alone(module_path!(), "<its name>") { return; }`. In the ordinary run,
//! [`alone`] starts this binary again with only that test, waits, fails if the test
//! failed there, and returns false; in that second process it returns true, and the test
//! runs as in a binary of its own.

use std::process::Command;

/// Set in the process that runs one test alone: that test's name.
const VAR: &str = "RTFS_TEST_ALONE";

/// Whether the calling test (`module` its `module_path!()`, `test` its name) is the
/// process's only one; if not, it has just run in a process of its own and passed.
pub fn alone(module: &str, test: &str) -> bool {
    // `module_path!()` starts with the crate ("all::"), test names do not.
    let module = module.split_once("::").map_or("", |(_, m)| m);
    let name = format!("{module}::{test}");
    if std::env::var(VAR).is_ok_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(&exe)
        .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(VAR, &name)
        .output()
        .expect("run the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("test result: ok. 1 passed"),
        "{name}, run alone ({} {name} --exact): {}\n{text}",
        exe.display(),
        out.status
    );
    // Shown with --nocapture, as the test's own output would be.
    eprint!("{text}");
    false
}
