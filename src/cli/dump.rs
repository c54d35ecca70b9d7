//! `reftablefs dump FILE [--verify]`: header, footer, every block and every record of one
//! table (in the spirit of git's `test-tool dump-reftable`); `--verify` checks the whole
//! table and prints `ok` or the first problem.

use std::io::Write;
use std::process::ExitCode;

use std::path::PathBuf;

use super::table::Id;
use super::Args;
use reftablefs::format::ObjectId;
use reftablefs::table::{AnyRecord, Table};
use reftablefs::{Error, RefValue};

fn show(b: &[u8]) -> String {
    let mut s = String::new();
    for c in b.escape_ascii() {
        s.push(c as char);
    }
    s
}

fn hex(id: &ObjectId) -> String {
    id.to_hex()
}

/// Runs the subcommand.
pub fn run(args: Args) -> reftablefs::Result<ExitCode> {
    let verify = args.flag(Id::Verify);
    let path = match args.operands() {
        [path] => PathBuf::from(path),
        [] => {
            return Ok(super::common::usage_error(
                "a table file is required",
                "dump",
            ))
        }
        _ => return Ok(super::common::usage_error("too many arguments", "dump")),
    };
    let table = Table::open(&path)?;
    if verify {
        return match table.verify() {
            Ok(()) => {
                println!("ok {}", path.display());
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                println!("FAILED {}: {e}", path.display());
                Ok(ExitCode::from(1))
            }
        };
    }
    match print(&table) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(Error::io(&path, e)),
        Ok(r) => r.map(|()| ExitCode::SUCCESS),
    }
}

/// Prints everything; the outer result is output errors, the inner one table errors.
fn print(table: &std::sync::Arc<Table>) -> std::io::Result<reftablefs::Result<()>> {
    let out = std::io::stdout();
    let mut out = out.lock();
    let h = table.header();
    let f = table.footer();
    writeln!(
        out,
        "header: version {} hash {} block_size {} min_update_index {} max_update_index {} file_size {}",
        h.version,
        h.hash.name(),
        h.block_size,
        h.min_update_index,
        h.max_update_index,
        table.file_size()
    )
    ?;
    writeln!(
        out,
        "footer: ref_index {} obj {} obj_id_len {} obj_index {} log {} log_index {}",
        f.ref_index_position,
        f.obj_position,
        f.obj_id_len,
        f.obj_index_position,
        f.log_position,
        f.log_index_position
    )?;
    let blocks = match table.blocks() {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    for b in blocks {
        writeln!(
            out,
            "block {} at {}: length {} restarts {} block_len {} on_disk {}",
            b.typ as char, b.offset, b.restart_off, b.restart_count, b.block_len, b.on_disk
        )?;
        let recs = match table.block_records(&b) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        for (at, rec) in recs {
            let line = match rec {
                AnyRecord::Ref(r) => {
                    let v = match &r.value {
                        RefValue::Deletion => "deleted".to_string(),
                        RefValue::Val1(id) => format!("val1 {}", hex(id)),
                        RefValue::Val2 { value, peeled } => {
                            format!("val2 {} peeled {}", hex(value), hex(peeled))
                        }
                        RefValue::Symref(t) => format!("symref {}", show(t)),
                    };
                    format!("ref {} ui {} {v}", show(&r.name), r.update_index)
                }
                AnyRecord::Log(l) if l.deleted => {
                    format!("log {} ui {} deleted", show(&l.refname), l.update_index)
                }
                AnyRecord::Log(l) => format!(
                    "log {} ui {} {} -> {} {} <{}> {} {:+05} {}",
                    show(&l.refname),
                    l.update_index,
                    hex(&l.old_id),
                    hex(&l.new_id),
                    show(&l.name),
                    show(&l.email),
                    l.time,
                    l.tz_offset,
                    show(&l.message)
                ),
                AnyRecord::Obj { prefix, positions } => {
                    let p: Vec<String> = positions.iter().map(u64::to_string).collect();
                    let hexp: String = prefix.iter().map(|b| format!("{b:02x}")).collect();
                    format!("obj {hexp} positions [{}]", p.join(", "))
                }
                AnyRecord::Index { last_key, offset } => {
                    format!("index {} -> {offset}", show(&last_key))
                }
            };
            writeln!(out, "  @{at} {line}")?;
        }
    }
    Ok(Ok(()))
}
