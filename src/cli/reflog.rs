//! `reftablefs reflog [show] [--no-abbrev | --abbrev=N] [NAME]`: git's `reflog show`
//! (`<abbrev-oid> <NAME>@{<n>}: <message>`, newest first). `NAME` defaults to `HEAD` and
//! is expanded like git's `dwim_log`: the first rule whose ref resolves and has a reflog
//! (its own, else its symref target's). Abbreviations are 7 hex digits unless asked
//! otherwise; git lengthens them when objects are ambiguous, which needs the object
//! database, so use `--no-abbrev` when comparing large repositories.

use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use super::store::RefStore;
use reftablefs::format::LogRecord;
use reftablefs::{Error, Result};

use super::args::Given;
use super::common::{self, Out, DWIM_RULES};
use super::table::Id;
use super::Args;
use reftablefs::resolve::{resolve, Resolved};

/// git's `dwim_log`: the full name whose reflog `short` denotes.
pub fn dwim_log(stack: &RefStore, short: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut it = stack.iter();
    let mut full = Vec::new();
    for (prefix, suffix) in DWIM_RULES {
        full.clear();
        full.extend_from_slice(prefix.as_bytes());
        full.extend_from_slice(short);
        full.extend_from_slice(suffix.as_bytes());
        if let Resolved::Oid { refname, .. } = resolve(&mut it, &full)? {
            if stack.reflog_exists(&full)? {
                return Ok(Some(full));
            }
            if refname != full && stack.reflog_exists(&refname)? {
                return Ok(Some(refname));
            }
        }
    }
    Ok(None)
}

/// Appends one `reflog show` line.
pub fn format_entry(l: &LogRecord, shown_name: &[u8], n: usize, abbrev: usize, out: &mut Vec<u8>) {
    let at = out.len();
    l.new_id.write_hex(out);
    out.truncate(at + abbrev.min(l.new_id.as_bytes().len() * 2));
    out.push(b' ');
    out.extend_from_slice(shown_name);
    out.extend_from_slice(format!("@{{{n}}}: ").as_bytes());
    let msg = l.message.strip_suffix(b"\n").unwrap_or(&l.message);
    let first = msg.split(|&b| b == b'\n').next().unwrap_or_default();
    out.extend_from_slice(first);
    out.push(b'\n');
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    // `reflog show` is the default subcommand.
    if args.word() == Some("exists") {
        // git's `reflog exists <ref>`: a full name, exit 0 or 1, no output.
        let ([name], false) = (args.operands(), args.any_option()) else {
            return Ok(common::usage_error(
                "reflog exists takes one <ref>",
                "reflog",
            ));
        };
        let repo = common::open_repo()?;
        let store = RefStore::open(&repo)?;
        return Ok(if store.reflog_exists(name.as_bytes())? {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let abbrev = match args.last_of(&[Id::NoAbbrev, Id::Abbrev]) {
        None => 7,
        Some((Id::Abbrev, Given::Value(n))) => {
            let n = n.to_string_lossy();
            n.parse::<usize>()
                .map_err(|_| Error::Transaction(format!("invalid --abbrev: {n}")))?
                .max(4)
        }
        Some(_) => usize::MAX,
    };
    let name: &[u8] = match args.operands() {
        [] => b"HEAD",
        [name] => name.as_bytes(),
        _ => return Ok(common::usage_error("too many arguments", "reflog")),
    };
    let repo = common::open_repo()?;
    let stack = RefStore::open(&repo)?;
    let short: &[u8] = if name == b"@" { b"HEAD" } else { name };
    let Some(full) = dwim_log(&stack, short)? else {
        return Err(Error::Transaction(format!(
            "ambiguous argument '{}': unknown revision or path not in the working tree.",
            String::from_utf8_lossy(name)
        )));
    };
    let entries = stack.read_log(&full)?;
    let mut out = Out::new();
    let mut line = Vec::with_capacity(128);
    for (n, l) in entries.iter().enumerate() {
        line.clear();
        format_entry(l, short, n, abbrev, &mut line);
        out.write(&line)?;
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reftablefs::format::ObjectId;

    #[test]
    fn entry_format() {
        let l = LogRecord {
            new_id: ObjectId::from_bytes(&[0xab; 20]).unwrap(),
            message: b"commit: two\n".to_vec(),
            ..LogRecord::default()
        };
        let mut out = Vec::new();
        format_entry(&l, b"main", 3, 7, &mut out);
        assert_eq!(out, b"abababa main@{3}: commit: two\n");
        out.clear();
        format_entry(&l, b"HEAD", 0, usize::MAX, &mut out);
        assert_eq!(
            out,
            format!("{} HEAD@{{0}}: commit: two\n", "ab".repeat(20)).as_bytes()
        );
    }
}
