//! CLI vs git, same work, same data, one run: `cargo bench --bench cli_vs_git`.
//!
//! Rows (sizes divided by `BENCH_SCALE`, default 1):
//! 1. create 100k refs in one transaction: `reftablefs update-ref --stdin` vs
//!    `git update-ref --stdin` (same input, fresh copies of the same repository);
//! 2. resolve 10k random branch names in one process: `reftablefs resolve` vs
//!    `git rev-parse` (same arguments, on the 100k-ref repository);
//! 3. list 100k refs: `reftablefs for-each-ref` vs `git for-each-ref`, with
//!    `--format=%(objectname) %(refname)` and with git's default format (object types);
//! 4. migrate 1M refs: `reftablefs migrate` vs `git refs migrate --ref-format=reftable`
//!    on copies of one files-backend repository whose refs are all in `packed-refs`,
//!    without reflogs (git 2.47 refuses reflogs).
//!
//! `CLI_BENCH_ONLY=create` runs row 1 alone (the write path, issue 26.4).
//!
//! Each figure is the best of `BENCH_ROUNDS` (default 3; 1 for the migrate row) wall-clock
//! runs of the whole process, output to /dev/null; the create row runs ours and git's in
//! turn, round by round. Prints a markdown table.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_reftablefs");

#[path = "../tests/support/rng.rs"]
mod rng;

fn scale() -> usize {
    std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1)
}

fn rounds() -> usize {
    std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(3)
}

fn cmd(program: &str, dir: &Path) -> Command {
    let mut c = Command::new(program);
    c.current_dir(dir)
        .env_remove("GIT_DIR")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com");
    c
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = cmd("git", dir).args(args).output().expect("git runs");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// Runs `program args` in `dir` with `stdin`, output discarded; returns the wall time.
fn time(program: &str, dir: &Path, args: &[&str], stdin: Option<&Path>) -> Duration {
    let mut c = cmd(program, dir);
    c.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    match stdin {
        Some(p) => c.stdin(std::fs::File::open(p).expect("input file")),
        None => c.stdin(Stdio::null()),
    };
    let start = Instant::now();
    let o = c.output().expect("spawn");
    let t = start.elapsed();
    assert!(
        o.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    t
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp")
        .success();
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}

/// Best of `n` runs of `f` (each gets a fresh setup from `setup`).
fn best(n: usize, mut setup: impl FnMut(), mut f: impl FnMut() -> Duration) -> Duration {
    (0..n)
        .map(|_| {
            setup();
            f()
        })
        .min()
        .unwrap_or_default()
}

/// Best of `n` rounds of `ours` and `theirs` run in turn (each sets up its own fresh
/// copy), so that a change of the machine's load meets both sides.
fn best_interleaved(
    n: usize,
    mut ours: impl FnMut() -> Duration,
    mut theirs: impl FnMut() -> Duration,
) -> (Duration, Duration) {
    let (mut a, mut b) = (Duration::MAX, Duration::MAX);
    for _ in 0..n.max(1) {
        a = a.min(ours());
        b = b.min(theirs());
    }
    (a, b)
}

struct Row {
    work: String,
    ours: Duration,
    git: Duration,
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn main() {
    if std::env::args().any(|a| a == "--test") {
        return; // `cargo test --benches` smoke mode: nothing to check here.
    }
    let tmp = tempdir();
    let root = tmp.path.clone();
    let n_create = 100_000 / scale();
    let n_resolve = 10_000 / scale();
    let n_migrate = 1_000_000 / scale();
    let r = rounds();
    let mut rows = Vec::new();

    // The base repository: reftable, one commit.
    let base = root.join("base");
    std::fs::create_dir(&base).expect("mkdir");
    git(
        &base,
        &["init", "-q", "--ref-format=reftable", "-b", "main"],
    );
    git(&base, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let oid = git(&base, &["rev-parse", "HEAD"]);

    // 1. create n refs in one transaction.
    let input = root.join("create.txt");
    {
        let mut s = String::with_capacity(n_create * 80);
        for i in 0..n_create {
            s.push_str(&format!(
                "create refs/heads/d{:03}/branch-{i:07} {oid}\n",
                i % 1000
            ));
        }
        std::fs::write(&input, s).expect("write input");
    }
    let (a, b) = (root.join("a"), root.join("b"));
    let (ours, theirs) = best_interleaved(
        r,
        || {
            copy_dir(&base, &a);
            time(BIN, &a, &["update-ref", "--stdin"], Some(&input))
        },
        || {
            copy_dir(&base, &b);
            time("git", &b, &["update-ref", "--stdin"], Some(&input))
        },
    );
    assert_eq!(
        git(&a, &["for-each-ref", "--format=%(refname) %(objectname)"]),
        git(&b, &["for-each-ref", "--format=%(refname) %(objectname)"]),
        "both tools created the same refs"
    );
    rows.push(Row {
        work: format!("create {n_create} refs in one transaction (`update-ref --stdin`)"),
        ours,
        git: theirs,
    });

    if std::env::var_os("CLI_BENCH_ONLY").is_some_and(|v| v == "create") {
        print_rows(&rows);
        return;
    }

    // 2. resolve random branch names in one process (on git's repository b).
    // The same names on every run.
    let mut rng = rng::Rng::new(0x9E37_79B9_7F4A_7C15);
    let names: Vec<String> = (0..n_resolve)
        .map(|_| {
            let i = rng.below(n_create);
            format!("d{:03}/branch-{i:07}", i % 1000)
        })
        .collect();
    let names_ref: Vec<&str> = names.iter().map(String::as_str).collect();
    let ours_args: Vec<&str> = [&["resolve"][..], &names_ref].concat();
    let git_args: Vec<&str> = [&["rev-parse"][..], &names_ref].concat();
    let ours = best(r, || {}, || time(BIN, &b, &ours_args, None));
    let theirs = best(r, || {}, || time("git", &b, &git_args, None));
    rows.push(Row {
        work: format!("resolve {n_resolve} random branch names (`resolve` vs `rev-parse`)"),
        ours,
        git: theirs,
    });

    // 3. list all refs.
    let fmt = "--format=%(objectname) %(refname)";
    let ours = best(r, || {}, || time(BIN, &b, &["for-each-ref", fmt], None));
    let theirs = best(r, || {}, || time("git", &b, &["for-each-ref", fmt], None));
    rows.push(Row {
        work: format!("list {} refs, `{fmt}`", n_create + 1),
        ours,
        git: theirs,
    });
    let ours = best(r, || {}, || time(BIN, &b, &["for-each-ref"], None));
    let theirs = best(r, || {}, || time("git", &b, &["for-each-ref"], None));
    rows.push(Row {
        work: format!(
            "list {} refs, default format (object types), all refs on one commit",
            n_create + 1
        ),
        ours,
        git: theirs,
    });

    // 3b. The same with one distinct object per ref (loose blobs under refs/tags/), so
    // that object-type lookups cannot be shared.
    let distinct = root.join("distinct");
    copy_dir(&base, &distinct);
    {
        let mut s = String::with_capacity(n_create * 80);
        for i in 0..n_create {
            let id = write_loose_blob(
                &distinct.join(".git/objects"),
                format!("blob {i}\n").as_bytes(),
            );
            s.push_str(&format!(
                "create refs/tags/t{:03}/blob-{i:07} {id}\n",
                i % 1000
            ));
        }
        let inp = root.join("distinct.txt");
        std::fs::write(&inp, s).expect("write input");
        time(BIN, &distinct, &["update-ref", "--stdin"], Some(&inp));
    }
    let ours = best(r, || {}, || time(BIN, &distinct, &["for-each-ref"], None));
    let theirs = best(r, || {}, || time("git", &distinct, &["for-each-ref"], None));
    rows.push(Row {
        work: format!(
            "list {} refs, default format (object types), one object per ref",
            n_create + 1
        ),
        ours,
        git: theirs,
    });

    // 3c. The same objects packed (`git gc`): types now come through `git cat-file`.
    git(&distinct, &["gc", "-q"]);
    let ours = best(r, || {}, || time(BIN, &distinct, &["for-each-ref"], None));
    let theirs = best(r, || {}, || time("git", &distinct, &["for-each-ref"], None));
    rows.push(Row {
        work: format!(
            "list {} refs, default format (object types), one packed object per ref",
            n_create + 1
        ),
        ours,
        git: theirs,
    });

    // 4. migrate a files repository with n refs in packed-refs, no reflogs.
    let files = root.join("files");
    std::fs::create_dir(&files).expect("mkdir");
    git(&files, &["init", "-q", "--ref-format=files", "-b", "main"]);
    git(&files, &["config", "core.logAllRefUpdates", "false"]);
    git(&files, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let foid = git(&files, &["rev-parse", "HEAD"]);
    {
        let mut names: Vec<String> = (0..n_migrate)
            .map(|i| format!("refs/heads/d{:03}/branch-{i:07}", i % 1000))
            .collect();
        names.push("refs/heads/main".into());
        names.sort();
        let mut s = String::with_capacity(n_migrate * 80);
        s.push_str("# pack-refs with: peeled fully-peeled sorted \n");
        for n in &names {
            s.push_str(&foid);
            s.push(' ');
            s.push_str(n);
            s.push('\n');
        }
        std::fs::write(files.join(".git/packed-refs"), s).expect("packed-refs");
        let _ = std::fs::remove_file(files.join(".git/refs/heads/main"));
        let _ = std::fs::remove_dir_all(files.join(".git/logs"));
    }
    let mr = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let ours = best(
        mr,
        || copy_dir(&files, &a),
        || time(BIN, &a, &["migrate", "--no-progress"], None),
    );
    let theirs = best(
        mr,
        || copy_dir(&files, &b),
        || {
            time(
                "git",
                &b,
                &["refs", "migrate", "--ref-format=reftable"],
                None,
            )
        },
    );
    let ta = table_bytes(&a);
    let tb = table_bytes(&b);
    assert_eq!(ta, tb, "migrated tables are byte-identical");
    rows.push(Row {
        work: format!(
            "migrate {} refs (`migrate` vs `git refs migrate`)",
            n_migrate + 1
        ),
        ours,
        git: theirs,
    });

    print_rows(&rows);
}

/// The markdown table of the rows measured.
fn print_rows(rows: &[Row]) {
    println!("\n| work | reftablefs ms | git ms | ours/git |");
    println!("|---|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {} | {} | {:.3} |",
            row.work,
            ms(row.ours),
            ms(row.git),
            row.ours.as_secs_f64() / row.git.as_secs_f64().max(1e-9)
        );
    }
}

/// Writes a loose blob the way git does (zlib of `blob <len>\0<content>`); returns its id.
fn write_loose_blob(objects: &Path, content: &[u8]) -> String {
    use sha1::Digest;
    use std::io::Write;
    let mut raw = format!("blob {}\0", content.len()).into_bytes();
    raw.extend_from_slice(content);
    let hex: String = sha1::Sha1::digest(&raw)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = objects.join(&hex[..2]);
    std::fs::create_dir_all(&dir).expect("objects dir");
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&raw).expect("deflate");
    std::fs::write(dir.join(&hex[2..]), z.finish().expect("deflate")).expect("write object");
    hex
}

fn table_bytes(repo: &Path) -> Vec<u8> {
    let dir = repo.join(".git/reftable");
    let list = std::fs::read_to_string(dir.join("tables.list")).expect("tables.list");
    list.lines()
        .flat_map(|l| std::fs::read(dir.join(l)).expect("table"))
        .collect()
}

/// A temporary directory removed on drop (no dev-dependency needed in a bench).
struct TempDir {
    path: PathBuf,
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn tempdir() -> TempDir {
    let base = std::env::var_os("BENCH_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = base.join(format!("reftablefs-cli-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).expect("temp dir");
    TempDir { path }
}
