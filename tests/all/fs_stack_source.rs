//! The mount's view over a real stack made by git 2.47 (no FUSE needed): classification,
//! listings by reseek (refs and reflogs), rendering, and a batch committed through the
//! stack that git then reads back.
#![cfg(feature = "fuse")]

use reftablefs::format::RefValue;
use reftablefs::fs::source::BatchEdit;
use reftablefs::fs::stack_source;
use reftablefs::fs::view::{self, Kind, Scratch};
use reftablefs::fs::MountOptions;
use reftablefs::transaction::Expected;

use crate::util::{self, git};

fn names(v: &[view::Entry]) -> Vec<(String, Kind)> {
    v.iter()
        .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.kind))
        .collect()
}

#[test]
fn view_and_batches_over_a_git_made_stack() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(
        dir,
        &["init", "-q", "--ref-format=reftable", "-b", "main", "."],
    );
    git(dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(dir, &["branch", "feature/deep/x"]);
    git(dir, &["tag", "-a", "-m", "ann", "v1"]);
    git(dir, &["update-ref", "ORIG_HEAD", "HEAD"]);
    let head = git(dir, &["rev-parse", "HEAD"]).trim().to_string();
    let tag = git(dir, &["rev-parse", "v1"]).trim().to_string();

    let gitdir = dir.join(".git");
    // The mount's block cache, handed to the stacks it opens.
    let cache = reftablefs::table::BlockCache::new(1 << 20);
    let opts = MountOptions {
        block_cache: cache.clone(),
        ..MountOptions::default()
    };
    let mut o = stack_source::open(&gitdir, &opts).unwrap();
    let src = o.reader.as_mut();
    let mut s = Scratch::default();
    let mut out = Vec::new();

    assert_eq!(cache.bytes(), 0);
    view::list_dir(src, &mut s, b"", &mut out).unwrap();
    assert!(
        cache.bytes() > 0,
        "the reader's blocks are not in the mount's cache"
    );
    assert_eq!(
        names(&out),
        [
            ("HEAD".into(), Kind::Ref),
            ("ORIG_HEAD".into(), Kind::Ref),
            ("logs".into(), Kind::Dir),
            ("packed-refs".into(), Kind::PackedRefs),
            ("refs".into(), Kind::Dir)
        ]
    );
    view::list_dir(src, &mut s, b"logs", &mut out).unwrap();
    assert_eq!(
        names(&out),
        [("HEAD".into(), Kind::Log), ("refs".into(), Kind::Dir)]
    );
    view::list_dir(src, &mut s, b"logs/refs/heads", &mut out).unwrap();
    assert_eq!(
        names(&out),
        [("feature".into(), Kind::Dir), ("main".into(), Kind::Log)]
    );
    view::list_dir(src, &mut s, b"refs/tags", &mut out).unwrap();
    assert_eq!(names(&out), [("v1".into(), Kind::Ref)]);
    assert_eq!(
        view::classify(src, &mut s, b"refs/heads/feature/deep").unwrap(),
        Some(Kind::Dir)
    );
    assert_eq!(
        view::classify(src, &mut s, b"logs/refs/heads/main").unwrap(),
        Some(Kind::Log)
    );
    assert_eq!(
        view::classify(src, &mut s, b"refs/heads/nope").unwrap(),
        None
    );

    // Rendering equals what the files backend would store.
    let mut rec = Default::default();
    assert!(reftablefs::fs::source::read_ref(src, b"refs/tags/v1", &mut rec).unwrap());
    let mut text = Vec::new();
    view::render_ref(&rec.value, &mut text);
    assert_eq!(text, format!("{tag}\n").as_bytes());
    let mut logs = Vec::new();
    src.read_log(b"refs/heads/main", &mut logs).unwrap();
    view::render_log(&logs, src.hash_kind(), &mut text);
    assert_eq!(
        String::from_utf8(text.clone()).unwrap(),
        format!(
            "{} {head} C O Mitter <committer@example.com> 1112912053 -0700\tcommit (initial): one\n",
            "0".repeat(40)
        )
    );

    // A batch through the writer: one table; git reads it back.
    let writer = o.writer.as_mut().unwrap();
    let before = std::fs::read_to_string(gitdir.join("reftable/tables.list"))
        .unwrap()
        .lines()
        .count();
    let edits = vec![
        BatchEdit {
            name: b"refs/heads/new".to_vec(),
            new: Some(RefValue::Symref(b"refs/heads/main".to_vec())),
            expected_old: None,
            ..Default::default()
        },
        BatchEdit {
            name: b"refs/heads/feature/deep/x".to_vec(),
            new: Some(RefValue::Deletion),
            expected_old: Some(rec_value(&head)),
            ..Default::default()
        },
        // Expects a value git does not have: a conflict, not written; the rest is. (A
        // deletion expecting a symref only expects the ref to exist, so this one writes.)
        BatchEdit {
            name: b"ORIG_HEAD".to_vec(),
            new: Some(RefValue::Symref(b"refs/heads/elsewhere".to_vec())),
            expected_old: Some(RefValue::Symref(b"refs/heads/zzz".to_vec())),
            ..Default::default()
        },
    ];
    let outcome = writer.commit(&edits).unwrap();
    assert_eq!(outcome.conflicts.len(), 1, "{outcome:?}");
    assert_eq!(outcome.conflicts[0].name, b"ORIG_HEAD");
    assert_eq!(
        outcome.conflicts[0].expected,
        Expected::Symref(b"refs/heads/zzz".to_vec())
    );
    let after = std::fs::read_to_string(gitdir.join("reftable/tables.list"))
        .unwrap()
        .lines()
        .count();
    assert!(
        after <= before + 1,
        "one table per batch ({before} -> {after})"
    );
    assert_eq!(
        git(dir, &["symbolic-ref", "refs/heads/new"]).trim(),
        "refs/heads/main"
    );
    assert!(git(dir, &["for-each-ref", "refs/heads/feature"]).is_empty());
    assert_eq!(git(dir, &["rev-parse", "ORIG_HEAD"]).trim(), head);
    // Until the batcher acknowledges its commit, the reader keeps its tables (the
    // pending layer still shows the batch); then it sees it after a reload.
    assert!(!src.reload().unwrap());
    src.acknowledge_own_commit();
    assert!(src.reload().unwrap());
    // As in the files backend: feature/deep/x's reflog stays (only removing logs/…
    // deletes a reflog), and the new symref, written with no reflog line, has none.
    view::list_dir(src, &mut s, b"logs/refs/heads", &mut out).unwrap();
    assert_eq!(
        names(&out),
        [("feature".into(), Kind::Dir), ("main".into(), Kind::Log)]
    );
}

fn rec_value(hex: &str) -> RefValue {
    RefValue::Val1(
        reftablefs::format::ObjectId::from_hex(hex.as_bytes(), reftablefs::format::HashKind::Sha1)
            .unwrap(),
    )
}

/// A ref's mtime is the time of the transaction that wrote its record, known from the
/// lookup that found it: after one read of each table's log section, asking the time of
/// every ref costs no reflog seek (`ref_times.rs`), also in a compacted table; a symref
/// (`HEAD`) takes its newest reflog entry.
#[test]
fn ref_times_cost_no_seek_beyond_the_lookup() {
    use reftablefs::format::RefRecord;
    use reftablefs::fs::source::{read_ref, RefSource};
    use reftablefs::fs::stack_source::StackSource;
    use reftablefs::stack::{Stack, StackOptions};

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(
        dir,
        &["init", "-q", "--ref-format=reftable", "-b", "main", "."],
    );
    git(dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
    // One transaction of 200 refs (one update index), then 5 single updates at later
    // times, then everything compacted into one table.
    let head = git(dir, &["rev-parse", "HEAD"]).trim().to_string();
    let mut batch = String::new();
    for i in 0..200 {
        batch.push_str(&format!("create refs/heads/b{i:03} {head}\n"));
    }
    let run = |date: &str, args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut child = util::git_cmd(dir)
            .env("GIT_COMMITTER_DATE", date)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
        drop(input);
        assert!(child.wait().unwrap().success(), "git {args:?}");
    };
    run("1700000100 +0000", &["update-ref", "--stdin"], &batch);
    for i in 0..5 {
        let date = format!("{} +0000", 1_700_000_200 + i * 100);
        let name = format!("refs/heads/late{i}");
        run(&date, &["update-ref", &name, &head], "");
    }
    git(dir, &["pack-refs", "--all"]);
    let tables = std::fs::read_to_string(dir.join(".git/reftable/tables.list")).unwrap();
    assert_eq!(tables.lines().count(), 1, "compacted into one table");

    let stack = Stack::open(dir.join(".git/reftable"), StackOptions::default()).unwrap();
    let mut src = StackSource::new(stack, Default::default(), Default::default());
    let mut rec = RefRecord::default();
    let mut time_of = |src: &mut StackSource, name: &str| {
        assert!(read_ref(src, name.as_bytes(), &mut rec).unwrap(), "{name}");
        src.ref_time(name.as_bytes()).unwrap()
    };
    for i in 0..200 {
        assert_eq!(
            time_of(&mut src, &format!("refs/heads/b{i:03}")),
            Some(1_700_000_100)
        );
    }
    for i in 0..5 {
        let want = 1_700_000_200 + i * 100;
        assert_eq!(
            time_of(&mut src, &format!("refs/heads/late{i}")),
            Some(want)
        );
    }
    assert_eq!(
        src.time_costs(),
        (0, 1),
        "no reflog seek, one log section read"
    );
    // HEAD is a symref: its newest reflog entry (the commit, at the support module's
    // fixed date), one seek.
    assert_eq!(time_of(&mut src, "HEAD"), Some(1_112_912_053));
    assert_eq!(src.time_costs(), (1, 1));
    // Asked without a lookup just before, the time still comes out right (one seek).
    assert_eq!(
        src.ref_time(b"refs/heads/late4").unwrap(),
        Some(1_700_000_600)
    );
}
