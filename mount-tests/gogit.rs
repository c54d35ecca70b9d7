//! go-git (Debian's `golang-github-go-git-go-git-dev`, 5.4) through the mount: a small
//! client built offline from the packaged sources runs one session — `CreateBranch`,
//! `CreateRemote`, `SetConfig`, refs and a symref written, `DeleteBranch`, a ref removed,
//! everything read back — once in a work tree whose `.git` is the mount (`mount --over`)
//! and once on a files repository made the same way. git 2.47 then compares the two:
//! refs and symrefs, every reflog, and the config (less the format version and the
//! extension). go-git writes `.git/config` in place (`open(O_RDWR|O_CREAT|O_TRUNC)`, no
//! lock: `docs/client-syscall-patterns.md`), so the session also proves that a config
//! written in place lands in GITDIR with `extensions.refStorage` kept.
//!
//! SKIPs (a visible line, `Ok`) when `go` or the package is missing and cannot be
//! installed (`apt-get install golang-go golang-github-go-git-go-git-dev`, root only).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::harness::{check, note, stage, Ctx, Mount, TestResult};

/// Where Debian installs the go-git sources (GOPATH layout).
const GOCODE: &str = "/usr/share/gocode";
const GOGIT_SRC: &str = "/usr/share/gocode/src/github.com/go-git/go-git";

/// The session: prints what go-git reads back (refs, then a config summary).
const SESSION_GO: &str = r#"package main

import (
	"fmt"
	"os"
	"sort"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
)

func must(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}

func main() {
	r, err := git.PlainOpen(os.Args[1])
	must(err, "open")
	head, err := r.Head()
	must(err, "HEAD")
	id := head.Hash()
	must(r.CreateBranch(&config.Branch{Name: "topic", Remote: "origin", Merge: "refs/heads/main"}), "CreateBranch topic")
	must(r.CreateBranch(&config.Branch{Name: "gone", Remote: "origin", Merge: "refs/heads/gone"}), "CreateBranch gone")
	_, err = r.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{"/nowhere/origin.git"}})
	must(err, "CreateRemote")
	cfg, err := r.Config()
	must(err, "Config")
	cfg.Raw.Section("gogit").SetOption("session", "yes")
	cfg.User.Name = "Go Git"
	must(r.SetConfig(cfg), "SetConfig")
	st := r.Storer
	for _, n := range []string{"refs/heads/topic", "refs/heads/gone", "refs/tags/v1", "refs/remotes/origin/main", "refs/notes/x"} {
		must(st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(n), id)), "set "+n)
	}
	must(st.SetReference(plumbing.NewSymbolicReference("refs/remotes/origin/HEAD", "refs/remotes/origin/main")), "symref")
	must(r.DeleteBranch("gone"), "DeleteBranch")
	for _, n := range []string{"refs/heads/gone", "refs/notes/x"} {
		// Printed, not fatal: the loose file is gone before packed-refs is opened.
		if err := st.RemoveReference(plumbing.ReferenceName(n)); err != nil {
			fmt.Printf("ERR remove %s: %v\n", n, err)
		}
	}
	refs, err := r.References()
	must(err, "References")
	var out []string
	must(refs.ForEach(func(ref *plumbing.Reference) error {
		s := ref.Strings()
		out = append(out, s[0]+" "+s[1])
		return nil
	}), "ForEach")
	sort.Strings(out)
	for _, l := range out {
		fmt.Println(l)
	}
	cfg, err = r.Config()
	must(err, "Config again")
	fmt.Println("remotes", len(cfg.Remotes), "branches", len(cfg.Branches), "user", cfg.User.Name, "gogit.session", cfg.Raw.Section("gogit").Option("session"))
}
"#;

/// Whether `go` and the go-git sources are here; if not, tries to install them (root,
/// apt-get). `Err(why)` when they cannot be had.
fn have_go_git() -> Result<(), String> {
    let present = || {
        Command::new("go")
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && Path::new(GOGIT_SRC).join("repository.go").exists()
    };
    if present() {
        return Ok(());
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Err("go or golang-github-go-git-go-git-dev missing, and not root".into());
    }
    stage("apt-get install golang-go golang-github-go-git-go-git-dev");
    let install = Command::new("timeout")
        .args(["600", "apt-get", "install", "-y", "--no-install-recommends"])
        .args(["golang-go", "golang-github-go-git-go-git-dev"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output();
    match install {
        Ok(o) if o.status.success() && present() => Ok(()),
        Ok(o) => Err(format!(
            "apt-get install golang-go golang-github-go-git-go-git-dev failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("apt-get: {e}")),
    }
}

/// Builds the session program offline (GOPATH mode over Debian's sources) into `dir`.
/// The package sits in a GOPATH of its own with a `go.mod`, so that go's "minimal module
/// compatibility" resolves go-git's `/v5` import paths to the packaged tree.
fn build_session(dir: &Path) -> TestResult<PathBuf> {
    let pkg = dir.join("gopath/src/gogitsession");
    fs::create_dir_all(&pkg)?;
    fs::write(pkg.join("main.go"), SESSION_GO)?;
    fs::write(pkg.join("go.mod"), "module gogitsession\n")?;
    let bin = dir.join("gogit-session");
    // One build cache for every run of the test binary (the packaged sources compile in
    // tens of seconds).
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gocache");
    stage("go build (go-git session)");
    let out = Command::new("timeout")
        .arg("600")
        .args(["go", "build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&pkg)
        .env(
            "GOPATH",
            format!("{}:{GOCODE}", dir.join("gopath").display()),
        )
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        .env("GOCACHE", &cache)
        .env("GOPROXY", "off")
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()?;
    check(&out, "go build of the go-git session")?;
    Ok(bin)
}

/// git 2.47 in `work` with a private HOME and the harness's identity and dates.
fn git(home: &Path, work: &Path, args: &[&str]) -> TestResult<String> {
    stage(&format!("git {} (in {})", args.join(" "), work.display()));
    let mut c = Command::new("git");
    crate::harness::git_env(&mut c, home, "1700000000 +0100")
        .args(args)
        .current_dir(work);
    let out = c.output()?;
    check(&out, &format!("git {}", args.join(" ")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A repository of `format` at `work` (`.git` a directory) with one commit.
fn make_repo(home: &Path, work: &Path, format: &str) -> TestResult {
    let parent = work.parent().unwrap_or(Path::new("/"));
    let w = work.to_string_lossy().into_owned();
    git(
        home,
        parent,
        &[
            "init",
            "-q",
            "-b",
            "main",
            &format!("--ref-format={format}"),
            &w,
        ],
    )?;
    fs::write(work.join("f0"), "base\n")?;
    git(home, work, &["add", "f0"])?;
    git(home, work, &["commit", "-q", "-m", "init"])?;
    Ok(())
}

/// What git 2.47 reads of `work`'s repository: refs with symrefs, every reflog, and the
/// local config less the format version and the extension.
fn snapshot(home: &Path, work: &Path) -> TestResult<BTreeMap<String, String>> {
    let mut s = BTreeMap::new();
    s.insert(
        "refs".into(),
        git(
            home,
            work,
            &[
                "for-each-ref",
                "--include-root-refs",
                "--format=%(refname) %(objectname) %(symref)",
            ],
        )?,
    );
    let mut names: Vec<String> = git(home, work, &["reflog", "list"])?
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    s.insert("reflog list".into(), names.join("\n"));
    for name in &names {
        s.insert(
            format!("reflog {name}"),
            git(
                home,
                work,
                &[
                    "reflog",
                    "show",
                    "--format=%H%x09%gn <%ge>%x09%gs",
                    name,
                    "--",
                ],
            )?,
        );
    }
    let config: Vec<String> = git(home, work, &["config", "--list", "--local"])?
        .lines()
        .filter(|l| {
            !l.starts_with("core.repositoryformatversion=")
                && !l.starts_with("extensions.refstorage=")
        })
        .map(str::to_string)
        .collect();
    s.insert("config".into(), config.join("\n"));
    Ok(s)
}

/// The go-git session through `mount --over` and on a files repository end equal as git
/// 2.47 reads them (refs, symrefs, reflogs, config); the reftable repository keeps
/// `extensions.refStorage` and format version 1 although go-git rewrote its config
/// without them; through the mount, the config reads back as go-git wrote it.
pub fn gogit_session(ctx: &Ctx) -> TestResult {
    if let Err(why) = have_go_git() {
        note(&format!("SKIP gogit_session: {why}"));
        return Ok(());
    }
    let bin = build_session(&ctx.path("build"))?;
    let home = ctx.path("home");
    fs::create_dir_all(&home)?;
    let (r, f) = (ctx.path("r"), ctx.path("f"));
    make_repo(&home, &r, "reftable")?;
    make_repo(&home, &f, "files")?;
    let session = |work: &Path| -> TestResult<String> {
        stage(&format!("go-git session in {}", work.display()));
        let out = Command::new("timeout")
            .arg("120")
            .arg(&bin)
            .arg(work)
            .env("HOME", &home)
            .stdin(Stdio::null())
            .output()?;
        check(&out, &format!("go-git session in {}", work.display()))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };

    let m = Mount::start_over(&r)?;
    let through = (|| -> TestResult<(String, String, String)> {
        let printed = session(&r)?;
        // What the client reads back through the mount, and what GITDIR holds meanwhile.
        let served = fs::read_to_string(r.join(".git/config"))?;
        let listed = git(&home, &r, &["config", "--list", "--local"])?;
        Ok((printed, served, listed))
    })();
    let unmounted = m.unmount();
    let (printed_r, served, listed) = through?;
    unmounted?;
    let printed_f = session(&f)?;
    // go-git deletes a ref by unlinking its loose file, then opens `packed-refs` with
    // O_RDWR to flock and rewrite it: every call must succeed through the mount as on a
    // files clone (the sessions print any error as an `ERR` line).
    ensure!(
        printed_r == printed_f,
        "go-git read back different things:\nfiles:\n{printed_f}\nthrough the mount:\n{printed_r}"
    );
    ensure!(
        printed_f.contains("refs/remotes/origin/HEAD ref: refs/remotes/origin/main")
            && printed_f.contains("gogit.session yes")
            && !printed_f.contains("refs/heads/gone"),
        "the session did not do what it should:\n{printed_f}"
    );
    // Served as go-git wrote it: its own sections, no extension.
    for want in ["[gogit]", "[remote \"origin\"]", "[branch \"topic\"]"] {
        ensure!(
            served.contains(want),
            "the config read through the mount lacks {want}:\n{served}"
        );
    }
    ensure!(
        !served.to_ascii_lowercase().contains("refstorage") && !served.contains("reftablefs"),
        "the config served through the mount shows the extension:\n{served}"
    );
    ensure!(
        listed.contains("gogit.session=yes"),
        "git 2.47 through the mount: {listed}"
    );

    // git 2.47 reads the real reftable repository.
    let fmt = git(&home, &r, &["rev-parse", "--show-ref-format"])?;
    ensure!(
        fmt.trim() == "reftable",
        "ref format after the go-git session: {fmt}\nconfig:\n{}",
        fs::read_to_string(r.join(".git/config")).unwrap_or_default()
    );
    let version = git(&home, &r, &["config", "core.repositoryformatversion"])?;
    ensure!(version.trim() == "1", "format version {version}");

    let (a, b) = (snapshot(&home, &f)?, snapshot(&home, &r)?);
    let mut diffs = String::new();
    for key in a.keys().chain(b.keys()) {
        if a.get(key) != b.get(key) && !diffs.contains(&format!("--- {key}\n")) {
            diffs.push_str(&format!(
                "--- {key}\nfiles:\n{}\nthrough the mount:\n{}\n",
                a.get(key).map_or("(missing)", String::as_str),
                b.get(key).map_or("(missing)", String::as_str)
            ));
        }
    }
    ensure!(
        diffs.is_empty(),
        "the go-git session differs between the files repository and the mount:\n{diffs}"
    );
    Ok(())
}
mount_test!(gogit_session, timeout = 900);

/// `close(2)` of `f`, its error returned (a `File`'s drop ignores it).
fn close(f: fs::File) -> std::io::Result<()> {
    use std::os::fd::IntoRawFd;
    let fd = f.into_raw_fd();
    // SAFETY: a descriptor we own, closed once.
    if unsafe { libc::close(fd) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `.git/config` through the mount is a file: `>`, `>>`, `O_RDWR` + `pwrite`,
/// `rm -f` then a new one, each read back through the mount exactly as written (by cat
/// and git 2.39), each stored in GITDIR with `extensions.refStorage` (git 2.47 reads a
/// reftable repository after every step); a write past 16 MiB fails with `EFBIG` and
/// stores nothing; on a full disk the store fails at `fsync` and `close` with `ENOSPC`
/// and GITDIR's config is untouched.
pub fn config_written_in_place(ctx: &Ctx) -> TestResult {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let small = crate::harness::SmallFs::mount(&ctx.path("small"), "8m")?;
    let base = match &small {
        Some(s) => s.0.clone(),
        None => ctx.path("plain"),
    };
    let home = ctx.path("home");
    fs::create_dir_all(&home)?;
    let r = base.join("r");
    make_repo(&home, &r, "reftable")?;
    // GITDIR's own config, beneath the mount about to cover .git: a path through a
    // descriptor of the directory opened before (r/.git/config would read through the
    // mount, which serves what open handles wrote, stored or not).
    let gitdir = fs::File::open(r.join(".git"))?;
    let real = std::path::PathBuf::from(format!(
        "/proc/self/fd/{}/config",
        std::os::fd::AsRawFd::as_raw_fd(&gitdir)
    ));
    let reftable_ok = |step: &str| -> TestResult {
        let fmt = git(&home, &r, &["rev-parse", "--show-ref-format"])?;
        let text = fs::read_to_string(&real)?;
        ensure!(
            fmt.trim() == "reftable"
                && text
                    .to_ascii_lowercase()
                    .contains("\trefstorage = reftable\n"),
            "after {step}, git 2.47 reads {fmt:?}; GITDIR's config:\n{text}"
        );
        Ok(())
    };
    let m = Mount::start_over(&r)?;
    let result = (|| -> TestResult {
        let cfg = r.join(".git/config");
        let git239 = |args: &[&str]| -> TestResult<String> {
            let mut c = Command::new("/usr/bin/git");
            crate::harness::git_env(&mut c, &home, "1700000000 +0000")
                .args(args)
                .current_dir(&r);
            let out = c.output()?;
            check(&out, &format!("git 2.39 {}", args.join(" ")))?;
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        // `>`: the shell's O_WRONLY|O_CREAT|O_TRUNC.
        let text =
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[user]\n\tname = Shell\n";
        stage("printf > .git/config");
        let out = Command::new("sh")
            .arg("-c")
            .arg("printf '%s' \"$1\" > .git/config")
            .arg("sh")
            .arg(text)
            .current_dir(&r)
            .output()?;
        check(&out, "printf > .git/config")?;
        ensure!(
            fs::read_to_string(&cfg)? == text,
            "read back after >: {:?}",
            fs::read_to_string(&cfg)?
        );
        ensure!(
            fs::metadata(&cfg)?.len() == text.len() as u64,
            "stat size after >"
        );
        ensure!(
            git239(&["config", "user.name"])?.trim() == "Shell",
            "git 2.39 through the mount"
        );
        // `>>`.
        stage("printf >> .git/config");
        let out = Command::new("sh")
            .arg("-c")
            .arg("printf '[a]\\n\\tb = c\\n' >> .git/config")
            .current_dir(&r)
            .output()?;
        check(&out, "printf >> .git/config")?;
        let text = format!("{text}[a]\n\tb = c\n");
        ensure!(
            fs::read_to_string(&cfg)? == text,
            "read back after >>: {:?}",
            fs::read_to_string(&cfg)?
        );
        ensure!(git239(&["config", "a.b"])?.trim() == "c", "a.b after >>");
        // O_RDWR + pwrite, then fsync: stored at the fsync.
        let f = fs::OpenOptions::new().read(true).write(true).open(&cfg)?;
        let at = text.find("Shell").unwrap_or(0) as u64;
        f.write_all_at(b"Other", at)?;
        f.sync_all()?;
        ensure!(
            fs::read_to_string(&real)?.contains("name = Other"),
            "not stored at fsync:\n{}",
            fs::read_to_string(&real)?
        );
        close(f)?;
        let text = text.replace("Shell", "Other");
        ensure!(fs::read_to_string(&cfg)? == text, "read back after pwrite");
        // rm -f, then a new one.
        fs::remove_file(&cfg)?;
        crate::harness::expect_errno(fs::metadata(&cfg), &[libc::ENOENT], "stat removed config")?;
        ensure!(
            !fs::read_dir(r.join(".git"))?
                .filter_map(Result::ok)
                .any(|e| e.file_name() == "config"),
            "a removed config is listed"
        );
        let mut f = fs::File::create(&cfg)?;
        f.write_all(b"[new]\n\tone = 1\n")?;
        close(f)?;
        ensure!(
            fs::read_to_string(&cfg)? == "[new]\n\tone = 1\n",
            "read back after rm and create: {:?}",
            fs::read_to_string(&cfg)?
        );
        ensure!(
            git239(&["config", "new.one"])?.trim() == "1",
            "git 2.39 after rm and create"
        );
        // Past the bound: EFBIG at write, nothing stored.
        let before = fs::read(&real)?;
        let f = fs::OpenOptions::new().write(true).open(&cfg)?;
        crate::harness::expect_errno(
            f.write_all_at(b"x", 16 << 20),
            &[libc::EFBIG],
            "a write past 16 MiB",
        )?;
        close(f)?;
        ensure!(
            fs::read(&real)? == before,
            "a refused write changed GITDIR's config"
        );
        // A full disk: the store fails at fsync and at close; GITDIR's config untouched.
        if let Some(s) = &small {
            // A second writable handle kept open: the last release (which stores once more) waits
            // for it, so nothing freed meanwhile (a compaction of the stack) can let a
            // retry succeed before the check below; it stores once there is room again.
            let keep = fs::OpenOptions::new().append(true).open(&cfg)?;
            let filler = s.fill()?;
            let mut f = fs::OpenOptions::new().append(true).open(&cfg)?;
            f.write_all(&vec![b'#'; 64 << 10])?;
            crate::harness::expect_errno(f.sync_all(), &[libc::ENOSPC], "fsync on a full disk")?;
            crate::harness::expect_errno(close(f), &[libc::ENOSPC], "close on a full disk")?;
            let after = fs::read(&real)?;
            ensure!(
                after == before,
                "a failed store changed GITDIR's config: before {:?}, after {:?}",
                String::from_utf8_lossy(&before),
                String::from_utf8_lossy(&after[..after.len().min(400)])
            );
            fs::remove_file(filler)?;
            // With room again, the last handle's close stores what the failed ones could not.
            close(keep)?;
            ensure!(
                fs::read(&real)? != before,
                "the content the full disk refused was not stored once there was room"
            );
        } else {
            note("SKIP the full-disk part: needs root to mount a size-limited tmpfs");
        }
        Ok(())
    })();
    let unmounted = m.unmount();
    result?;
    unmounted?;
    reftable_ok("the in-place writes")?;
    let left: Vec<String> = fs::read_dir(r.join(".git"))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    ensure!(left.is_empty(), "temporary files left in GITDIR: {left:?}");
    drop(small);
    Ok(())
}
mount_test!(config_written_in_place, timeout = 300);
