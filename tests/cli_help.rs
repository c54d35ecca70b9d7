//! The command table (`src/cli/table.rs`, the binary's, included here) against the binary: every
//! subcommand's help, every option it lists being accepted, every option its parser
//! takes being listed, and the completions and man page generated from it.

use std::path::Path;
use std::process::{Command, Output, Stdio};

// The binary's command table: pure data, so the test holds the binary to it without
// the library exporting the command line.
#[allow(dead_code)]
#[path = "../src/cli/table.rs"]
mod table;

use table::{Command as Cmd, COMMANDS, GLOBAL_OPTIONS};

#[path = "support/shells.rs"]
mod shells;

const BIN: &str = env!("CARGO_BIN_EXE_reftablefs");

/// Runs the binary outside any repository (`GIT_DIR` names nothing), stdin empty.
fn run(args: &[&str]) -> Output {
    let tmp = std::env::temp_dir();
    Command::new(BIN)
        .args(args)
        .current_dir(&tmp)
        .env("GIT_DIR", "/nonexistent/reftablefs-cli-help-test")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_subcommand_help_exits_0_and_names_every_option() {
    for c in COMMANDS {
        let long = run(&[c.name, "--help"]);
        let short = run(&[c.name, "-h"]);
        let via_help = run(&["help", c.name]);
        for (how, o) in [("--help", &long), ("-h", &short), ("help", &via_help)] {
            assert_eq!(
                o.status.code(),
                Some(0),
                "{} {how}: {}",
                c.name,
                text(&o.stderr)
            );
        }
        let out = text(&long.stdout);
        assert_eq!(out, text(&short.stdout), "{}", c.name);
        assert_eq!(out, text(&via_help.stdout), "{}", c.name);
        assert!(
            out.starts_with(&format!("usage: reftablefs {}", c.name)),
            "{}: {out}",
            c.name
        );
        for o in c.options {
            assert!(
                out.contains(o.spelling),
                "{}: {} missing in\n{out}",
                c.name,
                o.spelling
            );
            for n in o.names() {
                // `--[no-]x` names both `--x` and `--no-x`.
                let negatable = o.spelling.contains("--[no-]");
                assert!(out.contains(&n.name) || negatable, "{}: {}", c.name, n.name);
            }
            assert!(out.contains(o.help), "{}: help of {}", c.name, o.spelling);
        }
        for part in ["examples:", "exit status:", "129"] {
            assert!(out.contains(part), "{}: {part}", c.name);
        }
        for (code, _) in c.exit_codes {
            assert!(
                out.contains(&format!("    {code} ")),
                "{}: exit code {code}",
                c.name
            );
        }
    }
    let top = run(&["--help"]);
    assert_eq!(top.status.code(), Some(0));
    let top = text(&top.stdout);
    for c in COMMANDS {
        assert!(
            top.contains(&format!("   {} ", c.name)),
            "{} not listed",
            c.name
        );
    }
    assert_eq!(text(&run(&["help"]).stdout), top);
}

/// The arguments that give option `name` a value when it takes one.
fn with_value(name: &str, value: Option<&str>, equals: bool) -> Vec<String> {
    match (value, equals) {
        (None, _) => vec![name.to_owned()],
        (Some(_), true) => vec![format!("{name}=x")],
        (Some(_), false) => vec![name.to_owned(), "x".to_owned()],
    }
}

#[test]
fn every_listed_option_is_accepted() {
    for c in COMMANDS {
        for o in c.options {
            for n in o.names() {
                let mut args = vec![c.name.to_owned()];
                args.extend(with_value(&n.name, n.value.as_deref(), n.equals));
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = run(&refs);
                let err = text(&out.stderr);
                assert!(!err.contains("unknown option"), "{args:?} refused: {err}");
                assert!(!err.contains("panicked"), "{args:?}: {err}");
            }
        }
    }
    for o in GLOBAL_OPTIONS {
        for n in o.names() {
            let mut args = with_value(&n.name, n.value.as_deref(), n.equals);
            if n.name == "-c" {
                args = vec!["-c".into(), "a.b=c".into()];
            }
            args.push("help".into());
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run(&refs);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{args:?}: {}",
                text(&out.stderr)
            );
        }
    }
}

/// The file that parses each command's options.
fn source_of(c: &Cmd) -> &'static str {
    match c.name {
        "show-ref" => "show_ref.rs",
        "for-each-ref" => "for_each_ref.rs",
        "update-ref" => "update_ref.rs",
        "mount" | "unmount" => "mount.rs",
        "exec" => "exec.rs",
        "completions" | "man" | "help" => "gen.rs",
        "resolve" => "resolve.rs",
        "reflog" => "reflog.rs",
        "compact" => "compact.rs",
        "verify" => "verify.rs",
        "migrate" => "migrate.rs",
        "dump" => "dump.rs",
        "status" => "status.rs",
        "unlock" => "unlock.rs",
        _ => "",
    }
}

/// The string literals passed to `.flag("…")` and `.value("…")` in `src`.
fn parsed_words(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for pat in [".flag(\"", ".value(\""] {
        let mut rest = src;
        while let Some(i) = rest.find(pat) {
            rest = &rest[i + pat.len()..];
            if let Some(end) = rest.find('"') {
                out.push(rest[..end].to_owned());
            }
        }
    }
    out
}

#[test]
fn every_option_a_parser_takes_is_in_the_table() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let global: Vec<String> = GLOBAL_OPTIONS
        .iter()
        .flat_map(|o| o.names())
        .map(|n| n.name)
        .collect();
    for file in ["common.rs", "mod.rs"] {
        let src = std::fs::read_to_string(dir.join(file)).unwrap();
        for w in parsed_words(&src) {
            assert!(
                global.contains(&w),
                "{file} parses {w}, not a global option of the table"
            );
        }
    }
    let mut files: Vec<&str> = COMMANDS.iter().map(source_of).collect();
    files.sort_unstable();
    files.dedup();
    for file in files {
        assert!(
            !file.is_empty(),
            "a command without a source file in this test"
        );
        let src = std::fs::read_to_string(dir.join(file)).unwrap();
        let known: Vec<String> = COMMANDS
            .iter()
            .filter(|c| source_of(c) == file)
            .flat_map(|c| {
                c.options
                    .iter()
                    .flat_map(|o| o.names())
                    .map(|n| n.name)
                    .chain(c.words.iter().map(|w| (*w).to_owned()))
            })
            .collect();
        for w in parsed_words(&src) {
            assert!(
                known.contains(&w),
                "{file} parses {w:?}, which the command table does not list"
            );
        }
    }
}

#[test]
fn completions_and_man_page_mention_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let s = text(&o.stdout);
        for c in COMMANDS {
            assert!(s.contains(c.name), "{shell} completion lacks {}", c.name);
        }
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(129));
    // bash can check its own syntax.
    let script = text(&run(&["completions", "bash"]).stdout);
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("reftablefs.bash");
    std::fs::write(&f, &script).unwrap();
    let o = Command::new("bash").arg("-n").arg(&f).output().unwrap();
    assert!(o.status.success(), "bash -n: {}", text(&o.stderr));
    // And the completion answers: subcommands, then a subcommand's options.
    let probe = format!(
        "source {}\nCOMP_WORDS=(reftablefs up); COMP_CWORD=1; _reftablefs; echo \"${{COMPREPLY[*]}}\"\n\
         COMP_WORDS=(reftablefs show-ref --de); COMP_CWORD=2; _reftablefs; echo \"${{COMPREPLY[*]}}\"\n",
        f.display()
    );
    let o = Command::new("bash").arg("-c").arg(probe).output().unwrap();
    assert_eq!(
        text(&o.stdout),
        "update-ref\n--dereference\n",
        "{}",
        text(&o.stderr)
    );

    let o = run(&["man"]);
    assert_eq!(o.status.code(), Some(0));
    let man = text(&o.stdout);
    assert!(man.starts_with(".TH REFTABLEFS 1"));
    for c in COMMANDS {
        assert!(
            man.contains(&format!(".SS \"{}\"", c.name.replace('-', "\\-"))),
            "man lacks {}",
            c.name
        );
    }
    // groff, when installed, renders it without warnings.
    let page = tmp.path().join("reftablefs.1");
    std::fs::write(&page, &man).unwrap();
    if let Ok(o) = Command::new("groff")
        .args(["-man", "-ww", "-z"])
        .arg(&page)
        .output()
    {
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "groff: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn misuse_prints_the_usage_and_exits_129() {
    for args in [
        &["frobnicate"][..],
        &["show-ref", "--bogus"],
        &["compact", "extra"],
        &["dump"],
        &["--bogus"],
        &["help", "a", "b"],
        &["status", "--bogus"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(129), "{args:?}");
        assert!(
            text(&o.stderr).contains("usage: reftablefs"),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    let o = run(&["help", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    let o = run(&["--version"]);
    assert_eq!(
        text(&o.stdout),
        format!("reftablefs version {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// The three completion scripts, run by the real shells: a subcommand, a subcommand's
/// option and a fixed operand complete to the one match in bash, zsh and fish.
#[test]
fn completions_complete_in_bash_zsh_and_fish() {
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let script = |shell: &str| {
        let f = tmp.path().join(format!("reftablefs.{shell}"));
        std::fs::write(&f, run(&["completions", shell]).stdout).unwrap();
        f
    };
    let cases = [
        (&["reftablefs", "up"][..], "update-ref"),
        (&["reftablefs", "show-ref", "--de"][..], "--dereference"),
        (&["reftablefs", "completions", "f"][..], "fish"),
        (&["reftablefs", "help", "unl"][..], "unlock"),
    ];
    let bash = script("bash");
    for (words, want) in cases {
        assert_eq!(shells::bash(&bash, bin_dir, words), want, "bash {words:?}");
    }
    if shells::have("zsh") {
        let zsh = script("zsh");
        for (words, want) in cases {
            let line = words.join(" ");
            let mut done = words[..words.len() - 1].join(" ");
            done.push(' ');
            done.push_str(want);
            done.push(' ');
            assert_eq!(shells::zsh(&zsh, bin_dir, &line), done, "zsh {line:?}");
        }
    }
    if shells::have("fish") {
        let fish = script("fish");
        for (words, want) in cases {
            let line = words.join(" ");
            assert_eq!(shells::fish(&fish, bin_dir, &line), [want], "fish {line:?}");
        }
    }
}
