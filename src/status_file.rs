//! The document of a mount's status file, `MOUNTPOINT/.reftablefs/status` (version 1; its
//! members are described in docs/cli.md): one type, [`Report`], which the mount serializes
//! (`fs/status.rs`) and `reftablefs status`, `unmount` and `exec` read back.
//!
//! Members are written in the order of the fields. A reader ignores members it does not
//! know and takes a missing optional one as absent; `version` and `pending_edits` are
//! required, and a `version` other than [`VERSION`] is refused.

use serde::{Deserialize, Serialize};

/// The version of the document this module reads and writes.
pub const VERSION: u64 = 1;

/// What a mount reports about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`VERSION`].
    pub version: u64,
    /// The repository (git directory) served.
    pub repository: Option<String>,
    /// The serving process.
    pub pid: Option<u64>,
    /// `rw` or `ro`.
    pub mode: Option<String>,
    /// When the mount started (Unix seconds).
    pub mounted_at: Option<u64>,
    /// When the document was made (Unix seconds): ages are shown against it.
    pub now: Option<u64>,
    /// Ref edits accepted and not yet in a committed table.
    pub pending_edits: u64,
    /// Names the kernel holds (the mount's inode table), of them being dropped, its cap.
    pub known_names: Option<u64>,
    pub known_names_dropping: Option<u64>,
    pub inode_cap: Option<u64>,
    /// Whether the request threads follow their clients' CPU (`mount --no-follow-cpu`).
    pub follow_cpu: Option<bool>,
    /// FUSE over io_uring while it serves: CPU queues and threads (`None`: `/dev/fuse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_uring: Option<IoUring>,
    /// Age of the oldest pending edit; `None` when no batch is open.
    pub open_batch_age_ms: Option<u64>,
    /// Tables committed since mount.
    pub commits: Option<u64>,
    /// The last table the mount committed.
    pub last_commit: Option<LastCommit>,
    /// How many conflicts there were in all (at least as many as listed).
    #[serde(default)]
    pub conflicts_total: u64,
    /// The last conflicts.
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
    /// How many operations were refused in all (at least as many as listed).
    #[serde(default)]
    pub refused_total: u64,
    /// The last refused operations.
    #[serde(default)]
    pub refused: Vec<Refusal>,
    /// Lock files that look abandoned.
    #[serde(default)]
    pub stale_locks: Vec<StaleLock>,
}

/// FUSE over io_uring as it serves (`status`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IoUring {
    /// One per possible CPU.
    pub queues: u64,
    /// The threads serving them now.
    pub threads: u64,
    /// Requests served over io_uring since the mount started.
    #[serde(default)]
    pub requests: u64,
}

/// The last table the mount committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastCommit {
    pub update_index: u64,
    /// Its file name in `reftable/`.
    pub table: String,
    pub time: Option<u64>,
}

/// A batch edit dropped or refused at commit because the stack changed under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub time: Option<u64>,
    /// The ref.
    #[serde(rename = "ref")]
    pub name: String,
    pub reason: String,
}

/// A client operation answered with an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub time: Option<u64>,
    /// The path, relative to the mount.
    pub path: String,
    /// The operation refused (`create`, `write`, `rename`, `unlink`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// The errno name returned to the client (`EEXIST`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    pub reason: String,
}

/// A lock file that looks abandoned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleLock {
    /// Relative to the git directory.
    pub path: String,
    pub age_s: Option<u64>,
}

impl Report {
    /// Reads a status document.
    pub fn from_json(text: &str) -> Result<Report, String> {
        let mut r: Report = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if r.version != VERSION {
            return Err(format!("unsupported status version {}", r.version));
        }
        // A total left out counts the entries listed.
        r.conflicts_total = r.conflicts_total.max(r.conflicts.len() as u64);
        r.refused_total = r.refused_total.max(r.refused.len() as u64);
        Ok(r)
    }

    /// The document as the mount serves it: compact, newline-terminated.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing plain integers, strings and lists cannot fail.
        let mut out = serde_json::to_vec(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document in the order and shape the mount has always written it.
    const WRITTEN: &str = concat!(
        r#"{"version":1,"repository":"/srv/repo.git","pid":4242,"mode":"rw","#,
        r#""mounted_at":1764500000,"now":1764500100,"pending_edits":3,"known_names":1234,"#,
        r#""known_names_dropping":56,"inode_cap":196608,"follow_cpu":true,"#,
        r#""open_batch_age_ms":null,"commits":17,"last_commit":{"update_index":42,"#,
        r#""table":"0x00000000002a-0x00000000002a-0a1b2c3d.ref","time":1764500090},"#,
        r#""conflicts_total":1,"conflicts":[{"time":1764500050,"ref":"refs/heads/topic","#,
        r#""reason":"changed on the stack since it was read"}],"refused_total":5,"#,
        r#""refused":[{"time":1764500060,"path":"refs/heads/a..b.lock","op":"create","#,
        r#""errno":"EINVAL","reason":"invalid ref name \"x\"\n"}],"#,
        r#""stale_locks":[{"path":"reftable/tables.list.lock","age_s":3600}]}"#,
        "\n"
    );

    #[test]
    fn written_as_ever_and_read_back() {
        let r = Report::from_json(WRITTEN).unwrap();
        assert_eq!(r.refused[0].reason, "invalid ref name \"x\"\n");
        assert_eq!(r.conflicts[0].name, "refs/heads/topic");
        assert_eq!(r.open_batch_age_ms, None);
        assert_eq!(String::from_utf8(r.to_json()).unwrap(), WRITTEN);
    }

    #[test]
    fn lenient_where_members_may_be_missing() {
        let r = Report::from_json(
            r#"{"version":1,"pending_edits":0,"future":[1],"conflicts":[{"ref":"a","reason":"r"}]}"#,
        )
        .unwrap();
        assert_eq!((r.conflicts_total, r.refused_total), (1, 0));
        assert_eq!((r.pid, r.last_commit), (None, None));
        assert_eq!(
            Report::from_json(r#"{"version":2,"pending_edits":0}"#).unwrap_err(),
            "unsupported status version 2"
        );
    }
}
