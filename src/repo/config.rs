//! git config: the reader (sections, subsections, quoting, includes, the files git
//! reads in order) and the writer of one key.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

use super::{repo_err, Env};

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

/// System, global, repository, then environment/`-c` config, lowest priority first.
pub(super) fn load_config(common_dir: &Path, params: &[String], env: &Env) -> Result<Config> {
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
