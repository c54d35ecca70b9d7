//! The private mount namespace of `reftablefs exec` (`exec/`): made by the calling
//! process itself, so that everything it starts afterwards (the view's process and
//! COMMAND) is inside it and nothing outside sees what is mounted there.
//!
//! * As root (effective uid 0): a new mount namespace (`unshare(CLONE_NEWNS)`).
//! * As an ordinary user: a user namespace and a mount namespace owned by it
//!   (`unshare(CLONE_NEWUSER | CLONE_NEWNS)`), the caller's own uid and gid mapped to
//!   themselves (`setgroups` denied first, as the kernel requires of an unprivileged
//!   gid map), so files, `stat` and git's ownership checks look the same inside. The
//!   process keeps every capability inside the new namespace until it `exec`s a program
//!   (its uid there is not 0, so `execve` drops them): COMMAND runs with none.
//! * Either way every mount is then made a slave (`MS_REC | MS_SLAVE` on `/`): mounts
//!   made outside still appear inside, nothing mounted inside propagates out.
//!
//! An ordinary user's FUSE mount inside opens `/dev/fuse` directly (mount(2), not
//! fusermount3, whose set-uid bit means nothing in a user namespace where root is not
//! mapped): it needs read and write access to `/dev/fuse`, a kernel that allows FUSE
//! in user namespaces (Linux 4.18+) and one that lets ordinary users make user
//! namespaces at all. Each refusal is explained by [`diagnose`] from the settings that
//! cause it (`kernel.unprivileged_userns_clone`, `user.max_user_namespaces`,
//! `user.max_mnt_namespaces`, `kernel.apparmor_restrict_unprivileged_userns`), with
//! what to use instead.

use std::io;
use std::path::Path;

/// Who made the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Root: a plain mount namespace.
    Root,
    /// An ordinary user: a user namespace mapping only these ids to themselves.
    User { uid: u32, gid: u32 },
}

/// The step of [`enter`] that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNS)`.
    Unshare,
    /// Writing `/proc/self/{setgroups,uid_map,gid_map}`.
    Map,
    /// Making the mounts slaves (`MS_REC | MS_SLAVE` on `/`).
    Propagation,
    /// The FUSE mount itself, inside the namespace.
    FuseMount,
}

impl Step {
    fn what(self) -> &'static str {
        match self {
            Step::Unshare => "creating a user namespace",
            Step::Map => "mapping your uid and gid in the user namespace",
            Step::Propagation => "making the mounts private in the user namespace",
            Step::FuseMount => "the FUSE mount in the user namespace",
        }
    }
}

/// A sysctl's value as `/proc/sys` shows it (`user.max_user_namespaces` →
/// `/proc/sys/user/max_user_namespaces`), trimmed; `None` when the kernel has no such
/// setting.
pub fn sysctl(name: &str) -> Option<String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The setting that explains a refusal, if one does.
fn forbidding_setting(
    errno: Option<i32>,
    sysctl: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    let is = |name: &str, v: &str| sysctl(name).as_deref() == Some(v);
    if is("kernel.unprivileged_userns_clone", "0") {
        return Some(
            "the kernel lets only privileged users create user namespaces \
             (sysctl kernel.unprivileged_userns_clone = 0; to allow it: \
             sysctl -w kernel.unprivileged_userns_clone=1)"
                .into(),
        );
    }
    for (name, what) in [
        ("user.max_user_namespaces", "user"),
        ("user.max_mnt_namespaces", "mount"),
    ] {
        if is(name, "0") {
            return Some(format!(
                "{what} namespaces are disabled (sysctl {name} = 0; to allow them: \
                 sysctl -w {name}=15000)"
            ));
        }
    }
    if errno == Some(libc::ENOSPC) {
        let v = |n: &str| sysctl(n).unwrap_or_else(|| "?".into());
        return Some(format!(
            "the limit on namespaces is reached (sysctl user.max_user_namespaces = {}, \
             user.max_mnt_namespaces = {}; they count every namespace of this user and of \
             the namespaces it runs in)",
            v("user.max_user_namespaces"),
            v("user.max_mnt_namespaces")
        ));
    }
    if is("kernel.apparmor_restrict_unprivileged_userns", "1") {
        return Some(
            "AppArmor restricts unprivileged user namespaces (sysctl \
             kernel.apparmor_restrict_unprivileged_userns = 1, as on Ubuntu 24.04: a \
             program without an AppArmor profile that allows `userns` gets no \
             capabilities in its user namespace; to allow it: an AppArmor profile for \
             reftablefs with `userns,`, or sysctl -w \
             kernel.apparmor_restrict_unprivileged_userns=0)"
                .into(),
        );
    }
    None
}

/// Why `step` failed with `err` for an ordinary user, from the settings `sysctl`
/// reads, and what to use instead (`instead`: a `reftablefs mount` command line for
/// this repository).
pub fn diagnose(
    step: Step,
    err: &io::Error,
    sysctl: &dyn Fn(&str) -> Option<String>,
    instead: &str,
) -> String {
    let why = forbidding_setting(err.raw_os_error(), sysctl).unwrap_or_else(|| match step {
        Step::FuseMount => format!(
            "the kernel refused it ({err}); FUSE mounts in user namespaces need Linux 4.18 \
             or later (this is {})",
            kernel_release()
        ),
        _ => format!(
            "the system refused it ({err}); a container's seccomp filter or a security \
             module may forbid user namespaces"
        ),
    });
    format!(
        "cannot run the command in a private mount namespace as an ordinary user: {} \
         failed: {why}. Use instead: {instead}, or run reftablefs exec as root",
        step.what()
    )
}

/// What `/dev/fuse` must allow an ordinary user, checked before anything is made:
/// `Err` says what is missing and what to use instead.
pub fn check_dev_fuse(dev: &Path, instead: &str) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(dev) {
        Ok(m) => m,
        Err(e) => {
            return Err(format!(
                "cannot mount: {} is missing ({e}; is the fuse module loaded?)",
                dev.display()
            ))
        }
    };
    let Ok(c) = std::ffi::CString::new(dev.as_os_str().as_bytes()) else {
        return Err(format!(
            "cannot mount: {} is not a usable path",
            dev.display()
        ));
    };
    // SAFETY: a NUL-terminated path; access() only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } == 0 {
        return Ok(());
    }
    Err(format!(
        "reftablefs exec as an ordinary user needs read and write access to {} (here: mode \
         {:04o}, owner uid {}, group gid {}): inside a user namespace the FUSE device is \
         opened directly, without fusermount3. To allow it: chmod 0666 {} (what most \
         distributions' udev rules do). Use instead: {instead}, or run reftablefs exec \
         as root",
        dev.display(),
        meta.mode() & 0o7777,
        meta.uid(),
        meta.gid(),
        dev.display()
    ))
}

/// `uname -r`.
fn kernel_release() -> String {
    sysctl("kernel.osrelease").unwrap_or_else(|| "an unknown kernel".into())
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// Moves this process into a new private mount namespace (see the module's
/// documentation). Must be called while the process has one thread: the kernel refuses
/// a user namespace to a multi-threaded process. `Err(step, error)` when a step fails.
pub fn enter() -> Result<Kind, (Step, io::Error)> {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let kind = if uid == 0 {
        // SAFETY: unshare with a flag set; it only changes this process's namespaces.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return Err((Step::Unshare, last_error()));
        }
        Kind::Root
    } else {
        // SAFETY: as above; with CLONE_NEWUSER the kernel checks that we have one thread.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
            return Err((Step::Unshare, last_error()));
        }
        // Kernels before 3.19 have no setgroups file (and need no "deny").
        match std::fs::write("/proc/self/setgroups", "deny") {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err((Step::Map, e)),
        }
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))
            .map_err(|e| (Step::Map, e))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
            .map_err(|e| (Step::Map, e))?;
        Kind::User { uid, gid }
    };
    // SAFETY: a NUL-terminated literal path and null pointers where mount(2) takes them
    // for a propagation change.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err((Step::Propagation, last_error()));
    }
    Ok(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name: &str| {
            owned
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    const INSTEAD: &str = "reftablefs mount --daemon --over /src/p";

    #[test]
    fn each_setting_is_named_with_its_fix() {
        let eperm = io::Error::from_raw_os_error(libc::EPERM);
        let enospc = io::Error::from_raw_os_error(libc::ENOSPC);
        // (settings, the error, the step, what the message must say)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a io::Error, Step, &'a str);
        let cases: &[Case] = &[
            (
                &[("kernel.unprivileged_userns_clone", "0")],
                &eperm,
                Step::Unshare,
                "kernel.unprivileged_userns_clone = 0",
            ),
            (
                &[("user.max_user_namespaces", "0")],
                &enospc,
                Step::Unshare,
                "user.max_user_namespaces = 0",
            ),
            (
                &[("user.max_mnt_namespaces", "0")],
                &enospc,
                Step::Unshare,
                "user.max_mnt_namespaces = 0",
            ),
            (
                &[("user.max_user_namespaces", "3")],
                &enospc,
                Step::Unshare,
                "limit on namespaces is reached (sysctl user.max_user_namespaces = 3",
            ),
            (
                &[("kernel.apparmor_restrict_unprivileged_userns", "1")],
                &eperm,
                Step::Map,
                "kernel.apparmor_restrict_unprivileged_userns = 1",
            ),
            (&[], &eperm, Step::Unshare, "seccomp"),
            (&[], &eperm, Step::FuseMount, "Linux 4.18"),
        ];
        for (pairs, err, step, want) in cases {
            let s = settings(pairs);
            let msg = diagnose(*step, err, &s, INSTEAD);
            assert!(msg.contains(want), "{pairs:?}: {msg}");
            assert!(msg.contains(INSTEAD), "{msg}");
            assert!(msg.contains(step.what()), "{msg}");
        }
        // The Debian switch wins over the others: it is the one to change.
        let s = settings(&[
            ("kernel.unprivileged_userns_clone", "0"),
            ("user.max_user_namespaces", "0"),
        ]);
        assert!(diagnose(Step::Unshare, &eperm, &s, INSTEAD).contains("unprivileged_userns_clone"));
    }

    #[test]
    fn dev_fuse_missing_or_closed_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("fuse");
        let e = check_dev_fuse(&missing, INSTEAD).unwrap_err();
        assert!(e.contains("is missing"), "{e}");
        // A file this process may read and write passes.
        std::fs::write(&missing, b"").unwrap();
        assert_eq!(check_dev_fuse(&missing, INSTEAD), Ok(()));
    }
}
