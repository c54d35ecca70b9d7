//! The command line beside git's parse-options: bundled short options, unique prefixes,
//! `--opt=value`, `--`, `--hash[=<n>]`, and git's words and exit code (129) for an
//! unknown, ambiguous or malformed option, on the same repository.

use super::*;

/// The first line of stderr.
fn first_error_line(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    e.lines().next().unwrap_or("").to_owned()
}

/// stdout, exit code and the first line of stderr of both tools must be equal.
fn same_with_error(dir: &Path, ours_args: &[&str], git_args: &[&str]) {
    same(dir, ours_args, git_args);
    let (a, b) = (ours(dir, ours_args), run("git", dir, git_args, None));
    assert_eq!(
        first_error_line(&a),
        first_error_line(&b),
        "reftablefs {ours_args:?} vs git {git_args:?}"
    );
}

#[test]
fn show_ref_options_parse_as_gits() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    for args in [
        // Bundled short options (refused before as "unknown option '-dq'").
        &["show-ref", "-dq"][..],
        &["show-ref", "-qd"],
        &["show-ref", "-ds", "main"],
        &["show-ref", "--verify", "-dq", "refs/tags/v1"],
        &["show-ref", "--verify", "-qd", "refs/heads/nosuch"],
        // Unique prefixes (`--ver` of `--verify`), an exact name beside a longer one.
        &["show-ref", "--ver", "refs/heads/main"],
        &["show-ref", "--veri", "-q", "refs/heads/nosuch"],
        &["show-ref", "--dere", "--tag"],
        &["show-ref", "--bra"],
        &["show-ref", "--head", "--heads"],
        &["show-ref", "--q", "main"],
        // `--hash[=<n>]` and `-s[<n>]`.
        &["show-ref", "--hash=7"],
        &["show-ref", "--hash=7", "-d", "main"],
        &["show-ref", "-s7", "main"],
        &["show-ref", "-ds9", "main"],
        &["show-ref", "--has=12", "--verify", "refs/heads/topic"],
        &["show-ref", "--hash=3"],
        &["show-ref", "--hash=0"],
        &["show-ref", "--hash=70"],
        &["show-ref", "--hash=-5"],
        &["show-ref", "--hash"],
        &["show-ref", "-s", "main"],
        // `--` ends the options.
        &["show-ref", "--", "main"],
        &["show-ref", "-d", "--", "v1"],
        &["show-ref", "--end-of-options", "main"],
        // Mistakes: git's words, exit 129.
        &["show-ref", "--bogus"],
        &["show-ref", "--bogus=1"],
        &["show-ref", "-x"],
        &["show-ref", "-dx"],
        &["show-ref", "--verify=1"],
        &["show-ref", "--dere=1"],
        &["show-ref", "-verify"],
        &["show-ref", "-no-head"],
        &["show-ref", "--hash=abc"],
        &["show-ref", "-sq"],
        &["show-ref", "-s=7"],
    ] {
        same_with_error(d, args, args);
    }
    // An ambiguous prefix: git's message (which names the two options in the order of
    // its own table) and exit code.
    for (args, both) in [
        (&["show-ref", "--he"][..], ["--heads", "--head"]),
        (&["show-ref", "--hea", "main"], ["--heads", "--head"]),
    ] {
        let (a, b) = (ours(d, args), run("git", d, args, None));
        assert_eq!((a.status.code(), b.status.code()), (Some(129), Some(129)));
        let (ea, eb) = (first_error_line(&a), first_error_line(&b));
        let prefix = format!("error: ambiguous option: {} (could be ", &args[1][2..]);
        for e in [&ea, &eb] {
            assert!(
                e.starts_with(&prefix) && both.iter().all(|o| e.contains(o)),
                "{args:?}: {e}"
            );
        }
        assert!(String::from_utf8_lossy(&a.stderr).contains("usage: reftablefs show-ref"));
    }
}

#[test]
fn other_commands_parse_as_gits() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    rich_repo(d);
    for args in [
        &["for-each-ref", "--form=%(refname)"][..],
        &[
            "for-each-ref",
            "--format",
            "%(refname) %(objectname:short)",
            "refs/tags",
        ],
        &[
            "for-each-ref",
            "--cou=2",
            "--sort=-refname",
            "--format=%(refname)",
        ],
        &["for-each-ref", "--count", "1"],
        &["for-each-ref", "--count=+2"],
        &["for-each-ref", "--count=x"],
        &["for-each-ref", "--count="],
        &["for-each-ref", "--count=-1"],
        &["for-each-ref", "--format"],
        &["for-each-ref", "--form"],
        &["for-each-ref", "--include-root", "--format=%(refname)"],
        &["for-each-ref", "--bogus"],
        &["for-each-ref", "--", "refs/heads"],
        &["update-ref", "-m"],
        &["update-ref", "--no-m"],
        &["update-ref", "-x"],
        &["update-ref", "--bogus"],
        &["reflog", "exists", "--bogus"],
    ] {
        same_with_error(d, args, args);
    }
    // Values attached to a bundle, and an abbreviated option, write what git writes.
    let main = git(d, &["rev-parse", "refs/heads/main"]);
    for (name, args) in [
        (
            "a",
            vec![
                "update-ref",
                "-mmade",
                "--create-r",
                "refs/heads/a",
                main.trim(),
            ],
        ),
        (
            "b",
            vec![
                "update-ref",
                "--no-d",
                "-m",
                "made",
                "refs/heads/b",
                main.trim(),
            ],
        ),
    ] {
        let o = ours(d, &args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let log = git(
            d,
            &[
                "reflog",
                "show",
                "--format=%gs",
                &format!("refs/heads/{name}"),
            ],
        );
        assert_eq!(log, "made\n", "{args:?}");
    }
    // The same bundle, git's way and ours, in two copies: the same refs.
    let copies = tempfile::tempdir().unwrap();
    let (a, b) = (copies.path().join("a"), copies.path().join("b"));
    copy_repo(d, &a);
    copy_repo(d, &b);
    let args = ["update-ref", "-dm", "gone", "refs/heads/main-2"];
    let (x, y) = (ours(&a, &args), run("git", &b, &args, None));
    assert_eq!((x.status.code(), y.status.code()), (Some(0), Some(0)));
    same(&a, &["show-ref"], &["show-ref"]);
    assert_eq!(git(&a, &["show-ref"]), git(&b, &["show-ref"]));
}
