//! Sharing a stack with git: parallel writers never lose an update, and a writer killed
//! with SIGKILL at random points leaves a stack both git and we read, holding exactly
//! the transactions that completed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use reftablefs::stack::{Stack, StackOptions};
use reftablefs::transaction::{Expected, RefEdit};
use reftablefs::{HashKind, RefValue};

use crate::rng::{self, Rng};
use crate::util::{self, ident, Repo};

const N: usize = 60;

#[test]
fn git_and_we_write_in_parallel_without_losing_updates() {
    let repo = Repo::new(HashKind::Sha1);
    let ids = repo.commits(2);
    let (a, b) = (ids[0], ids[1]);
    repo.git(&["update-ref", "refs/heads/shared", &a.to_hex()]);
    let dir = repo.path().to_path_buf();
    let script = format!(
        r#"ok=0
for i in $(seq 1 {N}); do
  git -c reftable.lockTimeout=300000 update-ref refs/heads/g$i {a} || exit 1
  old=$(git rev-parse refs/heads/shared)
  if [ "$old" = "{a}" ]; then new={b}; else new={a}; fi
  if git -c reftable.lockTimeout=300000 update-ref -m git refs/heads/shared $new $old 2>/dev/null; then ok=$((ok+1)); fi
done
echo $ok"#
    );
    let git_side = std::thread::spawn(move || {
        let out = util::git_cmd(&dir).arg("--version").output().unwrap();
        assert!(out.status.success());
        let out = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(&dir)
            .env("HOME", &dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_COMMITTER_NAME", "git")
            .env("GIT_COMMITTER_EMAIL", "git@example.com")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git loop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse::<usize>()
            .unwrap()
    });
    let mut st = Stack::open(
        repo.reftable_dir(),
        StackOptions {
            lock_timeout: Some(Duration::from_secs(300)),
            ..repo.options()
        },
    )
    .unwrap();
    let mut ours_ok = 0;
    for i in 1..=N {
        let mut tx = st.transaction();
        tx.edit(RefEdit::create(format!("refs/heads/o{i}"), a));
        tx.commit().unwrap();
        st.reload().unwrap();
        let old = match st.read_ref(b"refs/heads/shared").unwrap().map(|r| r.value) {
            Some(RefValue::Val1(id)) => id,
            v => panic!("shared is {v:?}"),
        };
        let new = if old == a { b } else { a };
        let mut tx = st.transaction();
        tx.identity(ident());
        tx.edit(
            RefEdit::update("refs/heads/shared", new)
                .expect(Expected::Oid(old))
                .message("ours"),
        );
        match tx.commit() {
            Ok(_) => ours_ok += 1,
            Err(e) => assert!(
                e.to_string().contains("but expected"),
                "only the expected-old check may fail: {e}"
            ),
        }
    }
    let git_ok = git_side.join().unwrap();
    // Every create landed, in both views.
    let listing = repo.git(&["for-each-ref", "--format=%(refname)"]);
    for i in 1..=N {
        assert!(
            listing.contains(&format!("refs/heads/g{i}\n")),
            "g{i} missing"
        );
        assert!(
            listing.contains(&format!("refs/heads/o{i}\n")),
            "o{i} missing"
        );
    }
    st.reload().unwrap();
    let mut ours = String::new();
    st.for_each_ref(b"refs/", |r| {
        ours.push_str(&String::from_utf8_lossy(&r.name));
        ours.push('\n');
        true
    })
    .unwrap();
    assert_eq!(ours, listing, "git and we list the same refs");
    // Every successful shared update is in its reflog (plus the creation).
    let log = st.read_log(b"refs/heads/shared").unwrap();
    assert_eq!(
        log.len(),
        git_ok + ours_ok + 1,
        "git {git_ok} + ours {ours_ok} + creation"
    );
    assert!(git_ok + ours_ok > 0);
    repo.verify_integrity();
    repo.git(&["fsck", "--no-progress", "--no-dangling"]);
}

#[test]
fn sigkill_at_random_points_leaves_a_consistent_stack() {
    let repo = Repo::new(HashKind::Sha1);
    let id = repo.commits(1)[0];
    let mut rng = Rng::new(rng::seed("STACK_SEED", 0xc4a5_0001));
    // The writer to kill is `examples/stack_crash_writer.rs` (`cargo test` builds the
    // examples first, next to the test binaries' directory).
    let exe = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join("stack_crash_writer"))
        .unwrap();
    assert!(
        exe.is_file(),
        "{} is missing: run `cargo build --example stack_crash_writer` (plain `cargo test` builds it)",
        exe.display()
    );
    let mut done: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut allowed: Vec<usize> = Vec::new();
    let iterations = 40;
    for _ in 0..iterations {
        let mut child = Command::new(&exe)
            .arg(repo.reftable_dir())
            .arg(next.to_string())
            .arg(id.to_hex())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(i) = line.split("done ").nth(1) {
                    v.push(i.parse::<usize>().unwrap());
                }
            }
            v
        });
        std::thread::sleep(Duration::from_millis(20 + rng.below(120) as u64));
        // SIGKILL: no destructor, no lock cleanup.
        let _ = child.kill();
        let _ = child.wait();
        let got = reader.join().unwrap();
        eprintln!("iteration: start {next} reported {got:?}");
        done.extend(&got);
        // The transaction in flight when the kill came may or may not have landed.
        let in_flight = got.last().map_or(next, |l| l + 1);
        allowed.push(in_flight);
        next = in_flight + 1;
        // A lock left by the killed writer is stale; remove it as a user would.
        let _ = std::fs::remove_file(repo.reftable_dir().join("tables.list.lock"));
        for e in std::fs::read_dir(repo.reftable_dir()).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".ref.lock") {
                let _ = std::fs::remove_file(e.path());
            }
        }

        // Both readers agree, and hold every completed transaction, plus at most the
        // one in flight (committed but not yet reported).
        let listing = repo.git(&["for-each-ref", "--format=%(refname)", "refs/heads/"]);
        let present: Vec<usize> = listing
            .lines()
            .filter_map(|l| l.strip_prefix("refs/heads/c"))
            .map(|n| n.parse().unwrap())
            .collect();
        for d in &done {
            assert!(present.contains(d), "completed transaction {d} lost");
        }
        let extra: Vec<_> = present.iter().filter(|p| !done.contains(p)).collect();
        assert!(
            extra.iter().all(|e| allowed.contains(e)),
            "only in-flight transactions may be extra: {extra:?}"
        );
        let mut st = repo.open();
        let mut ours = Vec::new();
        st.for_each_ref(b"refs/heads/c", |r| {
            ours.push(String::from_utf8_lossy(&r.name).into_owned());
            true
        })
        .unwrap();
        let theirs: Vec<String> = listing
            .lines()
            .filter(|l| l.starts_with("refs/heads/c"))
            .map(str::to_owned)
            .collect();
        assert_eq!(ours, theirs, "we read what git reads");
        repo.verify_integrity();
    }
    assert!(
        done.len() > 10,
        "the children made progress: {}",
        done.len()
    );
}

#[test]
fn readers_survive_concurrent_compaction_by_git() {
    let repo = Repo::new(HashKind::Sha1);
    let c = repo.commits(1)[0];
    repo.git(&["update-ref", "refs/heads/main", &c.to_hex()]);
    let dir = repo.path().to_path_buf();
    let hex = c.to_hex();
    let writer = std::thread::spawn(move || {
        for i in 0..80 {
            let out = util::git_out(&dir, &["update-ref", &format!("refs/heads/w{i}"), &hex]);
            assert!(out.status.success());
            if i % 10 == 9 {
                assert!(util::git_out(&dir, &["pack-refs"]).status.success());
            }
        }
    });
    let mut st = repo.open();
    let mut retries = 0;
    let mut reads = 0u32;
    while !writer.is_finished() {
        // A long-lived handle reloading, and fresh handles opening, while git appends
        // and compacts: a vanished table is retried, never reported.
        st.reload().expect("reload during concurrent compaction");
        assert!(st.read_ref(b"refs/heads/main").unwrap().is_some());
        let mut fresh = Stack::open(repo.reftable_dir(), repo.options())
            .expect("open during concurrent compaction");
        assert!(fresh.read_ref(b"refs/heads/main").unwrap().is_some());
        retries += fresh.stats().reload_retries;
        reads += 1;
    }
    writer.join().unwrap();
    retries += st.stats().reload_retries;
    eprintln!("{reads} reader rounds, {retries} reload retries");
    st.reload().unwrap();
    let mut n = 0;
    st.for_each_ref(b"refs/heads/w", |_| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 80);
}
