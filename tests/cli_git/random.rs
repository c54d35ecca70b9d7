//! Random batches and random input: `update-ref --stdin` batches (with and without
//! symrefs and HEAD) must succeed or fail as git's and leave byte-identical stacks, and no
//! input makes the binary panic.

use super::*;

/// Random batches of `update-ref --stdin` run by both tools on copies of one repository
/// (auto-compaction on): every batch must succeed or fail alike, and the stacks must be
/// byte-identical afterwards (same tables, same compaction decisions).
#[test]
fn random_update_ref_batches_give_gits_stack_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    std::fs::create_dir(&a).unwrap();
    git(&a, &["init", "-q", "--ref-format=reftable", "-b", "main"]);
    let mut ids = Vec::new();
    for i in 0..4 {
        git(
            &a,
            &["commit", "-q", "--allow-empty", "-m", &format!("c{i}")],
        );
        ids.push(git(&a, &["rev-parse", "HEAD"]).trim().to_owned());
    }
    let b = tmp.path().join("b");
    copy_repo(&a, &b);
    let names: Vec<String> = (0..24)
        .map(|i| match i % 4 {
            0 => format!("refs/heads/r{i}"),
            1 => format!("refs/heads/dir{}/r{i}", i % 3),
            2 => format!("refs/tags/t{i}"),
            _ => format!("refs/remotes/o/r{i}"),
        })
        .collect();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut rnd = |n: usize| rng.below(n);
    let zero = "0".repeat(40);
    let (mut ok, mut failed) = (0, 0);
    // A model of the current values, to make most expectations right.
    let mut model: std::collections::BTreeMap<String, String> = Default::default();
    for round in 0..40 {
        let mut input = String::new();
        let mut used = std::collections::BTreeSet::new();
        let mut next = model.clone();
        for _ in 0..1 + rnd(6) {
            let name = &names[rnd(names.len())];
            if !used.insert(name.clone()) {
                continue;
            }
            let id = ids[rnd(ids.len())].clone();
            let cur = model.get(name).cloned();
            // Right expectation 6 times in 7, else a random (mostly wrong) one.
            let old = if rnd(7) > 0 {
                cur.clone().unwrap_or_else(|| zero.clone())
            } else {
                ids[rnd(ids.len())].clone()
            };
            let line = match rnd(6) {
                0 if cur.is_none() => format!("create {name} {id}\n"),
                0 | 1 => format!("update {name} {id}\n"),
                2 => format!("update {name} {id} {old}\n"),
                3 if cur.is_some() => format!("delete {name} {old}\n"),
                3 => format!("delete {name}\n"),
                4 => format!("verify {name} {old}\n"),
                _ => format!("update {name} {id}\n"),
            };
            if line.starts_with("delete") {
                next.remove(name);
            } else if !line.starts_with("verify") {
                next.insert(name.clone(), id);
            }
            input += &line;
        }
        let args = ["update-ref", "-m", &format!("round {round}"), "--stdin"];
        let (oa, ob) = run_both(&a, &b, &args, &input);
        assert_eq!(
            oa.status.code(),
            ob.status.code(),
            "round {round}: {input}\nours: {}\ngit: {}",
            String::from_utf8_lossy(&oa.stderr),
            String::from_utf8_lossy(&ob.stderr)
        );
        if oa.status.success() {
            ok += 1;
            model = next;
        } else {
            failed += 1;
        }
        same_tables(&a, &b, &format!("round {round}: {input}"));
    }
    assert!(
        ok > 15 && failed > 3,
        "both outcomes exercised: {ok} ok, {failed} failed"
    );
    assert_eq!(git(&a, &["for-each-ref"]), git(&b, &["for-each-ref"]));
    verify_integrity(&a);
    git(&a, &["fsck", "--no-progress"]);
}

/// Arbitrary input never makes the binary panic: mutated and random `update-ref --stdin`
/// input (text and `-z`), and random argument lists for every subcommand. Exit codes
/// stay within git's (0, 1, 2, 128, 129); a panic would exit with 101.
#[test]
fn no_input_makes_the_binary_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    let valid = format!(
        "start\ncreate refs/heads/f1 {m}\nupdate refs/heads/f2 {m} {z}\ndelete refs/heads/main-2\n\
         symref-update refs/heads/s refs/heads/main ref refs/heads/x\noption no-deref\nverify HEAD\nprepare\ncommit\n",
        m = main.trim(),
        z = "0".repeat(40)
    );
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut rnd = |n: usize| rng.below(n);
    let check = |o: &Output, what: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(
            matches!(o.status.code(), Some(0 | 1 | 2 | 128 | 129)),
            "{what}: {:?} {err}",
            o.status
        );
    };
    for i in 0..60 {
        let mut input = valid.clone().into_bytes();
        for _ in 0..1 + rnd(4) {
            let at = rnd(input.len());
            match rnd(4) {
                0 => input[at] = rnd(256) as u8,
                1 => input.truncate(at),
                2 => input.insert(at, [b'\0', b'\n', b' ', b'"', b'\\'][rnd(5)]),
                _ => {
                    let cut = rnd(input.len().saturating_sub(at)) + at;
                    input.drain(at..cut);
                }
            }
        }
        let z = i % 2 == 1;
        let args: &[&str] = if z {
            &["update-ref", "--stdin", "-z"]
        } else {
            &["update-ref", "--stdin"]
        };
        let o = run(BIN, d, args, Some(&input));
        check(&o, &format!("{:?}", String::from_utf8_lossy(&input)));
    }
    let words = [
        "show-ref",
        "for-each-ref",
        "resolve",
        "update-ref",
        "reflog",
        "compact",
        "verify",
        "--head",
        "-d",
        "--format=%(",
        "--format=%(refname)%",
        "--count=x",
        "--count=2",
        "--verify",
        "--exists",
        "--stdin",
        "HEAD",
        "@",
        "main",
        "refs/heads/main",
        "refs/heads/a..b",
        "",
        "-",
        "--",
        "-z",
        "-m",
        "show",
        "exists",
        "--abbrev=0",
        "--abbrev=x",
        "--no-abbrev",
        "--auto",
        "-C",
        ".",
        "--git-dir",
        "-c",
        "x=y",
        "core.bare",
        "refs/",
        "refs/*",
        "*",
        "\u{1F600}",
        "--symbolic-full-name",
        "--include-root-refs",
        "migrate",
        "status",
        "--json",
        "help",
        "-h",
        "--help",
        "completions",
        "bash",
        "man",
        "dump",
        "--version",
    ];
    for _ in 0..150 {
        let n = 1 + rnd(4);
        let mut args: Vec<&str> = (0..n).map(|_| words[rnd(words.len())]).collect();
        // Never read this process's stdin, never migrate (the repository is reftable
        // anyway, but keep the test's effects obvious).
        args.retain(|a| *a != "--stdin" && *a != "migrate");
        if args.is_empty() {
            continue;
        }
        let o = run(BIN, d, &args, Some(b""));
        check(&o, &format!("{args:?}"));
    }
    // The repository is still sound whatever was run against it.
    verify_integrity(d);
}

/// The current refs of `dir` as the random tests model them: `name -> id` for regular
/// refs, `name -> "-> target"` for symrefs, and `HEAD -> id` when HEAD resolves.
fn ref_model(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    let out = git(
        dir,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname) %(symref)",
        ],
    );
    for l in out.lines() {
        let mut f = l.split(' ');
        let (name, id, sym) = (f.next(), f.next(), f.next());
        if let (Some(name), Some(id)) = (name, id) {
            match sym {
                Some(t) if !t.is_empty() => m.insert(name.to_owned(), format!("-> {t}")),
                _ => m.insert(name.to_owned(), id.to_owned()),
            };
        }
    }
    let head = run("git", dir, &["rev-parse", "-q", "--verify", "HEAD"], None);
    if head.status.success() {
        let id = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        m.insert("HEAD".to_owned(), id);
    }
    let head = run("git", dir, &["symbolic-ref", "-q", "HEAD"], None);
    let target = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    m.insert("HEAD (symref)".to_owned(), format!("-> {target}"));
    m
}

/// As [`random_update_ref_batches_give_gits_stack_byte_for_byte`], with symrefs
/// (created, re-pointed with and without `no-deref`, deleted, updated through, dangling,
/// chained), updates of HEAD and of its referent, and deletions of refs that have
/// reflogs: every batch must succeed or fail alike and leave byte-identical stacks.
#[test]
fn random_batches_with_symrefs_and_head_match_git_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    // RTFS_KEEP leaves the two repositories behind for debugging.
    let _tmp = if std::env::var_os("RTFS_KEEP").is_some() {
        eprintln!("keeping {}", root.display());
        std::mem::forget(tmp);
        None
    } else {
        Some(tmp)
    };
    let a = root.join("a");
    std::fs::create_dir(&a).unwrap();
    git(&a, &["init", "-q", "--ref-format=reftable", "-b", "main"]);
    let mut ids = Vec::new();
    for i in 0..3 {
        git(
            &a,
            &["commit", "-q", "--allow-empty", "-m", &format!("c{i}")],
        );
        ids.push(git(&a, &["rev-parse", "HEAD"]).trim().to_owned());
    }
    git(&a, &["branch", "b1"]);
    git(&a, &["tag", "t1"]);
    let b = root.join("b");
    copy_repo(&a, &b);
    let names = [
        "refs/heads/main",
        "refs/heads/b1",
        "refs/heads/b2",
        "refs/heads/d/b3",
        "refs/tags/t1",
        "refs/tags/t2",
        "refs/remotes/o/main",
    ];
    let symrefs = [
        "refs/heads/s0",
        "refs/heads/s1",
        "refs/remotes/o/HEAD",
        "refs/tags/st",
    ];
    // RTFS_SEED / RTFS_ROUNDS explore further (the defaults are what CI runs).
    let mut rng = Rng(std::env::var("RTFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1));
    let rounds: usize = std::env::var("RTFS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut rnd = |n: usize| rng.below(n);
    let zero = "0".repeat(40);
    let (mut ok, mut failed) = (0, 0);
    for round in 0..rounds {
        let model = ref_model(&a);
        let mut input = String::new();
        let mut used = std::collections::BTreeSet::new();
        for _ in 0..1 + rnd(4) {
            let id = ids[rnd(ids.len())].clone();
            let kind = rnd(12);
            let name = match kind {
                // Plain commands on symrefs too (through them, or on them with no-deref).
                0..=4 if rnd(4) == 0 => symrefs[rnd(symrefs.len())],
                0..=4 => names[rnd(names.len())],
                5..=8 => symrefs[rnd(symrefs.len())],
                _ => "HEAD",
            };
            if !used.insert(name) {
                continue;
            }
            let cur = model.get(name).cloned();
            let cur_id = cur
                .clone()
                .filter(|c| !c.starts_with("->"))
                .unwrap_or_else(|| zero.clone());
            let target = if rnd(4) == 0 {
                symrefs[rnd(symrefs.len())]
            } else {
                names[rnd(names.len())]
            };
            let no_deref = if rnd(2) == 0 { "option no-deref\n" } else { "" };
            let line = match kind {
                0 | 1 => format!("update {name} {id}\n"),
                2 => format!("update {name} {id} {cur_id}\n"),
                3 => format!("{no_deref}delete {name}\n"),
                4 => format!("delete {name} {cur_id}\n"),
                5 => format!("{no_deref}symref-update {name} {target}\n"),
                6 => match cur.as_deref().and_then(|c| c.strip_prefix("-> ")) {
                    Some(old) if rnd(3) > 0 => {
                        format!("{no_deref}symref-update {name} {target} ref {old}\n")
                    }
                    _ => format!("symref-create {name} {target}\n"),
                },
                7 => format!("option no-deref\nsymref-delete {name}\n"),
                8 => format!("{no_deref}update {name} {id}\n"),
                9 => format!("update HEAD {id} {cur_id}\n"),
                10 => format!("update HEAD {id}\n"),
                _ => format!(
                    "option no-deref\nsymref-update HEAD {}\n",
                    ["refs/heads/main", "refs/heads/b1", "refs/heads/b2"][rnd(3)]
                ),
            };
            input += &line;
        }
        let msg = format!("round {round}");
        let mut args: Vec<&str> = if rnd(3) == 0 {
            vec!["update-ref", "--stdin"]
        } else {
            vec!["update-ref", "-m", &msg, "--stdin"]
        };
        if rnd(6) == 0 {
            args.insert(1, "--create-reflog");
        }
        if rnd(8) == 0 {
            args.insert(1, "--no-deref");
        }
        let (oa, ob) = run_both(&a, &b, &args, &input);
        let (ea, eb) = (
            String::from_utf8_lossy(&oa.stderr),
            String::from_utf8_lossy(&ob.stderr),
        );
        assert_eq!(
            oa.status.code(),
            ob.status.code(),
            "round {round}: {input}\nours: {ea}\ngit: {eb}"
        );
        let first = |s: &str| s.lines().next().unwrap_or("").to_owned();
        assert_eq!(
            first(&ea),
            first(&eb),
            "round {round}: {input}\nrefs before: {model:#?}"
        );
        if oa.status.success() {
            ok += 1;
        } else {
            failed += 1;
        }
        same_tables(&a, &b, &format!("round {round}, after\n{input}"));
    }
    eprintln!("{ok} batches committed, {failed} refused");
    assert!(
        ok > 15 && failed > 3,
        "both outcomes exercised: {ok} ok, {failed} failed"
    );
    assert_eq!(ref_model(&a), ref_model(&b));
    verify_integrity(&a);
}
