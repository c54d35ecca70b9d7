//! The expected loose-ref tree of a repository, derived from git itself: what git's files
//! backend would store for the same refs and reflogs (`HEAD`, root refs, `refs/**`,
//! `logs/**`). The mount must show exactly this (no `packed-refs` until something is packed).
//!
//! Sources: `git for-each-ref --include-root-refs` (values and symref targets),
//! `git reflog list` (which refs have reflogs) and `git log -g --date=raw` (reflog
//! entries, newest first). `git log -g` has no placeholder for an entry's old id, so the
//! old id of an entry is the new id of the entry before it, and the null id for the oldest;
//! `generator_matches_files_backend` proves that this reproduces git's own files on disk
//! for the scenario the tests use.

use crate::harness::{ensure_same_tree, read_tree, Ctx, Repo, TestResult, Tree};
use std::fs;

/// The loose-ref tree git's files backend would store for `repo`'s refs and reflogs.
pub fn expected_tree(repo: &Repo) -> TestResult<Tree> {
    let mut tree = Tree::new();
    let hex_len = repo.rev_parse("HEAD").map(|h| h.len()).unwrap_or(40);
    let refs = repo.git(&[
        "for-each-ref",
        "--include-root-refs",
        "--format=%(refname)%00%(objectname)%00%(symref)",
    ])?;
    for line in refs.lines() {
        let mut parts = line.split('\0');
        let (Some(name), Some(oid), Some(symref)) = (parts.next(), parts.next(), parts.next())
        else {
            bail!("unexpected for-each-ref line {line:?}");
        };
        let content = if symref.is_empty() {
            format!("{oid}\n")
        } else {
            format!("ref: {symref}\n")
        };
        tree.insert(name.to_string(), content.into_bytes());
    }
    // HEAD pointing at an unborn branch is not listed by for-each-ref.
    if !tree.contains_key("HEAD") {
        let target = repo.git(&["symbolic-ref", "HEAD"])?;
        tree.insert(
            "HEAD".into(),
            format!("ref: {}\n", target.trim()).into_bytes(),
        );
    }
    let null = "0".repeat(hex_len);
    for refname in repo.git(&["reflog", "list"])?.lines() {
        let log = repo.git(&[
            "log",
            "-g",
            "--date=raw",
            "--format=%H%x00%gd%x00%gn%x00%ge%x00%gs",
            refname,
            "--",
        ])?;
        let mut entries: Vec<String> = Vec::new();
        let mut lines: Vec<&str> = log.lines().collect();
        lines.reverse(); // oldest first
        let mut old = null.clone();
        for line in lines {
            let f: Vec<&str> = line.split('\0').collect();
            let [new, selector, name, email, msg] = f.as_slice() else {
                bail!("unexpected log -g line for {refname}: {line:?}");
            };
            // The selector is `<ref>@{<unix-ts> <tz>}` with --date=raw.
            let Some(date) = selector
                .rsplit_once("@{")
                .and_then(|(_, d)| d.strip_suffix('}'))
            else {
                bail!("unexpected reflog selector {selector:?} for {refname}");
            };
            let mut entry = format!("{old} {new} {name} <{email}> {date}");
            if !msg.is_empty() {
                entry.push('\t');
                entry.push_str(msg);
            }
            entry.push('\n');
            entries.push(entry);
            old = new.to_string();
        }
        if !entries.is_empty() {
            tree.insert(format!("logs/{refname}"), entries.concat().into_bytes());
        }
    }
    Ok(tree)
}

/// Builds the standard scenario: branches with nested names, light and annotated tags,
/// symrefs, ORIG_HEAD, reflogs with several entries (commit, checkout, reset, update-ref
/// with a message, symbolic-ref with and without a message), a deleted branch.
/// Everything stays loose in a files-format repository (no pack-refs).
pub fn build_scenario(repo: &Repo) -> TestResult {
    repo.commit("first")?;
    repo.commit("second")?;
    repo.git(&["branch", "feature/login"])?;
    repo.git(&["branch", "topic/deep/nested/branch"])?;
    repo.git(&["branch", "with-dash_under.score"])?;
    repo.git(&["checkout", "-q", "feature/login"])?;
    repo.commit("login form")?;
    repo.commit("login button")?;
    repo.git(&["checkout", "-q", "main"])?;
    repo.commit("third")?;
    repo.git(&["reset", "-q", "--soft", "HEAD~1"])?; // ORIG_HEAD, a reset reflog entry
    repo.commit("third again")?;
    repo.git(&["tag", "v1.0", "HEAD~1"])?;
    repo.git(&["tag", "-a", "-m", "release 1.1", "v1.1"])?;
    repo.git(&["tag", "rel/2024/v2-light", "feature/login"])?;
    repo.git(&[
        "tag",
        "-a",
        "-m",
        "nested annotated",
        "rel/2024/v2-annotated",
        "feature/login",
    ])?;
    repo.git(&[
        "update-ref",
        "-m",
        "fetch: fast-forward from a remote",
        "refs/remotes/origin/main",
        "HEAD~1",
    ])?;
    repo.git(&[
        "symbolic-ref",
        "-m",
        "remote HEAD set",
        "refs/remotes/origin/HEAD",
        "refs/remotes/origin/main",
    ])?;
    repo.git(&["branch", "doomed"])?;
    repo.git(&["branch", "-D", "doomed"])?;
    repo.git(&[
        "update-ref",
        "-m",
        "several   spaces  and\ttab",
        "refs/heads/feature/login",
        "HEAD",
    ])?;
    repo.git(&[
        "symbolic-ref",
        "-m",
        "switch by hand",
        "HEAD",
        "refs/heads/feature/login",
    ])?;
    repo.git(&["symbolic-ref", "HEAD", "refs/heads/main"])?; // no message
    Ok(())
}

/// The generator reproduces a files-format repository's real `.git/{HEAD,ORIG_HEAD,refs,logs}`.
pub fn generator_matches_files_backend(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("files"), "files")?;
    build_scenario(&repo)?;
    ensure!(
        !repo.gitdir.join("packed-refs").exists(),
        "scenario must keep every ref loose"
    );
    let expected = expected_tree(&repo)?;

    let mut on_disk = Tree::new();
    read_tree(&repo.gitdir, "refs", &mut on_disk)?;
    read_tree(&repo.gitdir, "logs", &mut on_disk)?;
    for root_ref in [
        "HEAD",
        "ORIG_HEAD",
        "FETCH_HEAD",
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
    ] {
        if let Ok(content) = fs::read(repo.gitdir.join(root_ref)) {
            on_disk.insert(root_ref.into(), content);
        }
    }
    ensure_same_tree(&on_disk, &expected, "generator vs files backend on disk")?;
    // The scenario really exercises what the comparison is meant to cover.
    for must in [
        "HEAD",
        "ORIG_HEAD",
        "refs/heads/topic/deep/nested/branch",
        "refs/tags/v1.1",
        "refs/remotes/origin/HEAD",
        "logs/HEAD",
        "logs/refs/heads/feature/login",
    ] {
        ensure!(expected.contains_key(must), "scenario lacks {must}");
    }
    let head_log = String::from_utf8_lossy(expected.get("logs/HEAD").map_or(&[][..], |v| v));
    ensure!(
        head_log.lines().count() >= 8,
        "HEAD reflog too short:\n{head_log}"
    );
    ensure!(
        head_log.lines().any(|l| !l.contains('\t')),
        "scenario lacks a reflog entry without message"
    );
    Ok(())
}
mount_test!(generator_matches_files_backend, timeout = 120, no_mount);

/// The same scenario in a reftable repository yields the same tree, apart from ids:
/// both backends agree on names, symrefs and reflog shapes.
pub fn scenario_same_shape_in_reftable(ctx: &Ctx) -> TestResult {
    let files = Repo::init(&ctx.path("files"), "files")?;
    build_scenario(&files)?;
    let table = Repo::init(&ctx.path("table"), "reftable")?;
    build_scenario(&table)?;
    ensure!(
        table.gitdir.join("reftable/tables.list").is_file(),
        "not a reftable repository"
    );
    let a = expected_tree(&files)?;
    let b = expected_tree(&table)?;
    let shape = |t: &Tree| -> Vec<(String, usize, usize)> {
        t.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.len(),
                    v.iter().filter(|&&c| c == b'\n').count(),
                )
            })
            .collect()
    };
    let (sa, sb) = (shape(&a), shape(&b));
    ensure!(
        sa == sb,
        "files vs reftable scenario shapes differ:\nfiles:    {sa:?}\nreftable: {sb:?}"
    );
    Ok(())
}
mount_test!(scenario_same_shape_in_reftable, timeout = 120, no_mount);
