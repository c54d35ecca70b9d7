//! The refs a command sees: the main stack, plus — in a linked worktree — that
//! worktree's own stack for its per-worktree refs, as git's reftable backend routes
//! them (`HEAD` and other root refs, `refs/bisect/`, `refs/worktree/`,
//! `refs/rewritten/` live in `$GIT_DIR/reftable`, everything else in
//! `$GIT_COMMON_DIR/reftable`). Reads are routed; the `worktrees/<id>/` and
//! `main-worktree/` prefixes are not supported.

use reftablefs::format::{LogRecord, RefRecord};
use reftablefs::merged::{copy_ref, MergedRefIter};
use reftablefs::repo::Repo;
use reftablefs::stack::Stack;
use reftablefs::table::RefIter;
use reftablefs::Result;

/// Whether git keeps `name` per worktree.
pub fn is_per_worktree(name: &[u8]) -> bool {
    reftablefs::refname::is_root_ref_syntax(name)
        || name.starts_with(b"refs/bisect/")
        || name.starts_with(b"refs/worktree/")
        || name.starts_with(b"refs/rewritten/")
}

/// The main stack and, in a linked worktree, the worktree's stack.
pub struct RefStore {
    pub main: Stack,
    pub worktree: Option<Stack>,
}

impl RefStore {
    /// Opens the stacks of `repo` (the worktree stack only if it exists).
    pub fn open(repo: &Repo) -> Result<RefStore> {
        let main = repo.open_stack()?;
        let worktree = match repo.worktree_reftable_dir() {
            Some(dir) if dir.is_dir() => Some(Stack::open(dir, repo.stack_options())?),
            _ => None,
        };
        Ok(RefStore { main, worktree })
    }

    /// A fresh iterator over the refs this worktree sees.
    pub fn iter(&self) -> StoreIter {
        match &self.worktree {
            None => StoreIter::Single(self.main.ref_iter()),
            Some(wt) => StoreIter::Routed(Box::new(Routed {
                main: self.main.ref_iter(),
                wt: wt.ref_iter(),
                a: None,
                b: None,
                cur: RefRecord::default(),
            })),
        }
    }

    /// The stack that holds `name`.
    pub fn stack_for(&self, name: &[u8]) -> &Stack {
        match &self.worktree {
            Some(wt) if is_per_worktree(name) => wt,
            _ => &self.main,
        }
    }

    /// The stack that holds `name`, mutably (for writes).
    pub fn stack_for_mut(&mut self, name: &[u8]) -> &mut Stack {
        match &mut self.worktree {
            Some(wt) if is_per_worktree(name) => wt,
            _ => &mut self.main,
        }
    }

    /// The reflog of `name`, newest first.
    pub fn read_log(&self, name: &[u8]) -> Result<Vec<LogRecord>> {
        self.stack_for(name).read_log(name)
    }

    /// Whether `name` has a reflog.
    pub fn reflog_exists(&self, name: &[u8]) -> Result<bool> {
        self.stack_for(name).reflog_exists(name)
    }
}

/// A reseekable ref iterator over a [`RefStore`].
pub enum StoreIter {
    Single(MergedRefIter),
    Routed(Box<Routed>),
}

/// Two stacks merged by name, each restricted to the names it owns.
pub struct Routed {
    main: MergedRefIter,
    wt: MergedRefIter,
    a: Option<RefRecord>,
    b: Option<RefRecord>,
    cur: RefRecord,
}

fn pull(
    it: &mut MergedRefIter,
    want_per_worktree: bool,
    slot: &mut Option<RefRecord>,
) -> Result<()> {
    while let Some(r) = it.next()? {
        if is_per_worktree(&r.name) == want_per_worktree {
            let dst = slot.get_or_insert_with(RefRecord::default);
            copy_ref(dst, r);
            return Ok(());
        }
    }
    *slot = None;
    Ok(())
}

impl RefIter for StoreIter {
    fn seek(&mut self, name: &[u8]) -> Result<()> {
        match self {
            StoreIter::Single(it) => it.seek(name),
            StoreIter::Routed(r) => {
                r.main.seek(name)?;
                r.wt.seek(name)?;
                pull(&mut r.main, false, &mut r.a)?;
                pull(&mut r.wt, true, &mut r.b)
            }
        }
    }

    fn next(&mut self) -> Result<Option<&RefRecord>> {
        match self {
            StoreIter::Single(it) => it.next(),
            StoreIter::Routed(r) => {
                let take_a = match (&r.a, &r.b) {
                    (None, None) => return Ok(None),
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (Some(a), Some(b)) => a.name <= b.name,
                };
                if take_a {
                    if let Some(a) = &r.a {
                        copy_ref(&mut r.cur, a);
                    }
                    pull(&mut r.main, false, &mut r.a)?;
                } else {
                    if let Some(b) = &r.b {
                        copy_ref(&mut r.cur, b);
                    }
                    pull(&mut r.wt, true, &mut r.b)?;
                }
                Ok(Some(&r.cur))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_worktree_names_like_git() {
        for n in [
            "HEAD",
            "ORIG_HEAD",
            "refs/bisect/bad",
            "refs/worktree/x",
            "refs/rewritten/y",
        ] {
            assert!(is_per_worktree(n.as_bytes()), "{n}");
        }
        for n in [
            "refs/heads/main",
            "refs/tags/v1",
            "refs/bisectx",
            "refs/worktreeX/a",
        ] {
            assert!(!is_per_worktree(n.as_bytes()), "{n}");
        }
    }
}
