//! `reftablefs unlock [--force] [--min-age SECONDS] [--dry-run] [GITDIR]`: removes the
//! leftovers of a killed writer (git, a mount, a `reftablefs` command) that block or
//! litter the reftable stack, and says what it did.
//!
//! * `tables.list.lock` is diagnosed (age, processes holding it open, from `/proc`
//!   alone: a stuck NFS, sshfs or FUSE mount elsewhere cannot hang it) and removed only
//!   when proven stale: no process holds it open and it is at least `--min-age` seconds
//!   old (default 10). git and reftablefs keep the lock open while they hold it, so a
//!   lock nobody holds open is left over. `--force` removes it whatever the diagnosis.
//! * Then, holding the list lock, [`Stack::clean_orphans`](reftablefs::stack::Stack::clean_orphans):
//!   locks of tables the list no longer names, stale locks of listed tables (the same
//!   age rule; `--force` means age 0, never a lock held open), and temporary tables once
//!   no table is locked.
//!
//! Exit 0 when nothing blocks the stack any more, 1 when a lock was kept (held, or too
//! young), 128 on errors.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use reftablefs::lockfile;
use reftablefs::repo::Repo;
use reftablefs::Result;

use super::common;
use super::table::Id;
use super::Args;

/// Default for `--min-age`.
const DEFAULT_MIN_AGE: Duration = Duration::from_secs(10);

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    let force = args.flag(Id::Force);
    let dry_run = args.flag(Id::DryRun);
    let mut min_age = DEFAULT_MIN_AGE;
    // Each value is checked as it is read; the last one counts.
    for v in args.values(Id::MinAge) {
        match v.to_str().and_then(|s| s.parse::<u64>().ok()) {
            Some(s) => min_age = Duration::from_secs(s),
            None => return Ok(common::usage_error("--min-age takes seconds", "unlock")),
        }
    }
    let git_dir: Option<PathBuf> = match args.operands() {
        [] => None,
        [d] => Some(PathBuf::from(d)),
        _ => return Ok(common::usage_error("too many arguments", "unlock")),
    };
    let repo = match git_dir {
        Some(d) if d.join(".git").is_dir() => Repo::open(&d.join(".git"))?,
        Some(d) => Repo::open(&d)?,
        None => common::open_repo()?,
    };
    let dir = repo.reftable_dir();
    let list_lock = dir.join("tables.list.lock");
    let mut blocked = false;
    match lockfile::diagnose(&list_lock)? {
        None => println!("tables.list.lock: not present"),
        Some(d) if !d.holders.is_empty() => {
            println!("kept {d}: a live process holds it; not removed");
            blocked = true;
        }
        Some(d) if force || d.is_stale(min_age) => {
            if dry_run {
                println!("would remove {d}");
            } else if lockfile::remove_diagnosed(&d)? {
                println!("removed {d}");
            } else {
                println!(
                    "{}: replaced or removed meanwhile; left alone",
                    d.path.display()
                );
                blocked = true;
            }
        }
        Some(d) => {
            println!(
                "kept {d}: younger than {} s (--min-age) or not every process could be \
                 inspected; use --force to remove it anyway",
                min_age.as_secs()
            );
            blocked = true;
        }
    }
    if dry_run || blocked {
        return Ok(if blocked {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let mut stack = repo.open_stack()?;
    let age = if force { Duration::ZERO } else { min_age };
    let report = stack.clean_orphans(Some(age))?;
    for (p, why) in &report.removed {
        println!("removed {}: {why}", p.display());
    }
    for (p, why) in &report.kept {
        println!("kept {}: {why}", p.display());
    }
    if report.removed.is_empty() && report.kept.is_empty() {
        println!("no orphaned table locks or temporary tables");
    }
    Ok(if report.kept.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
