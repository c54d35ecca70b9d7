//! Unit tests of the passthrough.

use super::*;
use crate::fs::backend::{NewNode, Rename, SetAttr};
use crate::fs::test_support::assert_splits;

/// `parent/name`, made with `mode` less `umask`.
fn node(parent: u64, name: &[u8], mode: u32, umask: u32) -> NewNode<'_> {
    NewNode {
        parent,
        name,
        mode,
        umask,
    }
}

/// Renames `parent/name` to `newparent/newname` (no flags).
fn rename(
    p: &Passthrough,
    parent: u64,
    name: &[u8],
    newparent: u64,
    newname: &[u8],
) -> Result<(), FsError> {
    p.rename(&Rename {
        parent,
        name,
        newparent,
        newname,
        flags: 0,
    })
}

/// A setattr of the mode.
fn chmod(mode: u32) -> SetAttr {
    SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    }
}

/// A setattr of the size, by name or through the open file `fh`.
fn truncate(size: u64, fh: Option<u64>) -> SetAttr {
    SetAttr {
        size: Some(size),
        fh,
        ..SetAttr::default()
    }
}

/// Creates `n` exclusively, opened for `access` (forwarded: no kernel passthrough
/// here): its attributes and handle.
fn create(p: &Passthrough, n: NewNode<'_>, access: i32) -> (FileAttr, u64) {
    let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
    let (a, o) = p.create(n, access | libc::O_EXCL, none).unwrap();
    (a, plain(o))
}

/// Creates `n` exclusively, opened for `access`, writes `data` into it and closes it:
/// its attributes.
fn put(p: &Passthrough, n: NewNode<'_>, access: i32, data: &[u8]) -> FileAttr {
    let (a, fh) = create(p, n, access);
    p.write(fh, 0, data).unwrap();
    p.release(fh);
    a
}

#[test]
fn ref_names_at_root_follow_git() {
    assert_splits(
        is_ref_name_at_root,
        &[
            "HEAD",
            "HEAD.lock",
            "ORIG_HEAD",
            "ORIG_HEAD.lock",
            "AUTO_MERGE",
            "CHERRY_PICK_HEAD",
            "refs",
            "logs",
            "packed-refs",
            "packed-refs.lock",
            "packed-refs.new",
        ],
        &[
            "FETCH_HEAD",
            "MERGE_HEAD",
            "COMMIT_EDITMSG",
            "MERGE_MSG",
            "config",
            "config.lock",
            "index",
            "index.lock",
            "objects",
            "hooks",
            "description",
            "rebase-merge",
            "gc.pid",
            "reftable",
        ],
    );
    assert!(is_reserved_at_root(b"reftable"));
}

#[test]
fn a_linked_worktrees_directory_hides_its_stack_and_ref_names() {
    let t = tempfile::tempdir().unwrap();
    let wt = t.path().join("worktrees/wt");
    std::fs::create_dir_all(wt.join("reftable")).unwrap();
    std::fs::create_dir_all(wt.join("refs")).unwrap();
    std::fs::create_dir_all(t.path().join("other/wt")).unwrap();
    std::fs::write(wt.join("reftable/tables.list"), b"").unwrap();
    std::fs::write(wt.join("HEAD"), b"ref: refs/heads/.invalid\n").unwrap();
    std::fs::write(wt.join("gitdir"), b"/x/.git\n").unwrap();
    std::fs::write(wt.join("ORIG_HEAD"), b"stale\n").unwrap();
    let p = Passthrough::new(t.path()).unwrap();
    let wts = p.lookup(ROOT, b"worktrees").unwrap().ino.0;
    let w = p.lookup(wts, b"wt").unwrap().ino.0;
    assert_eq!(p.worktree_of(w).as_deref(), Some(&b"wt"[..]));
    assert_eq!(p.worktree_of(wts), None);
    let other = p.lookup(ROOT, b"other").unwrap().ino.0;
    let ow = p.lookup(other, b"wt").unwrap().ino.0;
    assert_eq!(p.worktree_of(ow), None, "only GITDIR/worktrees/<id>");
    let gitdir = p.lookup(w, b"gitdir").unwrap().ino.0;
    assert_eq!(p.worktree_of(gitdir), None, "a file is no worktree");
    // Listing: the stack and the ref names (served by the worktree's view) are hidden.
    let fh = p.opendir(w).unwrap();
    let names: Vec<_> = p
        .dir_entries(fh)
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    assert_eq!(names, ["gitdir"]);
    p.releasedir(fh);
    assert_eq!(p.lookup(w, b"reftable").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(
        p.mkdir(node(w, b"reftable", 0o755, 0)).unwrap_err().errno(),
        libc::EPERM
    );
    // Elsewhere `reftable` is an ordinary name.
    assert!(p.mkdir(node(ow, b"reftable", 0o755, 0)).is_ok());
}

/// GITDIR's directories swapped for symbolic links to a directory outside while the
/// kernel holds their nodes: nothing outside is read, listed, created, removed, moved
/// or changed; a link that is the last component stays a link.
fn swapped_directories_are_never_followed(walk: bool) {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let t = tempfile::tempdir().unwrap();
    let (git, out) = (t.path().join("git"), t.path().join("out"));
    std::fs::create_dir_all(git.join("objects/sub")).unwrap();
    std::fs::create_dir_all(git.join("objects/a/b")).unwrap();
    std::fs::write(git.join("objects/file"), b"mine").unwrap();
    std::fs::write(git.join("objects/mine"), b"mine").unwrap();
    std::fs::create_dir_all(out.join("b")).unwrap();
    for f in ["secret.txt", "victim", "b/secret.txt"] {
        std::fs::write(out.join(f), b"secret").unwrap();
    }
    std::fs::set_permissions(
        out.join("secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let p = Passthrough::new(&git).unwrap();
    let p = if walk { p.walking() } else { p };
    assert_eq!(p.openat2, !walk);
    let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
    let objects = p.lookup(ROOT, b"objects").unwrap().ino.0;
    let sub = p.lookup(objects, b"sub").unwrap().ino.0;
    let a = p.lookup(objects, b"a").unwrap().ino.0;
    let b = p.lookup(a, b"b").unwrap().ino.0;
    let file = p.lookup(objects, b"file").unwrap().ino.0;
    // The swaps, made directly in GITDIR.
    for (name, target) in [("sub", out.clone()), ("a", out.clone())] {
        let at = git.join("objects").join(name);
        std::fs::rename(&at, at.with_extension("old")).unwrap();
        symlink(target, &at).unwrap();
    }
    std::fs::remove_file(git.join("objects/file")).unwrap();
    symlink(out.join("secret.txt"), git.join("objects/file")).unwrap();

    let refused = |what: &str, r: Result<(), FsError>| match r {
        Ok(()) => panic!("{what} went through a swapped directory (walk {walk})"),
        Err(e) => assert!(
            [libc::ELOOP, libc::ENOTDIR, libc::ENOTSUP].contains(&e.errno()),
            "{what}: {e} (walk {walk})"
        ),
    };
    refused("lookup", p.lookup(sub, b"secret.txt").map(drop));
    refused("lookup below", p.lookup(b, b"secret.txt").map(drop));
    refused(
        "create",
        p.create(node(sub, b"p", 0o644, 0), libc::O_WRONLY, none)
            .map(drop),
    );
    refused("mkdir", p.mkdir(node(sub, b"d", 0o755, 0)).map(drop));
    refused("symlink", p.symlink(sub, b"l", b"x").map(drop));
    refused("unlink", p.unlink(sub, b"victim"));
    refused("rmdir", p.rmdir(sub, b"b"));
    refused(
        "rename out of it",
        rename(&p, sub, b"victim", objects, b"stolen"),
    );
    refused("rename into it", rename(&p, objects, b"mine", sub, b"mine"));
    refused(
        "rename over config",
        rename(&p, sub, b"victim", ROOT, b"config"),
    );
    refused("opendir", p.opendir(sub).map(drop));
    refused("fsyncdir", p.fsyncdir(sub));
    refused("open", p.open(file, libc::O_RDONLY, none).map(drop));
    refused("chmod", p.setattr(file, &chmod(0o666)).map(drop));
    refused("truncate", p.setattr(file, &truncate(0, None)).map(drop));
    for f in ["secret.txt", "victim", "b/secret.txt"] {
        assert_eq!(std::fs::read(out.join(f)).unwrap(), b"secret", "{f}");
    }
    let mode = std::fs::metadata(out.join("secret.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the outside file's mode changed");
    let mut names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["b", "secret.txt", "victim"],
        "something made outside"
    );
    assert!(git.join("objects/mine").exists() && !git.join("objects/stolen").exists());
    // A link in GITDIR is a link through the mount: described, read, never followed.
    let l = p.lookup(objects, b"file").unwrap();
    assert_eq!(l.kind, FileType::Symlink);
    assert_eq!(
        p.readlink(l.ino.0).unwrap(),
        out.join("secret.txt").as_os_str().as_encoded_bytes()
    );
    assert_eq!(p.lookup(objects, b"sub").unwrap().kind, FileType::Symlink);
    // A new link through the mount is made as a link, its target untouched.
    let made = p.symlink(objects, b"made", b"../../out/victim").unwrap();
    assert_eq!(made.kind, FileType::Symlink);
    assert_eq!(p.readlink(made.ino.0).unwrap(), b"../../out/victim");
    // And ordinary paths still work.
    let a_old = p.lookup(objects, b"a.old").unwrap().ino.0;
    let b_old = p.lookup(a_old, b"b").unwrap().ino.0;
    let (f, _) = p
        .create(node(b_old, b"x", 0o644, 0), libc::O_WRONLY, none)
        .unwrap();
    rename(&p, b_old, b"x", b_old, b"y").unwrap();
    let fh = p.opendir(b_old).unwrap();
    let listed: Vec<_> = p
        .dir_entries(fh)
        .unwrap()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(listed, [Box::from(&b"y"[..])]);
    p.releasedir(fh);
    p.fsyncdir(b_old).unwrap();
    assert!(p.lookup(b_old, b"y").is_ok());
    p.setattr(f.ino.0, &chmod(0o600)).unwrap();
    assert_eq!(
        std::fs::metadata(git.join("objects/a.old/b/y"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    p.unlink(b_old, b"y").unwrap();
}

#[test]
fn chmod_without_fchmodat2_changes_the_name_itself() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), b"x").unwrap();
    std::fs::write(t.path().join("target"), b"x").unwrap();
    symlink(t.path().join("target"), t.path().join("l")).unwrap();
    let p = Passthrough::new(t.path()).unwrap();
    let mode = |n: &str| {
        std::fs::symlink_metadata(t.path().join(n))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    let before = mode("target");
    p.at(b"f").unwrap().chmod_by_proc(0o640).unwrap();
    assert_eq!(mode("f"), 0o640);
    let e = p.at(b"l").unwrap().chmod_by_proc(0o777).unwrap_err();
    assert_eq!(e.errno(), libc::ENOTSUP);
    assert_eq!(mode("target"), before, "the link was followed");
    assert_eq!(
        p.at(b"l").unwrap().chmod(0o777).unwrap_err().errno(),
        libc::ENOTSUP
    );
    assert_eq!(mode("target"), before, "the link was followed");
}

#[test]
fn swapped_directories_are_never_followed_openat2() {
    swapped_directories_are_never_followed(false);
}

#[test]
fn swapped_directories_are_never_followed_walking() {
    swapped_directories_are_never_followed(true);
}

#[test]
fn passes_through_relative_to_the_directory() {
    let dir = std::env::temp_dir().join(format!("rtfs-pt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::create_dir_all(dir.join("reftable")).unwrap();
    std::fs::write(
        dir.join("config"),
        b"[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = reftable\n",
    )
    .unwrap();
    std::fs::write(dir.join("HEAD"), b"ref: refs/heads/.invalid\n").unwrap();
    let p = Passthrough::new(&dir).unwrap();
    let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
    // The root listing hides the stack and git's stubs.
    let mut names: Vec<_> = p
        .list(b".", true)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["config", "objects"]);
    assert_eq!(
        p.lookup(ROOT, b"reftable").unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(
        p.mkdir(node(ROOT, b"reftable", 0o755, 0))
            .unwrap_err()
            .errno(),
        libc::EPERM
    );
    // config is served without the extension, with its served size.
    let a = p.lookup(ROOT, b"config").unwrap();
    let served = b"[core]\n\trepositoryformatversion = 1\n[extensions]\n";
    assert_eq!(a.size, served.len() as u64);
    let Opened::Plain { fh, .. } = p.open(a.ino.0, libc::O_RDONLY, none).unwrap() else {
        panic!("config is never backed");
    };
    assert_eq!(p.read(fh, 0, 4096).unwrap(), served.to_vec());
    p.release(fh);
    // A config.lock renamed over config keeps the extension in the real file.
    let lock = node(ROOT, b"config.lock", 0o644, 0);
    let user = b"[core]\n\trepositoryformatversion = 0\n[user]\n\tname = x\n";
    put(&p, lock, libc::O_WRONLY, user);
    rename(&p, ROOT, b"config.lock", ROOT, b"config").unwrap();
    let mark = crate::fs::config_view::MARK;
    assert_eq!(
        String::from_utf8(std::fs::read(dir.join("config")).unwrap()).unwrap(),
        format!("[core]\n\trepositoryformatversion = 0\n[user]\n\tname = x\n[core] {mark}\n\trepositoryformatversion = 1\n[extensions] {mark}\n\trefStorage = reftable\n")
    );
    assert!(!dir.join("config.lock").exists());
    // Objects: a temporary file renamed into a new directory.
    let objects = p.lookup(ROOT, b"objects").unwrap().ino.0;
    let ab = p.mkdir(node(objects, b"ab", 0o755, 0o022)).unwrap().ino.0;
    let t = put(
        &p,
        node(objects, b"tmp_obj", 0o444, 0),
        libc::O_RDWR,
        b"blob",
    );
    rename(&p, objects, b"tmp_obj", ab, b"cdef").unwrap();
    assert_eq!(std::fs::read(dir.join("objects/ab/cdef")).unwrap(), b"blob");
    assert_eq!(p.getattr(t.ino.0, None).unwrap().size, 4);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fh of an open that is forwarded (never backed here).
fn plain(o: Opened) -> u64 {
    match o {
        Opened::Plain { fh, .. } => fh,
        Opened::Backed { .. } => panic!("no kernel passthrough here"),
    }
}

/// Writes a reftable repository's config into `dir`; returns its text.
fn reftable_config(dir: &Path) -> &'static [u8] {
    let init = b"[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = reftable\n";
    std::fs::write(dir.join("config"), init).unwrap();
    init
}

/// Whether a config's text holds the reftable extension.
fn has_ext(text: &str) -> bool {
    text.contains("\trefStorage = reftable\n")
}

/// `config` written in place is stored (with the extension) at close, fsync or release;
/// every open shares its content; `rm` keeps the extension in GITDIR and shows no
/// config; a create, truncate, rename away and a replacement while open work as on a
/// file.
#[test]
fn config_is_a_file() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::create_dir_all(dir.join("reftable")).unwrap();
    let init = reftable_config(dir);
    let real = || String::from_utf8(std::fs::read(dir.join("config")).unwrap()).unwrap();
    let p = Passthrough::new(dir).unwrap();
    let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
    let ino = p.lookup(ROOT, b"config").unwrap().ino.0;
    let served = |p: &Passthrough| {
        let fh = plain(p.open(ino, libc::O_RDONLY, none).unwrap());
        let d = p.read(fh, 0, 1 << 20).unwrap();
        p.release(fh);
        String::from_utf8(d).unwrap()
    };

    // O_TRUNC, two writes, stored at close only; a reader meanwhile sees the writes.
    let fh = plain(p.open(ino, libc::O_WRONLY | libc::O_TRUNC, none).unwrap());
    p.write(fh, 0, b"[a]\n").unwrap();
    p.write(fh, 4, b"\tb = c\n").unwrap();
    assert_eq!(real(), String::from_utf8_lossy(init));
    assert_eq!(served(&p), "[a]\n\tb = c\n");
    assert_eq!(p.getattr(ino, Some(fh)).unwrap().size, 11);
    // By name too (stat of a file being written), before anything is stored.
    assert_eq!(p.getattr(ino, None).unwrap().size, 11);
    assert_eq!(p.lookup(ROOT, b"config").unwrap().size, 11);
    assert_eq!(real(), String::from_utf8_lossy(init));
    p.flush(fh).unwrap();
    assert!(
        real().starts_with("[a]\n\tb = c\n") && has_ext(&real()),
        "{}",
        real()
    );
    assert_eq!(p.getattr(ino, None).unwrap().size, 11);
    p.release(fh);
    // The inode number stays (an in-place write).
    assert_eq!(p.lookup(ROOT, b"config").unwrap().ino.0, ino);

    // O_APPEND writes at the end whatever the offset; O_RDWR reads and rewrites.
    let fh = plain(p.open(ino, libc::O_WRONLY | libc::O_APPEND, none).unwrap());
    p.write(fh, 0, b"[d]\n").unwrap();
    p.release(fh);
    assert_eq!(served(&p), "[a]\n\tb = c\n[d]\n");
    let fh = plain(p.open(ino, libc::O_RDWR, none).unwrap());
    assert_eq!(p.read(fh, 0, 3).unwrap(), b"[a]");
    p.write(fh, 1, b"A").unwrap();
    p.fsync(fh, false).unwrap();
    assert!(real().starts_with("[A]\n") && has_ext(&real()));
    // ftruncate through the handle, then close.
    p.setattr(ino, &truncate(3, Some(fh))).unwrap();
    p.flush(fh).unwrap();
    p.release(fh);
    assert_eq!(served(&p), "[A]");
    // truncate(2) by name: at once.
    p.setattr(ino, &truncate(0, None)).unwrap();
    assert_eq!(served(&p), "");
    assert!(has_ext(&real()));

    // rm: gone through the mount, the extension kept in GITDIR.
    p.unlink(ROOT, b"config").unwrap();
    assert_eq!(p.lookup(ROOT, b"config").unwrap_err().errno(), libc::ENOENT);
    assert!(!p
        .list(b".", true)
        .unwrap()
        .iter()
        .any(|e| &*e.name == b"config"));
    assert!(has_ext(&real()));
    assert_eq!(p.unlink(ROOT, b"config").unwrap_err().errno(), libc::ENOENT);
    // Created again: there at once, empty; written, stored at close.
    let (a, fh) = create(&p, node(ROOT, b"config", 0o644, 0o022), libc::O_WRONLY);
    assert_eq!(a.size, 0);
    assert_eq!(p.lookup(ROOT, b"config").unwrap().size, 0);
    p.write(fh, 0, b"[x]\n").unwrap();
    p.flush(fh).unwrap();
    p.release(fh);
    let ino = p.lookup(ROOT, b"config").unwrap().ino.0;
    assert_eq!(served(&p), "[x]\n");
    assert!(has_ext(&real()));

    // Replaced (rename over it) while open: the open content is orphaned, never stored.
    let fh = plain(p.open(ino, libc::O_RDWR, none).unwrap());
    put(
        &p,
        node(ROOT, b"config.lock", 0o644, 0),
        libc::O_WRONLY,
        b"[lock]\n",
    );
    rename(&p, ROOT, b"config.lock", ROOT, b"config").unwrap();
    p.write(fh, 0, b"[orphan]\n").unwrap();
    p.flush(fh).unwrap();
    p.release(fh);
    assert_eq!(served(&p), "[lock]\n");

    // Moved away: a plain file with the served content; config gone, extension kept.
    rename(&p, ROOT, b"config", ROOT, b"config.bak").unwrap();
    assert_eq!(std::fs::read(dir.join("config.bak")).unwrap(), b"[lock]\n");
    assert_eq!(p.lookup(ROOT, b"config").unwrap_err().errno(), libc::ENOENT);
    assert!(has_ext(&real()));
    // And back.
    rename(&p, ROOT, b"config.bak", ROOT, b"config").unwrap();
    assert_eq!(served(&p), "[lock]\n");
    assert!(has_ext(&real()) && !dir.join("config.bak").exists());
    // No temporary file left in GITDIR.
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // A store keeps the owner of the config it replaces (where we may give it: root).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::MetadataExt;
        std::os::unix::fs::lchown(dir.join("config"), Some(4321), Some(4322)).unwrap();
        let fh = plain(p.open(ino, libc::O_WRONLY | libc::O_APPEND, none).unwrap());
        p.write(fh, 0, b"[owned]\n").unwrap();
        p.flush(fh).unwrap();
        p.release(fh);
        let m = std::fs::metadata(dir.join("config")).unwrap();
        assert_eq!((m.uid(), m.gid()), (4321, 4322));
        assert_eq!(served(&p), "[lock]\n[owned]\n");
    }
}

/// A write beyond the bound is refused (EFBIG) and nothing of it is stored.
#[test]
fn config_writes_are_bounded() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("config"), b"[core]\n").unwrap();
    let p = Passthrough::new(t.path()).unwrap();
    let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
    let ino = p.lookup(ROOT, b"config").unwrap().ino.0;
    let fh = plain(p.open(ino, libc::O_WRONLY, none).unwrap());
    let past = config::CONFIG_MAX as u64;
    assert_eq!(p.write(fh, past, b"x").unwrap_err().errno(), libc::EFBIG);
    p.release(fh);
    assert_eq!(std::fs::read(t.path().join("config")).unwrap(), b"[core]\n");
}

/// A store of `config` is fsynced when a client asks for it, as a file's content is
/// durable after its fsync: git's `config.lock` written and renamed over `config`
/// (`core.fsync` at its default) is stored without an fsync, and with an fsync when
/// the lock was fsynced first; a close does not fsync, a client's fsync of an open
/// `config` does (what it holds, or GITDIR's file when nothing is left to store); a
/// file the mount did not see created empty is taken as durable. Every store keeps the
/// extension and leaves no temporary file.
#[test]
fn config_stores_are_fsynced_when_the_client_asks() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    reftable_config(dir);
    let real = || String::from_utf8(std::fs::read(dir.join("config")).unwrap()).unwrap();
    let p = Passthrough::new(dir).unwrap();
    let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };

    // git's rewrite: config.lock created, written, closed, renamed: no fsync; the lock's
    // file is the config now, as a rename on a disk keeps it.
    use std::os::unix::fs::MetadataExt;
    let a = put(
        &p,
        node(ROOT, b"config.lock", 0o644, 0),
        libc::O_RDWR | libc::O_EXCL,
        b"[one]\n",
    );
    let lock_ino = std::fs::metadata(dir.join("config.lock")).unwrap().ino();
    rename(&p, ROOT, b"config.lock", ROOT, b"config").unwrap();
    assert!(
        real().starts_with("[one]\n") && has_ext(&real()),
        "{}",
        real()
    );
    assert_eq!(p.config_syncs(), 0);
    // Its content reached the disk before the rename all the same: a crash never
    // leaves a config without its refStorage extension.
    assert_eq!(p.config_data_syncs(), 1);
    assert_eq!(
        std::fs::metadata(dir.join("config")).unwrap().ino(),
        lock_ino
    );
    assert_eq!(p.lookup(ROOT, b"config").unwrap().ino, a.ino);

    // The same with the lock fsynced first (core.fsync=config): file and GITDIR.
    let (_, fh) = create(
        &p,
        node(ROOT, b"config.lock", 0o644, 0),
        libc::O_RDWR | libc::O_EXCL,
    );
    p.write(fh, 0, b"[two]\n").unwrap();
    p.fsync(fh, false).unwrap();
    p.release(fh);
    rename(&p, ROOT, b"config.lock", ROOT, b"config").unwrap();
    assert!(real().starts_with("[two]\n") && has_ext(&real()));
    assert_eq!(p.config_syncs(), 2);

    // A file that was there before the mount saw it (not known to be unsynced).
    std::fs::write(dir.join("config.new"), b"[three]\n").unwrap();
    p.lookup(ROOT, b"config.new").unwrap();
    rename(&p, ROOT, b"config.new", ROOT, b"config").unwrap();
    assert!(real().starts_with("[three]\n") && has_ext(&real()));
    assert_eq!(p.config_syncs(), 4);

    // Written in place and closed: stored, not fsynced; then fsynced with nothing left
    // to store: GITDIR's config and GITDIR.
    let ino = p.lookup(ROOT, b"config").unwrap().ino.0;
    let fh = plain(p.open(ino, libc::O_WRONLY | libc::O_APPEND, none).unwrap());
    p.write(fh, 0, b"[four]\n").unwrap();
    p.flush(fh).unwrap();
    assert!(real().starts_with("[three]\n[four]\n") && has_ext(&real()));
    assert_eq!(p.config_syncs(), 4);
    p.fsync(fh, false).unwrap();
    assert_eq!(p.config_syncs(), 6);
    // Written and fsynced: stored with its fsyncs; the release stores nothing more.
    p.write(fh, 0, b"[five]\n").unwrap();
    p.fsync(fh, true).unwrap();
    assert!(real().starts_with("[three]\n[four]\n[five]\n") && has_ext(&real()));
    assert_eq!(p.config_syncs(), 8);
    p.release(fh);
    assert_eq!(p.config_syncs(), 8);

    // A file with another link: stored as a new file, the other link keeps the text.
    std::fs::write(dir.join("config.x"), b"[six]\n").unwrap();
    std::fs::hard_link(dir.join("config.x"), dir.join("other")).unwrap();
    p.lookup(ROOT, b"config.x").unwrap();
    rename(&p, ROOT, b"config.x", ROOT, b"config").unwrap();
    assert!(real().starts_with("[six]\n") && has_ext(&real()));
    assert_eq!(std::fs::read(dir.join("other")).unwrap(), b"[six]\n");
    assert!(!dir.join("config.x").exists());
    std::fs::remove_file(dir.join("other")).unwrap();
    // A file still open through the mount: stored as a new file; what the handle writes
    // afterwards never reaches the config.
    let (_, fh) = create(&p, node(ROOT, b"config.y", 0o644, 0), libc::O_RDWR);
    p.write(fh, 0, b"[seven]\n").unwrap();
    rename(&p, ROOT, b"config.y", ROOT, b"config").unwrap();
    assert!(real().starts_with("[seven]\n") && has_ext(&real()));
    p.write(fh, 0, b"[eight]\n").unwrap();
    p.release(fh);
    assert!(real().starts_with("[seven]\n") && has_ext(&real()));

    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "config")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// git 2.39's `branch -D` renames a `config.lock` holding the config it read over
/// `config`, once per deleted branch: where that is exactly GITDIR's config (owner and
/// mode too) and no durability was asked for, the lock goes and GITDIR's config stays,
/// with no data sync and its mtime moved; the renamed node reads as the config. A lock
/// with another text, or another mode, is stored as before (a data sync before its
/// rename), and so is one fsynced first (durable: both syncs).
#[test]
fn config_renamed_over_with_its_own_text_is_kept() {
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let init = reftable_config(dir);
    let p = Passthrough::new(dir).unwrap();
    let none = |_: &File| -> io::Result<BackingId> { Err(io::Error::other("no")) };
    let past = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    let cfg = dir.join("config");
    let set_past = || {
        File::options()
            .write(true)
            .open(&cfg)
            .unwrap()
            .set_modified(past)
            .unwrap()
    };
    set_past();
    let mode = std::fs::metadata(&cfg).unwrap().mode() & 0o7777;
    let before = std::fs::metadata(&cfg).unwrap().ino();
    // What a client reads as `config`, written back unchanged.
    let cino = p.lookup(ROOT, b"config").unwrap().ino.0;
    let fh = plain(p.open(cino, libc::O_RDONLY, none).unwrap());
    let served = p.read(fh, 0, 4096).unwrap();
    p.release(fh);
    let a = put(
        &p,
        node(ROOT, b"config.lock", mode, 0),
        libc::O_RDWR | libc::O_EXCL,
        &served,
    );
    rename(&p, ROOT, b"config.lock", ROOT, b"config").unwrap();
    assert_eq!(
        std::fs::read(&cfg).unwrap(),
        init,
        "GITDIR's config as it was"
    );
    assert_eq!(
        std::fs::metadata(&cfg).unwrap().ino(),
        before,
        "not replaced"
    );
    assert!(!dir.join("config.lock").exists(), "the lock is gone");
    assert_eq!((p.config_data_syncs(), p.config_syncs()), (0, 0));
    assert!(
        std::fs::metadata(&cfg).unwrap().modified().unwrap() > past,
        "mtime moved"
    );
    assert_eq!(
        p.lookup(ROOT, b"config").unwrap().ino,
        a.ino,
        "the renamed node"
    );
    let fh = plain(p.open(a.ino.0, libc::O_RDONLY, none).unwrap());
    assert_eq!(p.read(fh, 0, 4096).unwrap(), served);
    p.release(fh);

    // git's rewrite: config.lock of `mode` holding `text`, renamed over config.
    let rewrite = |mode: u32, text: &[u8]| {
        let n = node(ROOT, b"config.lock", mode, 0);
        put(&p, n, libc::O_RDWR | libc::O_EXCL, text);
        rename(&p, ROOT, b"config.lock", ROOT, b"config").unwrap();
    };
    // Another mode: stored as a rename on a disk would leave it.
    set_past();
    let other = if mode == 0o600 { 0o644 } else { 0o600 };
    rewrite(other, &served);
    assert_eq!(std::fs::metadata(&cfg).unwrap().mode() & 0o7777, other);
    assert_eq!(p.config_data_syncs(), 1);

    // Another text: stored, with the data sync before its rename.
    let mut more = served.clone();
    more.extend_from_slice(b"[branch \"x\"]\n\tremote = origin\n");
    rewrite(other, &more);
    assert!(String::from_utf8(std::fs::read(&cfg).unwrap())
        .unwrap()
        .contains("[branch \"x\"]"));
    assert_eq!((p.config_data_syncs(), p.config_syncs()), (2, 0));

    // The same text fsynced first: durable, stored with both syncs.
    let (_, fh) = create(&p, node(ROOT, b"config.lock", other, 0), libc::O_RDWR);
    p.write(fh, 0, &more).unwrap();
    p.fsync(fh, false).unwrap();
    p.release(fh);
    rename(&p, ROOT, b"config.lock", ROOT, b"config").unwrap();
    assert_eq!(p.config_syncs(), 2);
}
