//! Tests of config parsing, settings, identity, dates and discovery.

use std::path::Path;
use std::time::Duration;

use super::settings::fsync_includes_refs;
use super::*;
use crate::format::HashKind;
use crate::transaction::LogAllRefUpdates;

fn cfg(text: &str) -> Config {
    Config::parse(text.as_bytes(), Path::new("test-config")).unwrap()
}

#[test]
fn config_sections_keys_and_values() {
    let c = cfg("# comment\n[core]\n\tBare = false\n\tlogAllRefUpdates\n[Reftable]\nblockSize = 8k ; c\n\
                 [remote \"Origin\"]\n url = \"a b\\\"c\" # x\n[branch.Main]\n remote=x\n[core] bare=yes\n");
    assert_eq!(
        c.bool("core.bare").unwrap(),
        Some(true),
        "later entries win"
    );
    assert_eq!(c.raw("core.logallrefupdates"), Some(None));
    assert_eq!(c.bool("core.logAllRefUpdates").unwrap(), Some(true));
    assert_eq!(c.int("reftable.blocksize").unwrap(), Some(8192));
    assert_eq!(c.string("remote.Origin.url"), Some("a b\"c"));
    assert_eq!(
        c.string("remote.origin.url"),
        None,
        "subsections are case-sensitive"
    );
    assert_eq!(
        c.string("branch.main.remote"),
        Some("x"),
        "old dotted form is lower-cased"
    );
    assert_eq!(c.int("core.missing").unwrap(), None);
}

#[test]
fn config_value_details() {
    let c = cfg("[a]\n x = one  two   \n y = \"  padded \" tail\n z = cont\\\ninued\n w = t\\tab\\n\n e =\n");
    assert_eq!(c.string("a.x"), Some("one  two"));
    assert_eq!(c.string("a.y"), Some("  padded  tail"));
    assert_eq!(c.string("a.z"), Some("continued"));
    assert_eq!(c.string("a.w"), Some("t\tab\n"));
    assert_eq!(c.string("a.e"), Some(""));
    assert_eq!(c.bool("a.e").unwrap(), Some(false));
}

#[test]
fn config_errors_name_line_and_file() {
    for (text, line) in [
        ("[core\n", 1),
        ("[a]\nx = \"open\n", 2),
        ("x = 1\n", 1),
        ("[a]\n=1\n", 2),
        ("[a]\nx = \\q\n", 2),
    ] {
        let e = Config::parse(text.as_bytes(), Path::new("/r/config"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("line {line}")) && e.contains("/r/config"),
            "{text:?}: {e}"
        );
    }
    let c = cfg("[a]\nb = maybe\nc = 12q\n");
    assert!(c
        .bool("a.b")
        .unwrap_err()
        .to_string()
        .contains("bad boolean"));
    assert!(c.int("a.c").is_err());
}

#[test]
fn config_include_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inc"), "[user]\n name = Included\n").unwrap();
    std::fs::write(
        dir.path().join("main"),
        "[user]\n name = First\n[include]\n path = inc\n",
    )
    .unwrap();
    let mut c = Config::default();
    c.add_file(&dir.path().join("main")).unwrap();
    assert_eq!(c.string("user.name"), Some("Included"));
    // Self-inclusion is bounded.
    std::fs::write(dir.path().join("loop"), "[include]\n path = loop\n").unwrap();
    assert!(Config::default()
        .add_file(&dir.path().join("loop"))
        .is_err());
}

#[test]
fn config_set_like_git() {
    let text =
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"core\"]\n\turl = x\n";
    let out = config_text_set(text, "core", "repositoryformatversion", "1");
    assert_eq!(
        out,
        "[core]\n\trepositoryformatversion = 1\n\tbare = false\n[remote \"core\"]\n\turl = x\n"
    );
    let out = config_text_set(&out, "extensions", "refstorage", "reftable");
    assert!(
        out.ends_with("[extensions]\n\trefstorage = reftable\n"),
        "{out}"
    );
    let out = config_text_set(&out, "extensions", "objectformat", "sha256");
    assert!(
        out.ends_with("[extensions]\n\trefstorage = reftable\n\tobjectformat = sha256\n"),
        "{out}"
    );
    let c = Config::parse(out.as_bytes(), Path::new("x")).unwrap();
    assert_eq!(c.string("extensions.refstorage"), Some("reftable"));
    assert_eq!(c.int("core.repositoryformatversion").unwrap(), Some(1));
}

#[test]
fn settings_defaults_and_values() {
    let s = RepoSettings::from_config(&cfg("[core]\nbare = false\n"), 0o022).unwrap();
    assert_eq!(s.hash, HashKind::Sha1);
    assert_eq!(s.ref_storage, RefStorage::Files);
    assert_eq!(s.log_all_ref_updates, LogAllRefUpdates::True);
    assert_eq!(
        (s.block_size, s.restart_interval, s.geometric_factor),
        (4096, 16, 2)
    );
    assert!(s.index_objects && !s.fsync_refs);
    assert_eq!(s.lock_timeout, Some(Duration::from_millis(100)));
    assert_eq!(s.default_permissions, 0o644);

    let s = RepoSettings::from_config(
        &cfg("[core]\nrepositoryformatversion = 1\nbare = true\nfsync = reference\nsharedRepository = group\n\
              [extensions]\nobjectFormat = sha256\nrefStorage = reftable\n\
              [reftable]\nblockSize = 100\nrestartInterval = 1\nindexObjects = false\ngeometricFactor = 3\nlockTimeout = -1\n"),
        0o027,
    )
    .unwrap();
    assert_eq!(s.hash, HashKind::Sha256);
    assert_eq!(s.ref_storage, RefStorage::Reftable);
    assert_eq!(
        s.log_all_ref_updates,
        LogAllRefUpdates::False,
        "bare default"
    );
    assert!(s.fsync_refs);
    assert_eq!(
        (
            s.block_size,
            s.restart_interval,
            s.index_objects,
            s.geometric_factor
        ),
        (100, 1, false, 3)
    );
    assert_eq!(s.lock_timeout, None);
    assert_eq!(s.default_permissions, 0o660);
}

#[test]
fn settings_errors_use_gits_words() {
    let e =
        RepoSettings::from_config(&cfg("[reftable]\nblockSize = 16777216\n"), 0o022).unwrap_err();
    assert_eq!(e.to_string(), "reftable block size cannot exceed 16MB");
    let e = RepoSettings::from_config(&cfg("[reftable]\nrestartInterval = 65536\n"), 0o022)
        .unwrap_err();
    assert_eq!(e.to_string(), "reftable block size cannot exceed 65535");
    assert!(RepoSettings::from_config(&cfg("[extensions]\nrefStorage = zzz\n"), 0).is_err());
    assert!(RepoSettings::from_config(&cfg("[core]\nsharedRepository = 0400\n"), 0).is_err());
}

#[test]
fn shared_permissions_match_t0610_table() {
    // (shared, umask) -> mode, from git's t0610.
    let cases = [
        ("umask", 0o002, 0o664),
        ("umask", 0o022, 0o644),
        ("umask", 0o027, 0o640),
        ("group", 0o002, 0o664),
        ("group", 0o022, 0o664),
        ("group", 0o027, 0o660),
        ("world", 0o002, 0o664),
        ("world", 0o022, 0o664),
        ("world", 0o027, 0o664),
    ];
    for (shared, umask, want) in cases {
        let s = RepoSettings::from_config(
            &cfg(&format!("[core]\nsharedRepository = {shared}\n")),
            umask,
        )
        .unwrap();
        assert_eq!(s.default_permissions, want, "{shared} {umask:o}");
    }
    let s = RepoSettings::from_config(&cfg("[core]\nsharedRepository = 0640\n"), 0o077).unwrap();
    assert_eq!(s.default_permissions, 0o640);
}

#[test]
fn log_all_ref_updates_rules() {
    let s = |t: &str| {
        RepoSettings::from_config(&cfg(t), 0)
            .unwrap()
            .log_all_ref_updates
    };
    assert_eq!(
        s("[core]\nlogAllRefUpdates = always\n"),
        LogAllRefUpdates::Always
    );
    assert_eq!(
        s("[core]\nlogAllRefUpdates = false\n"),
        LogAllRefUpdates::False
    );
    assert_eq!(
        s("[core]\nbare = true\nlogAllRefUpdates = true\n"),
        LogAllRefUpdates::True
    );
    let t = LogAllRefUpdates::True;
    assert!(t.autocreates(b"HEAD") && t.autocreates(b"refs/notes/commits"));
    assert!(!t.autocreates(b"refs/tags/v1") && !LogAllRefUpdates::False.autocreates(b"HEAD"));
    assert!(LogAllRefUpdates::Always.autocreates(b"refs/tags/v1"));
}

#[test]
fn fsync_components() {
    assert!(fsync_includes_refs("reference"));
    assert!(fsync_includes_refs("objects,committed"));
    assert!(fsync_includes_refs("all"));
    assert!(!fsync_includes_refs("all,-reference"));
    assert!(!fsync_includes_refs("objects,derived-metadata"));
    assert!(!fsync_includes_refs("reference,none"));
}

#[test]
fn dates() {
    // git's test_tick form and the @ form.
    assert_eq!(parse_git_date("1112911993 -0700"), Some((1112911993, -700)));
    assert_eq!(parse_git_date("@1112911993 +0130"), Some((1112911993, 130)));
    assert_eq!(parse_git_date("@1112911993"), Some((1112911993, 0)));
    // RFC 2822 and ISO 8601 name the same instant: 2005-04-07 22:13:13 +0200.
    let want = Some((1112904793, 200));
    assert_eq!(parse_git_date("Thu, 07 Apr 2005 22:13:13 +0200"), want);
    assert_eq!(parse_git_date("2005-04-07T22:13:13+0200"), want);
    assert_eq!(parse_git_date("2005-04-07 22:13:13 +02:00"), want);
    assert_eq!(
        parse_git_date("2005-04-07T20:13:13Z"),
        Some((1112904793, 0))
    );
    assert_eq!(
        parse_git_date("2005-04-07T13:13:13 -0700"),
        Some((1112904793, -700))
    );
    for bad in [
        "",
        "yesterday",
        "2005-13-07T00:00:00Z",
        "@x",
        "12 +0000",
        "Thu, 07 Foo 2005 22:13:13 +0200",
    ] {
        assert_eq!(parse_git_date(bad), None, "{bad}");
    }
}

#[test]
fn identity_precedence() {
    let c = cfg("[user]\nname = User Name\nemail = user@x\n[committer]\nemail = committer@x\n");
    let env = Env::empty().with("GIT_COMMITTER_DATE", "1112911993 -0700");
    let id = Identity::committer(&c, &env).unwrap();
    assert_eq!(
        (id.name.as_slice(), id.email.as_slice()),
        (b"User Name".as_slice(), b"committer@x".as_slice())
    );
    assert_eq!((id.time, id.tz_offset), (1112911993, -700));
    let env = env
        .with("GIT_COMMITTER_NAME", " C O Mitter. ")
        .with("GIT_COMMITTER_EMAIL", "<c@o.m>");
    let id = Identity::committer(&c, &env).unwrap();
    assert_eq!(
        (id.name.as_slice(), id.email.as_slice()),
        (b"C O Mitter".as_slice(), b"c@o.m".as_slice())
    );
    let bad = Env::empty().with("GIT_COMMITTER_DATE", "not a date");
    assert!(Identity::committer(&c, &bad).is_err());
}

fn git(dir: &Path, args: &[&str]) {
    let st = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

#[test]
fn discovery_like_git() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    git(&root, &["init", "-q", "--ref-format=reftable", "work"]);
    git(
        &root,
        &["init", "-q", "--bare", "--object-format=sha256", "bare.git"],
    );
    let work = root.join("work");
    std::fs::create_dir_all(work.join("a/b")).unwrap();
    let env = Env::empty();
    let d = |cwd: &Path, git_dir: Option<&Path>| Discover {
        cwd: Some(cwd.to_path_buf()),
        git_dir: git_dir.map(Path::to_path_buf),
        config_params: vec![],
    };

    let r = Repo::discover_with_env(&d(&work.join("a/b"), None), env.clone()).unwrap();
    assert_eq!(r.git_dir, work.join(".git"));
    assert_eq!(r.work_tree.as_deref(), Some(work.as_path()));
    assert!(r.is_reftable());
    assert_eq!(r.reftable_dir(), work.join(".git/reftable"));
    assert!(r.worktree_reftable_dir().is_none());

    let r = Repo::discover_with_env(&d(&root.join("bare.git"), None), env.clone()).unwrap();
    assert_eq!(r.git_dir, root.join("bare.git"));
    assert!(r.settings.bare && r.work_tree.is_none());
    assert_eq!(r.hash(), HashKind::Sha256);
    assert!(!r.is_reftable());
    assert!(r
        .require_reftable()
        .unwrap_err()
        .to_string()
        .contains("files ref format"));

    // --git-dir beats GIT_DIR; GIT_DIR works alone.
    let r = Repo::discover_with_env(
        &d(&root, Some(Path::new("work/.git"))),
        env.clone().with("GIT_DIR", "bare.git"),
    )
    .unwrap();
    assert_eq!(r.git_dir, work.join(".git"));
    let r =
        Repo::discover_with_env(&d(&root, None), env.clone().with("GIT_DIR", "bare.git")).unwrap();
    assert_eq!(r.git_dir, root.join("bare.git"));

    // A .git file pointing elsewhere.
    std::fs::create_dir(root.join("linked")).unwrap();
    std::fs::write(root.join("linked/.git"), "gitdir: ../bare.git\n").unwrap();
    let r = Repo::discover_with_env(&d(&root.join("linked"), None), env.clone()).unwrap();
    assert_eq!(r.git_dir, root.join("bare.git"));

    // Not a repository; ceiling directories stop the walk.
    std::fs::create_dir(root.join("plain")).unwrap();
    let e = Repo::discover_with_env(
        &d(&root.join("plain"), None),
        env.clone()
            .with("GIT_CEILING_DIRECTORIES", root.to_str().unwrap()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a git repository"), "{e}");
}

#[test]
fn discovery_of_linked_worktree_uses_commondir() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    git(&root, &["init", "-q", "--ref-format=reftable", "main"]);
    let main = root.join("main");
    git(
        &main,
        &[
            "-c",
            "user.name=a",
            "-c",
            "user.email=b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
    );
    git(&main, &["worktree", "add", "-q", "../wt"]);
    let r = Repo::discover_with_env(
        &Discover {
            cwd: Some(root.join("wt")),
            ..Discover::default()
        },
        Env::empty(),
    )
    .unwrap();
    assert_eq!(r.common_dir, main.join(".git"));
    assert_eq!(r.git_dir, main.join(".git/worktrees/wt"));
    assert_eq!(r.reftable_dir(), main.join(".git/reftable"));
    assert_eq!(
        r.worktree_reftable_dir(),
        Some(main.join(".git/worktrees/wt/reftable"))
    );
    assert!(r.is_reftable(), "config comes from the common dir");
}

#[test]
fn utc_timestamps_round_trip_git_dates() {
    assert_eq!(utc_timestamp(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc_timestamp(1_796_175_331), "2026-12-02 01:35:31 UTC");
    assert_eq!(
        utc_timestamp_millis(1_796_175_331_007),
        "2026-12-02T01:35:31.007Z"
    );
    // Every day of four centuries reads back through git's date parser.
    for day in (0..146_097u64).step_by(97) {
        let t = day * 86_400 + 3_723;
        let text = utc_timestamp(t);
        let iso = text.trim_end_matches(" UTC").to_owned() + " +0000";
        assert_eq!(parse_git_date(&iso).map(|(s, _)| s), Some(t), "{text}");
    }
}
