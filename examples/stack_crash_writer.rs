//! A writer to be killed: commits one transaction after another to a reftable stack and
//! prints `done N` after each commit returned. The child of `tests/all/stack_concurrency.rs`'s
//! `sigkill_at_random_points_leaves_a_consistent_stack`, which SIGKILLs it at random
//! points and checks that every reported commit survived.
//!
//! ```sh
//! cargo run --example stack_crash_writer -- REFTABLE_DIR START OBJECT_ID
//! ```

use std::io::Write;
use std::time::Duration;

use reftablefs::stack::{Stack, StackOptions};
use reftablefs::transaction::{Identity, RefEdit};
use reftablefs::{HashKind, ObjectId};

fn main() -> reftablefs::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, start, id] = args.as_slice() else {
        eprintln!("usage: stack_crash_writer REFTABLE_DIR START OBJECT_ID");
        std::process::exit(129);
    };
    let start: usize = start
        .parse()
        .map_err(|e| reftablefs::Error::Api(format!("START: {e}")))?;
    let id = ObjectId::from_hex(id.as_bytes(), HashKind::Sha1)
        .ok_or_else(|| reftablefs::Error::Api(format!("not an object id: {id}")))?;
    let mut st = Stack::open(
        dir,
        StackOptions {
            fsync: true,
            lock_timeout: Some(Duration::from_secs(10)),
            ..StackOptions::default()
        },
    )?;
    let identity = Identity {
        name: b"C O Mitter".to_vec(),
        email: b"committer@example.com".to_vec(),
        time: 1_112_912_053,
        tz_offset: -700,
    };
    let mut out = std::io::stdout().lock();
    for i in start.. {
        let mut tx = st.transaction();
        tx.identity(identity.clone());
        tx.edit(RefEdit::create(format!("refs/heads/c{i:05}"), id).message("crash test"));
        tx.commit()?;
        writeln!(out, "done {i}").and_then(|()| out.flush())?;
    }
    Ok(())
}
