//! `reftablefs status` against live mounts: each is listed with its repository, pid,
//! mode and options, and one mount's details are its status file's when it serves one,
//! else "details not available from this mount".

use crate::harness::{Ctx, Mount, Repo, TestResult, BIN};
use reftablefs::cli::json::{self, Value};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn status(args: &[&str]) -> TestResult<Output> {
    Ok(Command::new("timeout")
        .arg("20")
        .arg(BIN)
        .arg("status")
        .args(args)
        .stdin(Stdio::null())
        .output()?)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `--json` entry of `mnt` in the list of every mount.
fn listed(mnt: &Path) -> TestResult<Value> {
    let out = status(&["--json"])?;
    ensure!(out.status.success(), "status --json: {}", text(&out.stderr));
    let doc = json::parse(&text(&out.stdout)).map_err(|e| format!("status --json: {e}"))?;
    let want = mnt.to_string_lossy();
    doc.get("mounts")
        .map(Value::items)
        .unwrap_or_default()
        .iter()
        .find(|m| m.get("mountpoint").and_then(Value::as_str) == Some(&want))
        .cloned()
        .ok_or_else(|| format!("{want} not listed by status --json: {}", text(&out.stdout)).into())
}

/// Two live mounts (one read-only) are listed with repository, pid, mode and options;
/// `status MNT` shows one with its details or says they are not available; a directory
/// that is not a mount is an error (exit 1).
pub fn lists_live_mounts(ctx: &Ctx) -> TestResult {
    let repo = Repo::init(&ctx.path("repo"), "reftable")?;
    repo.commit("one")?;
    let rw = Mount::start(&repo.gitdir, &ctx.path("rw"), &["--batch-window", "50"])?;
    let ro = Mount::start(&repo.gitdir, &ctx.path("ro"), &["--read-only"])?;
    let rw_mnt = rw.mnt.canonicalize()?;
    let ro_mnt = ro.mnt.canonicalize()?;

    let e = listed(&rw_mnt)?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    ensure!(
        s(&e, "mode").as_deref() == Some("rw"),
        "rw mount: {}",
        e.to_json()
    );
    ensure!(
        e.get("pid").and_then(Value::as_u64) == rw.pid().map(u64::from),
        "rw mount pid: {} vs {:?}",
        e.to_json(),
        rw.pid()
    );
    ensure!(
        s(&e, "repository").as_deref() == Some(&*repo.gitdir.to_string_lossy()),
        "rw mount repository: {}",
        e.to_json()
    );
    ensure!(
        e.get("options").map(Value::items).unwrap_or_default()
            == [Value::Str("--batch-window=50".into())],
        "rw mount options: {}",
        e.to_json()
    );
    let e = listed(&ro_mnt)?;
    ensure!(
        s(&e, "mode").as_deref() == Some("ro"),
        "ro mount: {}",
        e.to_json()
    );
    ensure!(
        e.get("pid").and_then(Value::as_u64) == ro.pid().map(u64::from),
        "ro mount pid: {}",
        e.to_json()
    );

    let out = status(&[])?;
    let listing = text(&out.stdout);
    for m in [&rw_mnt, &ro_mnt] {
        ensure!(
            listing.contains(&format!(
                "{}\n    repository:      {}\n",
                m.display(),
                repo.gitdir.display()
            )),
            "text listing lacks {}:\n{listing}",
            m.display()
        );
    }

    // One mount: details from its status file when it serves one.
    let serves = rw_mnt.join(reftablefs::cli::status::STATUS_FILE).exists();
    let out = status(&[&rw_mnt.to_string_lossy()])?;
    ensure!(out.status.success(), "status MNT: {}", text(&out.stderr));
    let one = text(&out.stdout);
    if serves {
        ensure!(one.contains("pending edits:"), "status MNT:\n{one}");
    } else {
        ensure!(
            one.contains("details not available from this mount"),
            "status MNT:\n{one}"
        );
    }
    let out = status(&["--json", &rw_mnt.to_string_lossy()])?;
    let doc = json::parse(&text(&out.stdout)).map_err(|e| format!("status --json MNT: {e}"))?;
    if serves {
        ensure!(
            doc.get("details")
                .and_then(|d| d.get("version"))
                .and_then(Value::as_u64)
                == Some(1),
            "status --json MNT: {}",
            doc.to_json()
        );
    } else {
        ensure!(
            doc.get("details") == Some(&Value::Null)
                && s(&doc, "details_error").as_deref()
                    == Some("details not available from this mount"),
            "status --json MNT: {}",
            doc.to_json()
        );
    }

    let out = status(&[&ctx.path("repo").to_string_lossy()])?;
    ensure!(
        out.status.code() == Some(1),
        "status on a plain directory: {:?}",
        out.status
    );
    ensure!(
        text(&out.stderr).contains("is not a reftablefs mount"),
        "{}",
        text(&out.stderr)
    );

    rw.unmount()?;
    ro.unmount()?;
    let out = status(&["--json"])?;
    let after = text(&out.stdout);
    ensure!(
        !after.contains(&*rw_mnt.to_string_lossy()),
        "unmounted, still listed: {after}"
    );
    Ok(())
}
