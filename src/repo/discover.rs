//! Finding the repository as git's `setup.c` does: `--git-dir`/`GIT_DIR`, `.git`
//! directories and files, bare repositories, `commondir`, `GIT_CEILING_DIRECTORIES`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::format::HashKind;
use crate::{Error, Result};

use super::config::load_config;
use super::{parse_bool, repo_err, Config, Env, Identity, RefStorage, RepoSettings};
use crate::lockfile::current_umask;
use crate::transaction::LogAllRefUpdates;

/// How to find the repository: the CLI's `-C`, `--git-dir` and `-c` options.
#[derive(Clone, Debug, Default)]
pub struct Discover {
    /// Start directory (`-C`), relative to the process's cwd; `None` = cwd.
    pub cwd: Option<PathBuf>,
    /// `--git-dir` (overrides `GIT_DIR`).
    pub git_dir: Option<PathBuf>,
    /// `-c key=value` config overrides, in order.
    pub config_params: Vec<String>,
}

/// A repository: its directories, config and derived settings.
#[derive(Clone, Debug)]
pub struct Repo {
    /// The (per-worktree) git directory.
    pub git_dir: PathBuf,
    /// `$GIT_COMMON_DIR`: config, shared refs, objects.
    pub common_dir: PathBuf,
    /// The work tree, if any.
    pub work_tree: Option<PathBuf>,
    pub config: Config,
    pub settings: RepoSettings,
    env: Env,
}

impl Repo {
    /// Finds the repository with this process's environment.
    pub fn discover(opts: &Discover) -> Result<Repo> {
        Repo::discover_with_env(opts, Env::from_process())
    }

    /// Finds the repository with an explicit environment (for tests).
    pub fn discover_with_env(opts: &Discover, env: Env) -> Result<Repo> {
        let process_cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
        let cwd = match &opts.cwd {
            Some(c) => process_cwd.join(c),
            None => process_cwd,
        };
        let explicit = opts
            .git_dir
            .clone()
            .or_else(|| env.get_nonempty("GIT_DIR").map(PathBuf::from));
        let (git_dir, work_tree) = match explicit {
            Some(dir) => {
                let dir = cwd.join(dir);
                let dir = resolve_gitfile(&dir)?.unwrap_or(dir);
                if !is_git_directory(&dir) {
                    return Err(repo_err(format!(
                        "not a git repository: '{}'",
                        dir.display()
                    )));
                }
                let wt = env.get_nonempty("GIT_WORK_TREE").map(|w| cwd.join(w));
                (dir, wt)
            }
            None => find_upwards(&cwd, &env)?,
        };
        Repo::open_dirs(git_dir, work_tree, &opts.config_params, env)
    }

    /// Opens a git directory directly (no discovery, process environment).
    pub fn open(git_dir: &Path) -> Result<Repo> {
        if !is_git_directory(git_dir) {
            return Err(repo_err(format!(
                "not a git repository: '{}'",
                git_dir.display()
            )));
        }
        Repo::open_dirs(git_dir.to_path_buf(), None, &[], Env::from_process())
    }

    fn open_dirs(
        git_dir: PathBuf,
        work_tree: Option<PathBuf>,
        params: &[String],
        env: Env,
    ) -> Result<Repo> {
        let git_dir = std::fs::canonicalize(&git_dir).unwrap_or(git_dir);
        let common_dir = match env.get_nonempty("GIT_COMMON_DIR") {
            Some(c) => PathBuf::from(c),
            None => read_commondir(&git_dir)?,
        };
        let config = load_config(&common_dir, params, &env)?;
        let settings = RepoSettings::from_config(&config, current_umask())?;
        let work_tree = if settings.bare { None } else { work_tree };
        Ok(Repo {
            git_dir,
            common_dir,
            work_tree,
            config,
            settings,
            env,
        })
    }

    /// The object hash of the repository.
    pub fn hash(&self) -> HashKind {
        self.settings.hash
    }

    /// Whether refs are stored in reftables.
    pub fn is_reftable(&self) -> bool {
        self.settings.ref_storage == RefStorage::Reftable
    }

    /// The main stack's directory: `$GIT_COMMON_DIR/reftable`.
    pub fn reftable_dir(&self) -> PathBuf {
        self.common_dir.join("reftable")
    }

    /// The worktree stack of a linked worktree (`$GIT_DIR/reftable`), if this is one.
    pub fn worktree_reftable_dir(&self) -> Option<PathBuf> {
        (self.git_dir != self.common_dir).then(|| self.git_dir.join("reftable"))
    }

    /// Fails unless the repository uses the reftable format.
    pub fn require_reftable(&self) -> Result<()> {
        if self.is_reftable() {
            Ok(())
        } else {
            Err(repo_err(format!(
                "repository '{}' uses the files ref format, not reftable (try 'reftablefs migrate')",
                self.git_dir.display()
            )))
        }
    }

    /// Stack options from the configuration: hash, `reftable.*` write options, lock
    /// timeout, `core.fsync`, permissions; auto-compaction unless
    /// `GIT_TEST_REFTABLE_AUTOCOMPACTION=false` (git's switch).
    pub fn stack_options(&self) -> crate::stack::StackOptions {
        let s = &self.settings;
        let auto_compact = self
            .env
            .get("GIT_TEST_REFTABLE_AUTOCOMPACTION")
            .and_then(parse_bool)
            .unwrap_or(true);
        crate::stack::StackOptions {
            hash: s.hash,
            write: crate::table::WriteOptions {
                block_size: s.block_size,
                restart_interval: s.restart_interval,
                skip_index_objects: !s.index_objects,
                hash: s.hash,
                ..crate::table::WriteOptions::default()
            },
            lock_timeout: s.lock_timeout.or(Some(Duration::MAX)),
            fsync: s.fsync_refs,
            auto_compact,
            compaction_factor: s.geometric_factor,
            default_permissions: Some(s.default_permissions),
            ..crate::stack::StackOptions::default()
        }
    }

    /// Opens the main reftable stack (fails for a files-backend repository).
    pub fn open_stack(&self) -> Result<crate::stack::Stack> {
        self.require_reftable()?;
        crate::stack::Stack::open(self.reftable_dir(), self.stack_options())
    }

    /// `core.logAllRefUpdates` as configured (or git's default for the repository).
    pub fn log_all_ref_updates(&self) -> LogAllRefUpdates {
        self.settings.log_all_ref_updates
    }

    /// The committer identity and time for reflog entries made now.
    pub fn committer(&self) -> Result<Identity> {
        Identity::committer(&self.config, &self.env)
    }

    /// The environment snapshot the repository was opened with.
    pub fn env(&self) -> &Env {
        &self.env
    }
}

/// Reads `.git`-file indirection: `Some(target)` when `path` is a file `gitdir: <p>`.
fn resolve_gitfile(path: &Path) -> Result<Option<PathBuf>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(_) => return Ok(None),
    };
    if !meta.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let target = text
        .strip_prefix("gitdir:")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| repo_err(format!("invalid gitfile format: {}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new("/"));
    let dir = base.join(target);
    if !is_git_directory(&dir) {
        return Err(repo_err(format!("not a git repository: {}", dir.display())));
    }
    Ok(Some(dir))
}

/// git's `validate_headref`: `ref: refs/...`, a hex id, or a symlink into `refs/`.
fn valid_head(git_dir: &Path) -> bool {
    let head = git_dir.join("HEAD");
    if let Ok(target) = std::fs::read_link(&head) {
        return target.starts_with("refs");
    }
    let Ok(content) = std::fs::read(&head) else {
        return false;
    };
    if let Some(rest) = content.strip_prefix(b"ref:") {
        let t = rest
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(rest.len());
        return rest.get(t..).is_some_and(|r| r.starts_with(b"refs/"));
    }
    content.len() >= 40 && content.iter().take(40).all(u8::is_ascii_hexdigit)
}

/// git's `is_git_directory`: a valid HEAD plus `objects/` and `refs/` (in the common dir).
pub fn is_git_directory(dir: &Path) -> bool {
    if !valid_head(dir) {
        return false;
    }
    let common = read_commondir(dir).unwrap_or_else(|_| dir.to_path_buf());
    common.join("objects").is_dir() && common.join("refs").exists()
}

fn read_commondir(git_dir: &Path) -> Result<PathBuf> {
    let file = git_dir.join("commondir");
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let rel = text.trim_end_matches(['\n', '\r']);
            let p = git_dir.join(rel);
            Ok(std::fs::canonicalize(&p).unwrap_or(p))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(git_dir.to_path_buf()),
        Err(e) => Err(Error::io(file, e)),
    }
}

fn find_upwards(start: &Path, env: &Env) -> Result<(PathBuf, Option<PathBuf>)> {
    let ceilings: Vec<PathBuf> = env
        .get("GIT_CEILING_DIRECTORIES")
        .map(|c| {
            c.split(':')
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    let start = std::fs::canonicalize(start).map_err(|e| Error::io(start, e))?;
    let mut dir = start.as_path();
    loop {
        let dotgit = dir.join(".git");
        if let Some(target) = resolve_gitfile(&dotgit)? {
            return Ok((target, Some(dir.to_path_buf())));
        }
        if dotgit.is_dir() && is_git_directory(&dotgit) {
            return Ok((dotgit, Some(dir.to_path_buf())));
        }
        if is_git_directory(dir) {
            return Ok((dir.to_path_buf(), None));
        }
        match dir.parent() {
            Some(parent) if !ceilings.iter().any(|c| c == parent) => dir = parent,
            _ => break,
        }
    }
    Err(repo_err(format!(
        "not a git repository (or any of the parent directories): .git (from {})",
        start.display()
    )))
}
