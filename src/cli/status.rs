//! `reftablefs status [--json] [MOUNTPOINT]`: this user's reftablefs mounts, and what one
//! of them is doing.
//!
//! The list comes from `/proc/self/mountinfo` (file system type `fuse.reftable`, source
//! `reftablefs`, the mount's `user_id` equal to ours); the serving process, its
//! repository and its options from the `reftablefs mount` command lines under `/proc`.
//! Nothing here touches a mount's files except the one status file of the mount asked
//! about, `MOUNTPOINT/.reftablefs/status` ([`STATUS_FILE`]; format in docs/cli.md and
//! [`Report`]), read with a size bound and a time limit so a hung mount cannot hang us.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::parse::{self, Grammar};
use super::table::{self, Id};
use super::{common, Args};
use reftablefs::status_file::Report;
use reftablefs::{Error, Result};
use serde::Serialize;
use serde_json::value::RawValue;

/// The status file a mount serves, relative to its mount point.
pub const STATUS_FILE: &str = ".reftablefs/status";
/// The largest status file read.
pub const MAX_STATUS_BYTES: u64 = 1 << 20;
/// How long to wait for a mount to answer.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// One reftablefs mount, as far as the kernel and `/proc` tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub mountpoint: PathBuf,
    /// `rw` or `ro` (the mount's options).
    pub mode: String,
    pub user_id: Option<u32>,
    /// The serving `reftablefs mount` process, when found.
    pub pid: Option<u32>,
    /// Its GITDIR argument, made absolute.
    pub repository: Option<PathBuf>,
    /// Its command-line options (`--batch-window=5`, `--read-only`, ...).
    pub options: Vec<String>,
}

/// The reftablefs mounts listed in a mountinfo text (see proc(5)).
pub fn parse_mountinfo(text: &[u8]) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        let (Some(mp), Some(opts), Some(fstype), Some(source)) = (
            fields.get(4),
            fields.get(5),
            fields.get(sep + 1),
            fields.get(sep + 2),
        ) else {
            continue;
        };
        let ours = *fstype == b"fuse.reftable"
            || (fstype.starts_with(b"fuse") && *source == b"reftablefs");
        if !ours {
            continue;
        }
        let mode = if opts.split(|&b| b == b',').any(|o| o == b"ro") {
            "ro"
        } else {
            "rw"
        };
        let user_id = fields.get(sep + 3).and_then(|so| {
            so.split(|&b| b == b',')
                .find_map(|o| o.strip_prefix(b"user_id="))
                .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        });
        out.push(Mount {
            mountpoint: PathBuf::from(OsStr::from_bytes(&reftablefs::mountinfo::unescape(mp))),
            mode: mode.into(),
            user_id,
            pid: None,
            repository: None,
            options: Vec::new(),
        });
    }
    out
}

/// `(-C dirs, gitdir, mountpoint, options)` of a `reftablefs mount` command line (argv
/// after the program name), read by the parser `mount` itself uses: paths as written,
/// options in their canonical spelling (`--batch-window=5`, whether given so, as
/// `--batch-w 5` or in `-o batch_window=5`). `None` for any other command line (including
/// the `--daemon` parent, which only waits).
pub fn parse_mount_argv(argv: &[&[u8]]) -> Option<(Vec<PathBuf>, PathBuf, PathBuf, Vec<String>)> {
    let argv: Vec<OsString> = argv
        .iter()
        .map(|w| OsStr::from_bytes(w).to_owned())
        .collect();
    let global = parse::parse(&Grammar::GLOBAL, &argv).ok()?;
    let dirs = global
        .values(Id::ChangeDir)
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let (name, rest) = global.operands().split_first()?;
    if name != "mount" {
        return None;
    }
    let args = parse::parse(&Grammar::of(table::find("mount")?), rest).ok()?;
    if args.flag(Id::Daemon) {
        return None;
    }
    let options = args
        .canonical(&[])
        .iter()
        .map(|o| o.to_string_lossy().into_owned())
        .collect();
    // `--over WORKTREE [WORKTREE/.git]` mounts on WORKTREE/.git, the repository beneath it.
    let (gitdir, mountpoint) = match (args.flag(Id::Over), args.operands()) {
        (true, [wt]) => (Path::new(wt).join(".git"), Path::new(wt).join(".git")),
        (true, [wt, mnt]) => (Path::new(wt).join(".git"), PathBuf::from(mnt)),
        (false, [gitdir, mnt]) => (PathBuf::from(gitdir), PathBuf::from(mnt)),
        _ => return None,
    };
    Some((dirs, gitdir, mountpoint, options))
}

/// `p` made absolute against `base` without touching the file system (`.` and `..`
/// resolved lexically), so that naming a hung mount does not hang.
fn absolute(base: &Path, p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(p).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Fills in pid, repository and options from the `reftablefs mount` processes of `/proc`.
fn find_processes(mounts: &mut [Mount]) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline
            .split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .collect();
        let is_ours = argv
            .first()
            .is_some_and(|a0| a0.split(|&b| b == b'/').next_back() == Some(b"reftablefs"));
        if !is_ours {
            continue;
        }
        let Some((dirs, gitdir, mp, options)) = parse_mount_argv(argv.get(1..).unwrap_or_default())
        else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else {
            continue;
        };
        let base = dirs.iter().fold(cwd, |b, d| absolute(&b, d));
        let mp = absolute(&base, &mp);
        if let Some(m) = mounts
            .iter_mut()
            .find(|m| m.pid.is_none() && m.mountpoint == mp)
        {
            m.pid = Some(pid);
            m.repository = Some(absolute(&base, &gitdir));
            m.options = options;
        }
    }
}

/// This user's reftablefs mounts.
pub fn list_mounts() -> Result<Vec<Mount>> {
    let text =
        std::fs::read("/proc/self/mountinfo").map_err(|e| Error::io("/proc/self/mountinfo", e))?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut mounts: Vec<Mount> = parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.user_id.is_none_or(|u| u == uid))
        .collect();
    find_processes(&mut mounts);
    Ok(mounts)
}

/// Reads `mountpoint/.reftablefs/status` in a helper thread, at most
/// [`MAX_STATUS_BYTES`], waiting at most `timeout`. `Ok(None)`: the mount serves no
/// status file (this version of the mount has none).
pub fn read_status(
    mountpoint: &Path,
    timeout: Duration,
) -> std::result::Result<Option<String>, String> {
    use std::io::Read;
    let path = mountpoint.join(STATUS_FILE);
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.clone();
    // The thread is left behind if the mount never answers; the process exits anyway.
    std::thread::spawn(move || {
        let r = std::fs::File::open(&p).and_then(|f| {
            let mut s = String::new();
            f.take(MAX_STATUS_BYTES + 1)
                .read_to_string(&mut s)
                .map(|_| s)
        });
        let _ = tx.send(r);
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(s)) if s.len() as u64 > MAX_STATUS_BYTES => Err(format!(
            "{} is larger than {MAX_STATUS_BYTES} bytes",
            path.display()
        )),
        Ok(Ok(s)) => Ok(Some(s)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Ok(Err(e)) => Err(format!("cannot read {}: {e}", path.display())),
        Err(_) => Err(format!(
            "{} did not answer within {} s",
            path.display(),
            timeout.as_secs()
        )),
    }
}

/// What `status` learned about one mount's details.
#[derive(Clone, Debug)]
pub enum Details {
    /// Not asked (listing every mount).
    NotAsked,
    /// The mount serves no status file.
    Unavailable,
    /// The file could not be read or parsed.
    Error(String),
    /// The report, and the document as the mount wrote it.
    Report(Box<Report>, Box<RawValue>),
}

fn details_of(mountpoint: &Path) -> Details {
    match read_status(mountpoint, READ_TIMEOUT) {
        Ok(None) => Details::Unavailable,
        Err(e) => Details::Error(e),
        Ok(Some(text)) => match serde_json::from_str::<Box<RawValue>>(&text) {
            Err(e) => Details::Error(format!("{STATUS_FILE}: not JSON: {e}")),
            Ok(v) => match Report::from_json(v.get()) {
                Ok(r) => Details::Report(Box::new(r), v),
                Err(e) => Details::Error(format!("{STATUS_FILE}: {e}")),
            },
        },
    }
}

/// What the mount at `mountpoint` says about itself in its status file, if it serves one.
pub fn report_of(mountpoint: &Path) -> Option<Report> {
    let text = read_status(mountpoint, READ_TIMEOUT).ok()??;
    Report::from_json(&text).ok()
}

fn ago(now: Option<u64>, t: Option<u64>) -> String {
    match (now, t) {
        (Some(n), Some(t)) if n >= t => {
            format!("{} ({} s ago)", reftablefs::repo::utc_timestamp(t), n - t)
        }
        (_, Some(t)) => reftablefs::repo::utc_timestamp(t),
        _ => "-".into(),
    }
}

/// The human-readable text for one mount.
pub fn render_text(m: &Mount, d: &Details) -> String {
    let show = |p: &Option<PathBuf>| {
        p.as_ref()
            .map_or("(unknown)".to_owned(), |p| p.display().to_string())
    };
    let mut s = format!("{}\n", m.mountpoint.display());
    s.push_str(&format!("    repository:      {}\n", show(&m.repository)));
    s.push_str(&format!(
        "    pid:             {}\n",
        m.pid.map_or("(not found)".into(), |p| p.to_string())
    ));
    let mut mode = m.mode.clone();
    if !m.options.is_empty() {
        mode.push_str(&format!(" ({})", m.options.join(" ")));
    }
    s.push_str(&format!("    mode:            {mode}\n"));
    match d {
        Details::NotAsked => {}
        Details::Unavailable => s.push_str("    details not available from this mount\n"),
        Details::Error(e) => s.push_str(&format!("    details: error: {e}\n")),
        Details::Report(r, _) => {
            let now = r.now;
            let batch = match r.open_batch_age_ms {
                Some(ms) => format!(" (open batch {ms} ms old)"),
                None => String::new(),
            };
            s.push_str(&format!(
                "    pending edits:   {}{batch}\n",
                r.pending_edits
            ));
            if let Some(t) = r.mounted_at {
                s.push_str(&format!("    mounted at:      {}\n", ago(now, Some(t))));
            }
            if let Some(n) = r.known_names {
                let cap = r.inode_cap.map_or(String::new(), |c| format!(" (cap {c}"));
                let dropping = match r.known_names_dropping {
                    Some(d) if d > 0 && !cap.is_empty() => format!(", {d} being dropped)"),
                    _ if !cap.is_empty() => ")".into(),
                    _ => String::new(),
                };
                s.push_str(&format!("    known names:     {n}{cap}{dropping}\n"));
            }
            if let Some(f) = r.follow_cpu {
                let how = if f {
                    "on their clients' CPU"
                } else {
                    "where the scheduler puts them (--no-follow-cpu)"
                };
                s.push_str(&format!("    request threads: {how}\n"));
            }
            if r.pid.is_some() {
                let t = match &r.io_uring {
                    Some(u) => format!(
                        "io_uring, {} CPU queues, {} threads, {} requests (and /dev/fuse)",
                        u.queues, u.threads, u.requests
                    ),
                    None => "/dev/fuse".into(),
                };
                s.push_str(&format!("    transport:       {t}\n"));
            }
            if let Some(n) = r.commits {
                s.push_str(&format!("    commits:         {n}\n"));
            }
            match &r.last_commit {
                Some(c) => s.push_str(&format!(
                    "    last commit:     update index {}, table {}, at {}\n",
                    c.update_index,
                    c.table,
                    ago(now, c.time)
                )),
                None => s.push_str("    last commit:     none since mount\n"),
            }
            // Each event as `WHAT [OP] ERRNO: REASON`, after its time.
            let conflicts = r
                .conflicts
                .iter()
                .map(|e| (e.time, &e.name, None, None, &e.reason));
            let refused = (r.refused.iter())
                .map(|e| (e.time, &e.path, e.op.as_ref(), e.errno.as_ref(), &e.reason));
            for (title, total, list) in [
                (
                    "conflicts:",
                    r.conflicts_total,
                    conflicts.collect::<Vec<_>>(),
                ),
                ("refused writes:", r.refused_total, refused.collect()),
            ] {
                let shown = if (list.len() as u64) < total {
                    format!(" (last {} shown)", list.len())
                } else {
                    String::new()
                };
                s.push_str(&format!("    {title:<17}{total}{shown}\n"));
                for (time, what, op, errno, reason) in list {
                    let mut line = format!("        {} {what}", ago(now, time));
                    if let Some(op) = op {
                        line.push_str(&format!(" [{op}]"));
                    }
                    if let Some(errno) = errno {
                        line.push_str(&format!(" {errno}"));
                    }
                    s.push_str(&format!("{line}: {reason}\n"));
                }
            }
            for l in &r.stale_locks {
                let age = l.age_s.map_or(String::new(), |a| format!(" ({a} s old)"));
                s.push_str(&format!(
                    "    warning: stale lock {}{age}: a crashed writer may have left it\n",
                    l.path
                ));
            }
        }
    }
    s
}

/// The `--json` object for one mount (`details` and `details_error` only when asked).
#[derive(Serialize)]
struct MountJson<'a> {
    mountpoint: String,
    repository: Option<String>,
    pid: Option<u32>,
    mode: &'a str,
    options: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Option<&'a RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details_error: Option<&'a str>,
}

impl<'a> MountJson<'a> {
    fn new(m: &'a Mount, d: &'a Details) -> MountJson<'a> {
        let (details, details_error) = match d {
            Details::NotAsked => (None, None),
            Details::Unavailable => (Some(None), Some("details not available from this mount")),
            Details::Error(e) => (Some(None), Some(e.as_str())),
            Details::Report(_, v) => (Some(Some(&**v)), None),
        };
        MountJson {
            mountpoint: m.mountpoint.to_string_lossy().into_owned(),
            repository: (m.repository.as_ref()).map(|p| p.to_string_lossy().into_owned()),
            pid: m.pid,
            mode: &m.mode,
            options: &m.options,
            details,
            details_error,
        }
    }
}

/// The `--json` object for one mount, compact.
pub fn render_json(m: &Mount, d: &Details) -> String {
    to_json(&MountJson::new(m, d))
}

/// Compact JSON text of a value made of strings, numbers and lists, which cannot fail
/// to serialize.
fn to_json(v: &impl Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let as_json = args.flag(Id::Json);
    let target: Option<PathBuf> = match args.operands() {
        [] => None,
        [t] => Some(PathBuf::from(t)),
        _ => return Ok(common::usage_error("too many arguments", "status")),
    };
    let mut mounts = list_mounts()?;
    let mut out = common::Out::new();
    if let Some(t) = target {
        let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
        let want = absolute(&cwd, &t);
        // Only a name that is not a mount point as written is resolved, and only its
        // parent: never the mount itself, whose daemon may not answer. (The parent can
        // still be on another file system that does not answer.)
        let m = mounts.iter().find(|m| m.mountpoint == want).or_else(|| {
            let canon = match (want.parent(), want.file_name()) {
                (Some(p), Some(f)) => p.canonicalize().map(|p| p.join(f)).ok()?,
                _ => return None,
            };
            mounts.iter().find(|m| m.mountpoint == canon)
        });
        let Some(m) = m else {
            eprintln!("error: {} is not a reftablefs mount", t.display());
            return Ok(ExitCode::from(1));
        };
        let d = details_of(&m.mountpoint);
        if as_json {
            out.write(render_json(m, &d).as_bytes())?;
            out.write(b"\n")?;
        } else {
            out.write(render_text(m, &d).as_bytes())?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    mounts.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    if as_json {
        #[derive(Serialize)]
        struct List<'a> {
            mounts: Vec<MountJson<'a>>,
        }
        let mounts = (mounts.iter())
            .map(|m| MountJson::new(m, &Details::NotAsked))
            .collect();
        out.write(to_json(&List { mounts }).as_bytes())?;
        out.write(b"\n")?;
    } else if mounts.is_empty() {
        out.write(b"no reftablefs mounts\n")?;
    } else {
        for m in &mounts {
            out.write(render_text(m, &Details::NotAsked).as_bytes())?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "fuse")]
    #[test]
    fn the_status_file_is_where_the_mount_serves_it() {
        use reftablefs::fs::status::{DIR_NAME, FILE_NAME};
        assert_eq!(STATUS_FILE.as_bytes(), [DIR_NAME, b"/", FILE_NAME].concat());
    }

    const MOUNTINFO: &[u8] = b"22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n\
        97 30 0:52 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:50 - fuse.reftable reftablefs rw,user_id=0,group_id=0\n\
        98 30 0:53 / /mnt/ro ro,nosuid,nodev,relatime - fuse.reftable reftablefs ro,user_id=1000,group_id=1000\n\
        99 30 0:54 / /mnt/other rw,relatime - fuse.sshfs host:/x rw,user_id=0,group_id=0\n\
        garbage line\n";

    #[test]
    fn mountinfo_lists_only_reftablefs_mounts() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mountpoint, Path::new("/tmp/a b"));
        assert_eq!((m[0].mode.as_str(), m[0].user_id), ("rw", Some(0)));
        assert_eq!(m[1].mountpoint, Path::new("/mnt/ro"));
        assert_eq!((m[1].mode.as_str(), m[1].user_id), ("ro", Some(1000)));
    }

    #[test]
    fn mount_command_lines() {
        let argv: Vec<&[u8]> = vec![
            b"-C",
            b"work",
            b"mount",
            b"--batch-window",
            b"50",
            b"--read-only",
            b"repo/.git",
            b"mnt",
        ];
        let (dirs, g, m, o) = parse_mount_argv(&argv).unwrap();
        assert_eq!(dirs, [PathBuf::from("work")]);
        assert_eq!((g, m), (PathBuf::from("repo/.git"), PathBuf::from("mnt")));
        assert_eq!(o, ["--batch-window=50", "--read-only"]);
        for daemon in [&b"--daemon"[..], b"--daem", b"-o", b"daemon"] {
            let mut argv: Vec<&[u8]> = vec![b"mount", daemon, b"g", b"m"];
            if daemon == b"-o" {
                argv.remove(3);
                argv.insert(2, b"daemon");
            }
            assert!(
                parse_mount_argv(&argv).is_none(),
                "the daemon's parent only waits: {argv:?}"
            );
        }
        // As mount reads it: -o lists, prefixes, --over with the mount point fstab gives.
        let argv: Vec<&[u8]> = vec![
            b"mount",
            b"-o",
            b"rw,ro,batch_window=5,x-systemd.automount",
            b"--over",
            b"--no-fs",
            b"wt",
            b"wt/.git",
        ];
        let (_, g, m, o) = parse_mount_argv(&argv).unwrap();
        assert_eq!((g, m), (PathBuf::from("wt/.git"), PathBuf::from("wt/.git")));
        assert_eq!(
            o,
            ["--read-only", "--batch-window=5", "--over", "--no-fsync"]
        );
        let argv: Vec<&[u8]> = vec![b"mount", b"--over", b"wt"];
        let (_, g, m, o) = parse_mount_argv(&argv).unwrap();
        assert_eq!((g, m), (PathBuf::from("wt/.git"), PathBuf::from("wt/.git")));
        assert_eq!(o, ["--over"]);
        let argv: Vec<&[u8]> = vec![b"show-ref"];
        assert!(parse_mount_argv(&argv).is_none());
        assert_eq!(
            absolute(Path::new("/a/b"), Path::new("../c/./d")),
            Path::new("/a/c/d")
        );
    }

    const SAMPLE: &str = r#"{
      "version": 1,
      "repository": "/srv/repo.git",
      "pid": 4242,
      "mode": "rw",
      "mounted_at": 1764500000,
      "now": 1764500100,
      "pending_edits": 3,
      "open_batch_age_ms": 12,
      "known_names": 1234,
      "known_names_dropping": 56,
      "inode_cap": 196608,
      "commits": 17,
      "last_commit": {"update_index": 42, "table": "0x00000000002a-0x00000000002a-0a1b2c3d.ref", "time": 1764500090},
      "conflicts_total": 1,
      "conflicts": [{"time": 1764500050, "ref": "refs/heads/topic", "reason": "changed on the stack since it was read"}],
      "refused_total": 5,
      "refused": [{"time": 1764500060, "path": "refs/heads/a..b.lock", "op": "create", "errno": "EINVAL", "reason": "invalid ref name"}],
      "stale_locks": [{"path": "reftable/tables.list.lock", "age_s": 3600}],
      "future_member": {"ignored": true}
    }"#;

    #[test]
    fn status_document_is_read_and_shown() {
        use reftablefs::status_file::LastCommit;
        let v = RawValue::from_string(SAMPLE.to_owned()).unwrap();
        let r = Report::from_json(SAMPLE).unwrap();
        assert_eq!(r.pending_edits, 3);
        assert_eq!(r.open_batch_age_ms, Some(12));
        assert_eq!(
            r.last_commit,
            Some(LastCommit {
                update_index: 42,
                table: "0x00000000002a-0x00000000002a-0a1b2c3d.ref".into(),
                time: Some(1764500090)
            })
        );
        assert_eq!(r.conflicts[0].name, "refs/heads/topic");
        assert_eq!((r.refused_total, r.refused.len()), (5, 1));
        assert_eq!(r.refused[0].errno.as_deref(), Some("EINVAL"));
        assert_eq!(r.stale_locks[0].age_s, Some(3600));

        let m = Mount {
            mountpoint: "/mnt/r".into(),
            mode: "rw".into(),
            user_id: Some(0),
            pid: Some(4242),
            repository: Some("/srv/repo.git".into()),
            options: vec!["--batch-window=50".into()],
        };
        let text = render_text(&m, &Details::Report(Box::new(r), v.clone()));
        for want in [
            "pending edits:   3 (open batch 12 ms old)",
            "last commit:     update index 42, table 0x00000000002a-0x00000000002a-0a1b2c3d.ref, at 2025-11-30 10:54:50 UTC (10 s ago)",
            "mounted at:      2025-11-30 10:53:20 UTC (100 s ago)",
            "known names:     1234 (cap 196608, 56 being dropped)",
            "conflicts:       1\n",
            "refs/heads/topic: changed on the stack",
            "refused writes:  5 (last 1 shown)",
            "refs/heads/a..b.lock [create] EINVAL: invalid ref name",
            "warning: stale lock reftable/tables.list.lock (3600 s old)",
            "mode:            rw (--batch-window=50)",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        let j = render_json(
            &m,
            &Details::Report(Box::new(Report::from_json(SAMPLE).unwrap()), v.clone()),
        );
        let back: serde_json::Value = serde_json::from_str(&j).unwrap();
        let sample: serde_json::Value = serde_json::from_str(SAMPLE).unwrap();
        assert_eq!(back.get("details"), Some(&sample));
        assert_eq!(
            back.get("pid").and_then(serde_json::Value::as_u64),
            Some(4242)
        );
    }

    #[test]
    fn missing_or_bad_documents() {
        let m = Mount {
            mountpoint: "/mnt/r".into(),
            mode: "ro".into(),
            user_id: None,
            pid: None,
            repository: None,
            options: vec![],
        };
        let text = render_text(&m, &Details::Unavailable);
        assert!(
            text.contains("details not available from this mount"),
            "{text}"
        );
        assert!(text.contains("pid:             (not found)"), "{text}");
        let j = render_json(&m, &Details::Unavailable);
        assert!(
            j.contains(r#""details":null,"details_error":"details not available from this mount""#),
            "{j}"
        );
        for (doc, err) in [
            (
                r#"{"version": 2, "pending_edits": 0}"#,
                "unsupported status version 2",
            ),
            (r#"{"pending_edits": 0}"#, "missing field `version`"),
            (r#"{"version": 1}"#, "missing field `pending_edits`"),
        ] {
            let e = Report::from_json(doc).unwrap_err();
            assert!(e.starts_with(err), "{e:?} for {doc}");
        }
        let r = Report::from_json(r#"{"version": 1, "pending_edits": 0}"#).unwrap();
        assert!(r.last_commit.is_none() && r.conflicts.is_empty());
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read_status(tmp.path(), READ_TIMEOUT), Ok(None));
        std::fs::create_dir(tmp.path().join(".reftablefs")).unwrap();
        std::fs::write(tmp.path().join(STATUS_FILE), SAMPLE).unwrap();
        assert!(matches!(details_of(tmp.path()), Details::Report(..)));
        std::fs::write(tmp.path().join(STATUS_FILE), "{oops").unwrap();
        assert!(matches!(details_of(tmp.path()), Details::Error(e) if e.contains("not JSON")));
    }
}
