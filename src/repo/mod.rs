//! A git repository as the CLI sees it: where its directories are, what its config says,
//! and who the committer is.
//!
//! * Discovery follows git (`setup.c`): `--git-dir`/`GIT_DIR` when given, otherwise the
//!   current directory and its parents, each checked for a `.git` directory, a `.git`
//!   file (`gitdir: <path>`) or being a bare repository itself; `commondir` is honoured
//!   for linked worktrees; `GIT_CEILING_DIRECTORIES` stops the walk.
//! * [`Config`] is a small git-config reader: sections, subsections (quoted and the old
//!   dotted form), booleans, integers with `k`/`m`/`g` suffixes, quoting, escapes, line
//!   continuations, comments and `include.path`. `includeIf` sections are ignored
//!   (documented limitation). Files read, lowest priority first: system
//!   (`/etc/gitconfig` unless `GIT_CONFIG_NOSYSTEM`), global (`GIT_CONFIG_GLOBAL`, or
//!   `$XDG_CONFIG_HOME/git/config` and `~/.gitconfig`), the repository's `config`, then
//!   `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>` and `-c` values.
//! * [`Identity`] is git's committer identity: `GIT_COMMITTER_NAME`/`EMAIL`/`DATE`,
//!   then `committer.*`/`user.*` config, then `EMAIL` and the system user.
//!
//! The files of this module, one job each:
//!
//! * `mod.rs`: the environment snapshot ([`Env`]) the others read;
//! * `discover.rs`: finding the git and common directories ([`Repo::discover`]);
//! * `config.rs`: reading git config files and writing one key ([`config_set`]);
//! * `settings.rs`: what the ref layer takes from the config ([`RepoSettings`]);
//! * `identity.rs`: the committer identity and the date forms git accepts.

mod config;
mod discover;
mod identity;
mod settings;
#[cfg(test)]
mod tests;

pub use config::{config_set, config_text_set, parse_bool, parse_int, Config};
pub use discover::{is_git_directory, Discover, Repo};
pub use identity::{
    local_tz_at, now_with_local_tz, parse_git_date, utc_timestamp, utc_timestamp_millis, Identity,
};
pub use settings::{RefStorage, RepoSettings, SharedRepository};

use std::collections::BTreeMap;

use crate::Error;

fn repo_err(msg: impl Into<String>) -> Error {
    Error::Repo(msg.into())
}

// ---------------------------------------------------------------------------------------
// Environment snapshot (injectable for tests)
// ---------------------------------------------------------------------------------------

/// The environment variables discovery, config and identity look at.
#[derive(Clone, Debug, Default)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    /// A snapshot of this process's environment (non-UTF-8 values are skipped).
    pub fn from_process() -> Self {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Env { vars }
    }

    /// An empty environment, for tests.
    pub fn empty() -> Self {
        Env::default()
    }

    /// Builder: sets one variable.
    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.vars.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// The value of `key`, if set and not empty.
    fn get_nonempty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }
}
