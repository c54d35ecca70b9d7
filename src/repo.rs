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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::format::HashKind;
use crate::{Error, Result};

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

// ---------------------------------------------------------------------------------------
// Config
// ---------------------------------------------------------------------------------------

/// Parsed git configuration: every `key = value` in file order, later entries winning.
/// Keys are stored as `section.name` or `section.subsection.name`, with the section and
/// name lower-cased and the subsection kept as written.
#[derive(Clone, Debug, Default)]
pub struct Config {
    entries: Vec<(String, Option<String>)>,
}

const MAX_INCLUDE_DEPTH: usize = 10;

impl Config {
    /// Parses config text; `origin` names the file in error messages and anchors
    /// relative `include.path`s (when it is a real path).
    pub fn parse(text: &[u8], origin: &Path) -> Result<Config> {
        let mut c = Config::default();
        c.add_text(text, origin, 0)?;
        Ok(c)
    }

    /// Reads and appends a file; a missing file is no error.
    pub fn add_file(&mut self, path: &Path) -> Result<()> {
        self.add_file_depth(path, 0)
    }

    fn add_file_depth(&mut self, path: &Path, depth: usize) -> Result<()> {
        match std::fs::read(path) {
            Ok(text) => self.add_text(&text, path, depth),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// Appends one `key=value` (as given to `git -c`); a bare `key` means true.
    pub fn add_parameter(&mut self, param: &str) -> Result<()> {
        let (key, value) = match param.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (param, None),
        };
        let key =
            canonical_key(key).ok_or_else(|| repo_err(format!("invalid config key: {key}")))?;
        self.entries.push((key, value));
        Ok(())
    }

    fn add_text(&mut self, text: &[u8], origin: &Path, depth: usize) -> Result<()> {
        let mut p = ConfigParser {
            text,
            pos: 0,
            line: 1,
        };
        let mut section = String::new();
        loop {
            p.skip_space_and_newlines();
            let Some(c) = p.peek() else { break };
            let line = p.line;
            match c {
                b'#' | b';' => p.skip_line(),
                b'[' => {
                    section = p
                        .section_header()
                        .map_err(|what| p.error(line, origin, &what))?;
                }
                c if c.is_ascii_alphabetic() => {
                    if section.is_empty() {
                        return Err(p.error(line, origin, "key outside any section"));
                    }
                    let (name, value) =
                        p.key_value().map_err(|what| p.error(line, origin, &what))?;
                    let key = format!("{section}.{name}");
                    if key == "include.path" {
                        if let Some(v) = &value {
                            self.include(v, origin, depth)?;
                        }
                    }
                    self.entries.push((key, value));
                }
                _ => return Err(p.error(line, origin, "unexpected character")),
            }
        }
        Ok(())
    }

    fn include(&mut self, path: &str, origin: &Path, depth: usize) -> Result<()> {
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(repo_err(format!(
                "exceeded maximum include depth ({MAX_INCLUDE_DEPTH}) while including {path} from {}",
                origin.display()
            )));
        }
        let target = if let Some(rest) = path.strip_prefix("~/") {
            match std::env::var_os("HOME") {
                Some(home) => PathBuf::from(home).join(rest),
                None => return Ok(()),
            }
        } else {
            let p = Path::new(path);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                match origin.parent() {
                    Some(dir) => dir.join(p),
                    None => return Ok(()),
                }
            }
        };
        self.add_file_depth(&target, depth + 1)
    }

    /// The last value of `key` (`section.name` or `section.sub.name`; section and name
    /// are case-insensitive). `Some(None)` means "key present without `=`".
    pub fn raw(&self, key: &str) -> Option<Option<&str>> {
        let key = canonical_key(key)?;
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_deref())
    }

    /// The last value of `key` as a string (`None` when absent or valueless).
    pub fn string(&self, key: &str) -> Option<&str> {
        self.raw(key).flatten()
    }

    /// The last value of `key` as git's boolean.
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.raw(key) {
            None => Ok(None),
            Some(None) => Ok(Some(true)),
            Some(Some(v)) => parse_bool(v)
                .map(Some)
                .ok_or_else(|| repo_err(format!("bad boolean config value '{v}' for '{key}'"))),
        }
    }

    /// The last value of `key` as git's integer (suffixes `k`, `m`, `g`).
    pub fn int(&self, key: &str) -> Result<Option<i64>> {
        match self.raw(key) {
            None => Ok(None),
            Some(None) => Err(repo_err(format!("missing value for '{key}'"))),
            Some(Some(v)) => parse_int(v).map(Some).ok_or_else(|| {
                repo_err(format!(
                    "bad numeric config value '{v}' for '{key}': invalid unit"
                ))
            }),
        }
    }

    /// Every value of a multi-valued key, in order.
    pub fn all(&self, key: &str) -> Vec<Option<&str>> {
        let Some(key) = canonical_key(key) else {
            return Vec::new();
        };
        self.entries
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.as_deref())
            .collect()
    }
}

/// Lower-cases the section and the last component, keeping a subsection as written.
fn canonical_key(key: &str) -> Option<String> {
    let first = key.find('.')?;
    let last = key.rfind('.')?;
    let section = key.get(..first)?;
    let name = key.get(last + 1..)?;
    if section.is_empty() || name.is_empty() {
        return None;
    }
    let mut out = section.to_ascii_lowercase();
    if last > first {
        out.push('.');
        out.push_str(key.get(first + 1..last)?);
    }
    out.push('.');
    out.push_str(&name.to_ascii_lowercase());
    Some(out)
}

/// git's boolean words.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => Some(true),
        "false" | "no" | "off" | "" => Some(false),
        _ => parse_int(v).map(|i| i != 0),
    }
}

/// git's integers: decimal with an optional `k`, `m` or `g` suffix.
pub fn parse_int(v: &str) -> Option<i64> {
    let v = v.trim();
    let (digits, factor) = match v.as_bytes().last()? {
        b'k' | b'K' => (v.get(..v.len() - 1)?, 1024),
        b'm' | b'M' => (v.get(..v.len() - 1)?, 1024 * 1024),
        b'g' | b'G' => (v.get(..v.len() - 1)?, 1024 * 1024 * 1024),
        _ => (v, 1),
    };
    digits.parse::<i64>().ok()?.checked_mul(factor)
}

struct ConfigParser<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
}

impl ConfigParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.pos += 1;
        if c == b'\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn error(&self, line: usize, origin: &Path, what: &str) -> Error {
        repo_err(format!(
            "bad config line {} in file {}: {what}",
            line,
            origin.display()
        ))
    }

    fn skip_space_and_newlines(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.bump();
        }
        // A UTF-8 byte order mark at the start of a file.
        if self.pos == 0 && self.text.starts_with(b"\xef\xbb\xbf") {
            self.pos = 3;
            self.skip_space_and_newlines();
        }
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.bump() {
            if c == b'\n' {
                break;
            }
        }
    }

    /// `[section]`, `[section "sub"]` or `[section.sub]`; returns `section[.sub]`.
    fn section_header(&mut self) -> std::result::Result<String, String> {
        self.bump(); // '['
        let mut name = String::new();
        loop {
            match self.bump() {
                Some(b']') => break,
                Some(c) if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' => {
                    name.push(c.to_ascii_lowercase() as char)
                }
                Some(b' ' | b'\t') => {
                    while matches!(self.peek(), Some(b' ' | b'\t')) {
                        self.bump();
                    }
                    if self.bump() != Some(b'"') {
                        return Err("expected '\"' before a subsection".into());
                    }
                    let mut sub = Vec::new();
                    loop {
                        match self.bump() {
                            None | Some(b'\n') => return Err("unterminated subsection".into()),
                            Some(b'"') => break,
                            Some(b'\\') => match self.bump() {
                                None | Some(b'\n') => return Err("unterminated subsection".into()),
                                Some(c) => sub.push(c),
                            },
                            Some(c) => sub.push(c),
                        }
                    }
                    if self.bump() != Some(b']') {
                        return Err("expected ']' after a subsection".into());
                    }
                    if name.is_empty() {
                        return Err("empty section name".into());
                    }
                    name.push('.');
                    name.push_str(&String::from_utf8_lossy(&sub));
                    return Ok(name);
                }
                _ => return Err("invalid section header".into()),
            }
        }
        if name.is_empty() || name.starts_with('.') {
            return Err("empty section name".into());
        }
        // The old `[section.Sub]` form: the subsection is lower-cased, as git does.
        Ok(name)
    }

    /// `name [= value]` up to the end of the line.
    fn key_value(&mut self) -> std::result::Result<(String, Option<String>), String> {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'-' {
                name.push(c.to_ascii_lowercase() as char);
                self.bump();
            } else {
                break;
            }
        }
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.bump();
        }
        match self.peek() {
            None | Some(b'\n') => return Ok((name, None)),
            Some(b'#' | b';') => {
                self.skip_line();
                return Ok((name, None));
            }
            Some(b'\r') if self.text.get(self.pos + 1) == Some(&b'\n') => return Ok((name, None)),
            Some(b'=') => {
                self.bump();
            }
            Some(_) => return Err(format!("invalid key '{name}'")),
        }
        let mut value = Vec::new();
        let mut quoted = false;
        let mut pending_space = 0usize;
        while let Some(c) = self.bump() {
            match c {
                b'\n' => {
                    if quoted {
                        return Err("unterminated quoted value".into());
                    }
                    break;
                }
                b'\r' if self.peek() == Some(b'\n') && !quoted => {}
                b' ' | b'\t' if !quoted => {
                    if !value.is_empty() {
                        pending_space += 1;
                    }
                }
                b'#' | b';' if !quoted => {
                    self.skip_line();
                    break;
                }
                _ => {
                    value.extend(std::iter::repeat_n(b' ', pending_space));
                    pending_space = 0;
                    match c {
                        b'"' => quoted = !quoted,
                        b'\\' => match self.bump() {
                            Some(b'\n') => {}
                            Some(b'n') => value.push(b'\n'),
                            Some(b't') => value.push(b'\t'),
                            Some(b'b') => {
                                value.pop();
                            }
                            Some(b'\\') => value.push(b'\\'),
                            Some(b'"') => value.push(b'"'),
                            _ => return Err("bad escape in value".into()),
                        },
                        other => value.push(other),
                    }
                }
            }
        }
        if quoted {
            return Err("unterminated quoted value".into());
        }
        Ok((name, Some(String::from_utf8_lossy(&value).into_owned())))
    }
}

// ---------------------------------------------------------------------------------------
// Repository settings derived from the config
// ---------------------------------------------------------------------------------------

/// `extensions.refStorage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefStorage {
    Files,
    Reftable,
}

pub use crate::transaction::LogAllRefUpdates;

/// `core.sharedRepository`, as git's `git_config_perm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedRepository {
    /// `umask`/`false`/`0`: permissions from the umask.
    Umask,
    /// `group`/`true`/`1`: OR in 0660.
    Group,
    /// `all`/`world`/`everybody`/`2`: OR in 0664.
    Everybody,
    /// An octal mode: files get exactly `mode & 0666`.
    Mode(u32),
}

impl SharedRepository {
    fn parse(v: &str) -> Result<Self> {
        let lower = v.to_ascii_lowercase();
        Ok(match lower.as_str() {
            "umask" | "false" | "no" | "off" | "0" | "" => SharedRepository::Umask,
            "group" | "true" | "yes" | "on" | "1" => SharedRepository::Group,
            "all" | "world" | "everybody" | "2" => SharedRepository::Everybody,
            _ => {
                let mode = u32::from_str_radix(v, 8).map_err(|_| {
                    repo_err(format!("invalid value for core.sharedRepository: '{v}'"))
                })?;
                if mode & 0o600 != 0o600 {
                    return Err(repo_err(format!(
                        "problem with core.sharedRepository filemode value (0{mode:o}): the owner must have read and write access"
                    )));
                }
                SharedRepository::Mode(mode & 0o666)
            }
        })
    }

    /// git's `calc_shared_perm(mode)`.
    pub fn calc_perm(self, mode: u32) -> u32 {
        let (mut tweak, exact) = match self {
            SharedRepository::Umask => (0, false),
            SharedRepository::Group => (0o660, false),
            SharedRepository::Everybody => (0o664, false),
            SharedRepository::Mode(m) => (m, true),
        };
        if mode & 0o200 == 0 {
            tweak &= !0o222;
        }
        if mode & 0o100 != 0 {
            tweak |= (tweak & 0o444) >> 2;
        }
        if exact {
            (mode & !0o777) | tweak
        } else {
            mode | tweak
        }
    }
}

/// The process umask (read without changing it for long).
pub fn current_umask() -> u32 {
    // SAFETY: umask only swaps a process-wide integer; it is restored at once.
    let old = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    old as u32
}

/// Everything the ref layer needs from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoSettings {
    pub hash: HashKind,
    pub ref_storage: RefStorage,
    pub bare: bool,
    pub log_all_ref_updates: LogAllRefUpdates,
    pub shared: SharedRepository,
    /// `core.fsync` includes `reference` (or `committed`, `all`).
    pub fsync_refs: bool,
    /// `reftable.blockSize` (4096 when unset).
    pub block_size: u32,
    /// `reftable.restartInterval` (16 when unset).
    pub restart_interval: u16,
    /// `reftable.indexObjects` (true when unset).
    pub index_objects: bool,
    /// `reftable.geometricFactor` (2 when unset).
    pub geometric_factor: u8,
    /// `reftable.lockTimeout`: `None` waits forever (-1), default 100 ms.
    pub lock_timeout: Option<Duration>,
    /// Mode for new tables and `tables.list` (git's `calc_shared_perm(0666 & ~umask)`).
    pub default_permissions: u32,
}

impl RepoSettings {
    /// Derives the settings from a config; `umask` is the process umask.
    pub fn from_config(cfg: &Config, umask: u32) -> Result<Self> {
        let version = cfg.int("core.repositoryformatversion")?.unwrap_or(0);
        if !(0..=1).contains(&version) {
            return Err(repo_err(format!(
                "expected git repo version <= 1, found {version}"
            )));
        }
        let hash = match cfg
            .string("extensions.objectformat")
            .map(str::to_ascii_lowercase)
        {
            None => HashKind::Sha1,
            Some(v) if v == "sha1" => HashKind::Sha1,
            Some(v) if v == "sha256" => HashKind::Sha256,
            Some(v) => {
                return Err(repo_err(format!(
                    "invalid value for 'extensions.objectformat': '{v}'"
                )))
            }
        };
        let ref_storage = match cfg
            .string("extensions.refstorage")
            .map(str::to_ascii_lowercase)
        {
            None => RefStorage::Files,
            Some(v) if v == "files" => RefStorage::Files,
            Some(v) if v == "reftable" => RefStorage::Reftable,
            Some(v) => {
                return Err(repo_err(format!(
                    "invalid value for 'extensions.refstorage': '{v}'"
                )))
            }
        };
        let bare = cfg.bool("core.bare")?.unwrap_or(false);
        let log_all_ref_updates = match cfg.raw("core.logallrefupdates") {
            None => {
                if bare {
                    LogAllRefUpdates::False
                } else {
                    LogAllRefUpdates::True
                }
            }
            Some(Some(v)) if v.eq_ignore_ascii_case("always") => LogAllRefUpdates::Always,
            Some(_) => {
                if cfg.bool("core.logallrefupdates")?.unwrap_or(true) {
                    LogAllRefUpdates::True
                } else {
                    LogAllRefUpdates::False
                }
            }
        };
        let shared = match cfg.raw("core.sharedrepository") {
            None => SharedRepository::Umask,
            Some(None) => SharedRepository::Group,
            Some(Some(v)) => SharedRepository::parse(v)?,
        };
        let fsync_refs = cfg.string("core.fsync").is_some_and(fsync_includes_refs);
        let block_size = match cfg.int("reftable.blocksize")? {
            None | Some(0) => 4096,
            Some(b) if !(0..=16_777_215).contains(&b) => {
                return Err(repo_err("reftable block size cannot exceed 16MB"))
            }
            Some(b) => b as u32,
        };
        let restart_interval = match cfg.int("reftable.restartinterval")? {
            None | Some(0) => 16,
            // git's message says "block size" here; we keep git's wording.
            Some(r) if !(0..=65535).contains(&r) => {
                return Err(repo_err("reftable block size cannot exceed 65535"))
            }
            Some(r) => r as u16,
        };
        let index_objects = cfg.bool("reftable.indexobjects")?.unwrap_or(true);
        let geometric_factor = match cfg.int("reftable.geometricfactor")? {
            None => 2,
            Some(f) if !(0..=255).contains(&f) => {
                return Err(repo_err(format!(
                    "reftable geometric factor out of range: {f}"
                )))
            }
            Some(f) => f as u8,
        };
        let lock_timeout = match cfg.int("reftable.locktimeout")? {
            None => Some(Duration::from_millis(100)),
            Some(t) if t < 0 => None,
            Some(t) => Some(Duration::from_millis(t as u64)),
        };
        let default_permissions = shared.calc_perm(0o666 & !umask);
        Ok(RepoSettings {
            hash,
            ref_storage,
            bare,
            log_all_ref_updates,
            shared,
            fsync_refs,
            block_size,
            restart_interval,
            index_objects,
            geometric_factor,
            lock_timeout,
            default_permissions,
        })
    }
}

/// Whether a `core.fsync` component list syncs references.
fn fsync_includes_refs(list: &str) -> bool {
    let mut on = false;
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (neg, name) = match item.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, item),
        };
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "none" => on = false,
            "reference" | "committed" | "all" | "added" => on = !neg,
            _ => {}
        }
    }
    on
}

// ---------------------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------------------

/// The committer identity type is the transaction layer's; this module knows how git
/// finds it.
pub use crate::transaction::Identity;

impl Identity {
    /// git's committer identity: environment, then config, then system fallbacks; the
    /// date from `GIT_COMMITTER_DATE` (see [`parse_git_date`]) or the clock.
    pub fn committer(cfg: &Config, env: &Env) -> Result<Identity> {
        let name = env
            .get("GIT_COMMITTER_NAME")
            .or_else(|| cfg.string("committer.name"))
            .or_else(|| cfg.string("user.name"))
            .map(str::to_owned)
            .unwrap_or_else(system_user_name);
        let email = env
            .get("GIT_COMMITTER_EMAIL")
            .or_else(|| cfg.string("committer.email"))
            .or_else(|| cfg.string("user.email"))
            .or_else(|| env.get_nonempty("EMAIL"))
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}@{}", system_login(), hostname()));
        let (time, tz_offset) = match env.get("GIT_COMMITTER_DATE") {
            Some(d) => {
                parse_git_date(d).ok_or_else(|| repo_err(format!("invalid date format: {d}")))?
            }
            None => now_with_local_tz(),
        };
        Ok(Identity {
            name: crud_trim(&name).into_bytes(),
            email: crud_trim(&email).into_bytes(),
            time,
            tz_offset,
        })
    }
}

/// git strips "crud" (spaces, `.`, `,`, `:`, `;`, `<`, `>`, quotes, `\`) from both ends of
/// ident parts, and drops `<`, `>` and newlines inside.
fn crud_trim(s: &str) -> String {
    let is_crud =
        |c: char| c <= ' ' || matches!(c, '.' | ',' | ':' | ';' | '<' | '>' | '"' | '\\' | '\'');
    s.trim_matches(is_crud)
        .chars()
        .filter(|c| !matches!(c, '<' | '>' | '\n'))
        .collect()
}

fn system_login() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

fn system_user_name() -> String {
    system_login()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Seconds since the epoch and the local timezone as ±HHMM.
pub fn now_with_local_tz() -> (u64, i16) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    (now, local_tz_at(now))
}

/// The local timezone offset at `time`, as ±HHMM.
pub fn local_tz_at(time: u64) -> i16 {
    crate::transaction::local_tz_hhmm(time)
}

/// Parses the date forms git accepts in `GIT_COMMITTER_DATE` that tests use:
/// `@<unix> [±hhmm]`, `<unix> ±hhmm` (git's raw form), RFC 2822
/// (`Thu, 07 Apr 2005 22:13:13 +0200`) and ISO 8601 (`2005-04-07T22:13:13+0200`,
/// `2005-04-07 22:13:13 +02:00`, optional `Z`). Returns (seconds, ±HHMM); a missing
/// zone means UTC for `@` forms and local time otherwise.
pub fn parse_git_date(s: &str) -> Option<(u64, i16)> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('@') {
        let mut it = rest.split_whitespace();
        let t: u64 = it.next()?.parse().ok()?;
        let tz = match it.next() {
            Some(z) => parse_tz(z)?,
            None => 0,
        };
        return it.next().is_none().then_some((t, tz));
    }
    let parts: Vec<&str> = s.split_whitespace().collect();
    if let [t, z] = parts.as_slice() {
        if t.bytes().all(|b| b.is_ascii_digit()) && t.len() >= 9 {
            return Some((t.parse().ok()?, parse_tz(z)?));
        }
    }
    parse_iso8601(s).or_else(|| parse_rfc2822(s))
}

/// `+hhmm`, `-hh:mm`, `+hh`, `Z`, `UTC`, `GMT` → ±HHMM.
fn parse_tz(z: &str) -> Option<i16> {
    if matches!(z, "Z" | "z" | "UTC" | "GMT") {
        return Some(0);
    }
    let (sign, digits) = match z.as_bytes().first()? {
        b'+' => (1i16, z.get(1..)?),
        b'-' => (-1i16, z.get(1..)?),
        _ => return None,
    };
    let digits: String = digits.chars().filter(|&c| c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i16 = match digits.len() {
        2 => digits.parse::<i16>().ok()? * 100,
        4 => digits.parse().ok()?,
        _ => return None,
    };
    Some(sign * v)
}

/// Minutes east of UTC for a ±HHMM value.
fn tz_minutes(tz: i16) -> i64 {
    let t = i64::from(tz);
    (t / 100) * 60 + t % 100
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn to_epoch(
    y: i64,
    mo: u32,
    d: u32,
    h: u32,
    mi: u32,
    s: u32,
    tz: Option<i16>,
) -> Option<(u64, i16)> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let local =
        days_from_civil(y, mo, d) * 86400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
    let tz = match tz {
        Some(tz) => tz,
        // Local time: take the zone in force near that moment.
        None => local_tz_at(u64::try_from(local).ok()?),
    };
    let t = local - tz_minutes(tz) * 60;
    Some((u64::try_from(t).ok()?, tz))
}

fn parse_hms(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.split(':');
    let h = it.next()?.parse().ok()?;
    let m = it.next()?.parse().ok()?;
    let sec = match it.next() {
        Some(x) => x.split('.').next()?.parse().ok()?,
        None => 0,
    };
    it.next().is_none().then_some((h, m, sec))
}

fn parse_iso8601(s: &str) -> Option<(u64, i16)> {
    let date = s.get(..10)?;
    let mut dp = date.split('-');
    let y: i64 = dp.next()?.parse().ok()?;
    let mo: u32 = dp.next()?.parse().ok()?;
    let d: u32 = dp.next()?.parse().ok()?;
    let rest = s.get(10..)?;
    let rest = rest
        .strip_prefix('T')
        .or_else(|| rest.strip_prefix(' '))
        .unwrap_or(rest)
        .trim();
    if rest.is_empty() {
        return to_epoch(y, mo, d, 0, 0, 0, None);
    }
    // Split the time from a zone that may be glued on (`+0200`, `Z`) or spaced.
    let cut = rest.find(['+', '-', 'Z', ' ']).unwrap_or(rest.len());
    let time = rest.get(..cut)?;
    let zone = rest.get(cut..)?.trim();
    let (h, mi, sec) = parse_hms(time)?;
    let tz = if zone.is_empty() {
        None
    } else {
        Some(parse_tz(zone)?)
    };
    to_epoch(y, mo, d, h, mi, sec, tz)
}

fn parse_rfc2822(s: &str) -> Option<(u64, i16)> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let s = match s.split_once(',') {
        Some((_day, rest)) => rest,
        None => s,
    };
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [d, mon, y, time, rest @ ..] = parts.as_slice() else {
        return None;
    };
    let d: u32 = d.parse().ok()?;
    let mon = mon.to_ascii_lowercase();
    let mo = MONTHS.iter().position(|m| mon.starts_with(m))? as u32 + 1;
    let y: i64 = y.parse().ok()?;
    let (h, mi, sec) = parse_hms(time)?;
    let tz = match rest {
        [] => None,
        [z, ..] => Some(parse_tz(z)?),
    };
    to_epoch(y, mo, d, h, mi, sec, tz)
}

// ---------------------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------------------

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

/// System, global, repository, then environment/`-c` config, lowest priority first.
fn load_config(common_dir: &Path, params: &[String], env: &Env) -> Result<Config> {
    let mut cfg = Config::default();
    if env.get("GIT_CONFIG_NOSYSTEM").and_then(parse_bool) != Some(true) {
        let system = env.get("GIT_CONFIG_SYSTEM").unwrap_or("/etc/gitconfig");
        cfg.add_file(Path::new(system))?;
    }
    match env.get("GIT_CONFIG_GLOBAL") {
        Some(g) => cfg.add_file(Path::new(g))?,
        None => {
            let xdg = match env.get_nonempty("XDG_CONFIG_HOME") {
                Some(x) => Some(PathBuf::from(x).join("git/config")),
                None => env
                    .get_nonempty("HOME")
                    .map(|h| PathBuf::from(h).join(".config/git/config")),
            };
            if let Some(x) = xdg {
                cfg.add_file(&x)?;
            }
            if let Some(h) = env.get_nonempty("HOME") {
                cfg.add_file(&PathBuf::from(h).join(".gitconfig"))?;
            }
        }
    }
    cfg.add_file(&common_dir.join("config"))?;
    if let Some(count) = env.get("GIT_CONFIG_COUNT") {
        let n: usize = count
            .trim()
            .parse()
            .map_err(|_| repo_err(format!("bogus count in GIT_CONFIG_COUNT: {count}")))?;
        for i in 0..n {
            let key = env
                .get(&format!("GIT_CONFIG_KEY_{i}"))
                .ok_or_else(|| repo_err(format!("missing config key GIT_CONFIG_KEY_{i}")))?;
            let value = env
                .get(&format!("GIT_CONFIG_VALUE_{i}"))
                .ok_or_else(|| repo_err(format!("missing config value GIT_CONFIG_VALUE_{i}")))?;
            cfg.add_parameter(&format!("{key}={value}"))?;
        }
    }
    for p in params {
        cfg.add_parameter(p)?;
    }
    Ok(cfg)
}

/// Sets `section.key = value` in the config file at `path`, as `git config` does for a
/// plain section: an existing `key` line in the last matching section is replaced,
/// otherwise the line is appended to that section, or a new section is appended.
/// The file is rewritten through `<path>.lock` (O_EXCL, then rename).
pub fn config_set(path: &Path, section: &str, key: &str, value: &str) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io(path, e)),
    };
    let new = config_text_set(&text, section, key, value);
    let lock_path = {
        let mut p = path.as_os_str().to_owned();
        p.push(".lock");
        PathBuf::from(p)
    };
    let mut lock = crate::lockfile::LockFile::acquire(&lock_path, None)?;
    {
        use std::io::Write;
        let f = lock.file()?;
        f.write_all(new.as_bytes())
            .map_err(|e| Error::io(&lock_path, e))?;
    }
    lock.commit(path)
}

/// The text transformation behind [`config_set`].
pub fn config_text_set(text: &str, section: &str, key: &str, value: &str) -> String {
    let section_lc = section.to_ascii_lowercase();
    let key_lc = key.to_ascii_lowercase();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut in_section = false;
    let mut last_line_of_section: Option<usize> = None;
    let mut key_line: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            let name = rest.split([']', ' ', '\t', '"']).next().unwrap_or("");
            in_section = name.eq_ignore_ascii_case(&section_lc) && !rest.contains('"');
            if in_section {
                last_line_of_section = Some(i);
                key_line = None;
            }
            continue;
        }
        if in_section {
            last_line_of_section = Some(i);
            let k: String = t
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !k.is_empty() && k.to_ascii_lowercase() == key_lc {
                key_line = Some(i);
            }
        }
    }
    let entry = format!("\t{key} = {value}");
    match (key_line, last_line_of_section) {
        (Some(i), _) => {
            if let Some(l) = lines.get_mut(i) {
                *l = entry;
            }
        }
        (None, Some(i)) => lines.insert(i + 1, entry),
        (None, None) => {
            lines.push(format!("[{section}]"));
            lines.push(entry);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        Config::parse(text.as_bytes(), Path::new("test-config")).unwrap()
    }

    #[test]
    fn config_sections_keys_and_values() {
        let c = cfg("# comment\n[core]\n\tBare = false\n\tlogAllRefUpdates\n[Reftable]\nblockSize = 8k ; c\n\
                     [remote \"Origin\"]\n url = \"a b\\\"c\" # x\n[branch.Main]\n remote=x\n[core] bare=yes\n");
        assert_eq!(
            c.bool("core.bare").unwrap(),
            Some(true),
            "later entries win"
        );
        assert_eq!(c.raw("core.logallrefupdates"), Some(None));
        assert_eq!(c.bool("core.logAllRefUpdates").unwrap(), Some(true));
        assert_eq!(c.int("reftable.blocksize").unwrap(), Some(8192));
        assert_eq!(c.string("remote.Origin.url"), Some("a b\"c"));
        assert_eq!(
            c.string("remote.origin.url"),
            None,
            "subsections are case-sensitive"
        );
        assert_eq!(
            c.string("branch.main.remote"),
            Some("x"),
            "old dotted form is lower-cased"
        );
        assert_eq!(c.int("core.missing").unwrap(), None);
    }

    #[test]
    fn config_value_details() {
        let c = cfg("[a]\n x = one  two   \n y = \"  padded \" tail\n z = cont\\\ninued\n w = t\\tab\\n\n e =\n");
        assert_eq!(c.string("a.x"), Some("one  two"));
        assert_eq!(c.string("a.y"), Some("  padded  tail"));
        assert_eq!(c.string("a.z"), Some("continued"));
        assert_eq!(c.string("a.w"), Some("t\tab\n"));
        assert_eq!(c.string("a.e"), Some(""));
        assert_eq!(c.bool("a.e").unwrap(), Some(false));
    }

    #[test]
    fn config_errors_name_line_and_file() {
        for (text, line) in [
            ("[core\n", 1),
            ("[a]\nx = \"open\n", 2),
            ("x = 1\n", 1),
            ("[a]\n=1\n", 2),
            ("[a]\nx = \\q\n", 2),
        ] {
            let e = Config::parse(text.as_bytes(), Path::new("/r/config"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("line {line}")) && e.contains("/r/config"),
                "{text:?}: {e}"
            );
        }
        let c = cfg("[a]\nb = maybe\nc = 12q\n");
        assert!(c
            .bool("a.b")
            .unwrap_err()
            .to_string()
            .contains("bad boolean"));
        assert!(c.int("a.c").is_err());
    }

    #[test]
    fn config_include_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("inc"), "[user]\n name = Included\n").unwrap();
        std::fs::write(
            dir.path().join("main"),
            "[user]\n name = First\n[include]\n path = inc\n",
        )
        .unwrap();
        let mut c = Config::default();
        c.add_file(&dir.path().join("main")).unwrap();
        assert_eq!(c.string("user.name"), Some("Included"));
        // Self-inclusion is bounded.
        std::fs::write(dir.path().join("loop"), "[include]\n path = loop\n").unwrap();
        assert!(Config::default()
            .add_file(&dir.path().join("loop"))
            .is_err());
    }

    #[test]
    fn config_set_like_git() {
        let text =
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"core\"]\n\turl = x\n";
        let out = config_text_set(text, "core", "repositoryformatversion", "1");
        assert_eq!(
            out,
            "[core]\n\trepositoryformatversion = 1\n\tbare = false\n[remote \"core\"]\n\turl = x\n"
        );
        let out = config_text_set(&out, "extensions", "refstorage", "reftable");
        assert!(
            out.ends_with("[extensions]\n\trefstorage = reftable\n"),
            "{out}"
        );
        let out = config_text_set(&out, "extensions", "objectformat", "sha256");
        assert!(
            out.ends_with("[extensions]\n\trefstorage = reftable\n\tobjectformat = sha256\n"),
            "{out}"
        );
        let c = Config::parse(out.as_bytes(), Path::new("x")).unwrap();
        assert_eq!(c.string("extensions.refstorage"), Some("reftable"));
        assert_eq!(c.int("core.repositoryformatversion").unwrap(), Some(1));
    }

    #[test]
    fn settings_defaults_and_values() {
        let s = RepoSettings::from_config(&cfg("[core]\nbare = false\n"), 0o022).unwrap();
        assert_eq!(s.hash, HashKind::Sha1);
        assert_eq!(s.ref_storage, RefStorage::Files);
        assert_eq!(s.log_all_ref_updates, LogAllRefUpdates::True);
        assert_eq!(
            (s.block_size, s.restart_interval, s.geometric_factor),
            (4096, 16, 2)
        );
        assert!(s.index_objects && !s.fsync_refs);
        assert_eq!(s.lock_timeout, Some(Duration::from_millis(100)));
        assert_eq!(s.default_permissions, 0o644);

        let s = RepoSettings::from_config(
            &cfg("[core]\nrepositoryformatversion = 1\nbare = true\nfsync = reference\nsharedRepository = group\n\
                  [extensions]\nobjectFormat = sha256\nrefStorage = reftable\n\
                  [reftable]\nblockSize = 100\nrestartInterval = 1\nindexObjects = false\ngeometricFactor = 3\nlockTimeout = -1\n"),
            0o027,
        )
        .unwrap();
        assert_eq!(s.hash, HashKind::Sha256);
        assert_eq!(s.ref_storage, RefStorage::Reftable);
        assert_eq!(
            s.log_all_ref_updates,
            LogAllRefUpdates::False,
            "bare default"
        );
        assert!(s.fsync_refs);
        assert_eq!(
            (
                s.block_size,
                s.restart_interval,
                s.index_objects,
                s.geometric_factor
            ),
            (100, 1, false, 3)
        );
        assert_eq!(s.lock_timeout, None);
        assert_eq!(s.default_permissions, 0o660);
    }

    #[test]
    fn settings_errors_use_gits_words() {
        let e = RepoSettings::from_config(&cfg("[reftable]\nblockSize = 16777216\n"), 0o022)
            .unwrap_err();
        assert_eq!(e.to_string(), "reftable block size cannot exceed 16MB");
        let e = RepoSettings::from_config(&cfg("[reftable]\nrestartInterval = 65536\n"), 0o022)
            .unwrap_err();
        assert_eq!(e.to_string(), "reftable block size cannot exceed 65535");
        assert!(RepoSettings::from_config(&cfg("[extensions]\nrefStorage = zzz\n"), 0).is_err());
        assert!(RepoSettings::from_config(&cfg("[core]\nsharedRepository = 0400\n"), 0).is_err());
    }

    #[test]
    fn shared_permissions_match_t0610_table() {
        // (shared, umask) -> mode, from git's t0610.
        let cases = [
            ("umask", 0o002, 0o664),
            ("umask", 0o022, 0o644),
            ("umask", 0o027, 0o640),
            ("group", 0o002, 0o664),
            ("group", 0o022, 0o664),
            ("group", 0o027, 0o660),
            ("world", 0o002, 0o664),
            ("world", 0o022, 0o664),
            ("world", 0o027, 0o664),
        ];
        for (shared, umask, want) in cases {
            let s = RepoSettings::from_config(
                &cfg(&format!("[core]\nsharedRepository = {shared}\n")),
                umask,
            )
            .unwrap();
            assert_eq!(s.default_permissions, want, "{shared} {umask:o}");
        }
        let s =
            RepoSettings::from_config(&cfg("[core]\nsharedRepository = 0640\n"), 0o077).unwrap();
        assert_eq!(s.default_permissions, 0o640);
    }

    #[test]
    fn log_all_ref_updates_rules() {
        let s = |t: &str| {
            RepoSettings::from_config(&cfg(t), 0)
                .unwrap()
                .log_all_ref_updates
        };
        assert_eq!(
            s("[core]\nlogAllRefUpdates = always\n"),
            LogAllRefUpdates::Always
        );
        assert_eq!(
            s("[core]\nlogAllRefUpdates = false\n"),
            LogAllRefUpdates::False
        );
        assert_eq!(
            s("[core]\nbare = true\nlogAllRefUpdates = true\n"),
            LogAllRefUpdates::True
        );
        let t = LogAllRefUpdates::True;
        assert!(t.autocreates(b"HEAD") && t.autocreates(b"refs/notes/commits"));
        assert!(!t.autocreates(b"refs/tags/v1") && !LogAllRefUpdates::False.autocreates(b"HEAD"));
        assert!(LogAllRefUpdates::Always.autocreates(b"refs/tags/v1"));
    }

    #[test]
    fn fsync_components() {
        assert!(fsync_includes_refs("reference"));
        assert!(fsync_includes_refs("objects,committed"));
        assert!(fsync_includes_refs("all"));
        assert!(!fsync_includes_refs("all,-reference"));
        assert!(!fsync_includes_refs("objects,derived-metadata"));
        assert!(!fsync_includes_refs("reference,none"));
    }

    #[test]
    fn dates() {
        // git's test_tick form and the @ form.
        assert_eq!(parse_git_date("1112911993 -0700"), Some((1112911993, -700)));
        assert_eq!(parse_git_date("@1112911993 +0130"), Some((1112911993, 130)));
        assert_eq!(parse_git_date("@1112911993"), Some((1112911993, 0)));
        // RFC 2822 and ISO 8601 name the same instant: 2005-04-07 22:13:13 +0200.
        let want = Some((1112904793, 200));
        assert_eq!(parse_git_date("Thu, 07 Apr 2005 22:13:13 +0200"), want);
        assert_eq!(parse_git_date("2005-04-07T22:13:13+0200"), want);
        assert_eq!(parse_git_date("2005-04-07 22:13:13 +02:00"), want);
        assert_eq!(
            parse_git_date("2005-04-07T20:13:13Z"),
            Some((1112904793, 0))
        );
        assert_eq!(
            parse_git_date("2005-04-07T13:13:13 -0700"),
            Some((1112904793, -700))
        );
        for bad in [
            "",
            "yesterday",
            "2005-13-07T00:00:00Z",
            "@x",
            "12 +0000",
            "Thu, 07 Foo 2005 22:13:13 +0200",
        ] {
            assert_eq!(parse_git_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn identity_precedence() {
        let c = cfg("[user]\nname = User Name\nemail = user@x\n[committer]\nemail = committer@x\n");
        let env = Env::empty().with("GIT_COMMITTER_DATE", "1112911993 -0700");
        let id = Identity::committer(&c, &env).unwrap();
        assert_eq!(
            (id.name.as_slice(), id.email.as_slice()),
            (b"User Name".as_slice(), b"committer@x".as_slice())
        );
        assert_eq!((id.time, id.tz_offset), (1112911993, -700));
        let env = env
            .with("GIT_COMMITTER_NAME", " C O Mitter. ")
            .with("GIT_COMMITTER_EMAIL", "<c@o.m>");
        let id = Identity::committer(&c, &env).unwrap();
        assert_eq!(
            (id.name.as_slice(), id.email.as_slice()),
            (b"C O Mitter".as_slice(), b"c@o.m".as_slice())
        );
        let bad = Env::empty().with("GIT_COMMITTER_DATE", "not a date");
        assert!(Identity::committer(&c, &bad).is_err());
    }

    fn git(dir: &Path, args: &[&str]) {
        let st = std::process::Command::new("git")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&st.stderr)
        );
    }

    #[test]
    fn discovery_like_git() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        git(&root, &["init", "-q", "--ref-format=reftable", "work"]);
        git(
            &root,
            &["init", "-q", "--bare", "--object-format=sha256", "bare.git"],
        );
        let work = root.join("work");
        std::fs::create_dir_all(work.join("a/b")).unwrap();
        let env = Env::empty();
        let d = |cwd: &Path, git_dir: Option<&Path>| Discover {
            cwd: Some(cwd.to_path_buf()),
            git_dir: git_dir.map(Path::to_path_buf),
            config_params: vec![],
        };

        let r = Repo::discover_with_env(&d(&work.join("a/b"), None), env.clone()).unwrap();
        assert_eq!(r.git_dir, work.join(".git"));
        assert_eq!(r.work_tree.as_deref(), Some(work.as_path()));
        assert!(r.is_reftable());
        assert_eq!(r.reftable_dir(), work.join(".git/reftable"));
        assert!(r.worktree_reftable_dir().is_none());

        let r = Repo::discover_with_env(&d(&root.join("bare.git"), None), env.clone()).unwrap();
        assert_eq!(r.git_dir, root.join("bare.git"));
        assert!(r.settings.bare && r.work_tree.is_none());
        assert_eq!(r.hash(), HashKind::Sha256);
        assert!(!r.is_reftable());
        assert!(r
            .require_reftable()
            .unwrap_err()
            .to_string()
            .contains("files ref format"));

        // --git-dir beats GIT_DIR; GIT_DIR works alone.
        let r = Repo::discover_with_env(
            &d(&root, Some(Path::new("work/.git"))),
            env.clone().with("GIT_DIR", "bare.git"),
        )
        .unwrap();
        assert_eq!(r.git_dir, work.join(".git"));
        let r = Repo::discover_with_env(&d(&root, None), env.clone().with("GIT_DIR", "bare.git"))
            .unwrap();
        assert_eq!(r.git_dir, root.join("bare.git"));

        // A .git file pointing elsewhere.
        std::fs::create_dir(root.join("linked")).unwrap();
        std::fs::write(root.join("linked/.git"), "gitdir: ../bare.git\n").unwrap();
        let r = Repo::discover_with_env(&d(&root.join("linked"), None), env.clone()).unwrap();
        assert_eq!(r.git_dir, root.join("bare.git"));

        // Not a repository; ceiling directories stop the walk.
        std::fs::create_dir(root.join("plain")).unwrap();
        let e = Repo::discover_with_env(
            &d(&root.join("plain"), None),
            env.clone()
                .with("GIT_CEILING_DIRECTORIES", root.to_str().unwrap()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a git repository"), "{e}");
    }

    #[test]
    fn discovery_of_linked_worktree_uses_commondir() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        git(&root, &["init", "-q", "--ref-format=reftable", "main"]);
        let main = root.join("main");
        git(
            &main,
            &[
                "-c",
                "user.name=a",
                "-c",
                "user.email=b",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "x",
            ],
        );
        git(&main, &["worktree", "add", "-q", "../wt"]);
        let r = Repo::discover_with_env(
            &Discover {
                cwd: Some(root.join("wt")),
                ..Discover::default()
            },
            Env::empty(),
        )
        .unwrap();
        assert_eq!(r.common_dir, main.join(".git"));
        assert_eq!(r.git_dir, main.join(".git/worktrees/wt"));
        assert_eq!(r.reftable_dir(), main.join(".git/reftable"));
        assert_eq!(
            r.worktree_reftable_dir(),
            Some(main.join(".git/worktrees/wt/reftable"))
        );
        assert!(r.is_reftable(), "config comes from the common dir");
    }
}
