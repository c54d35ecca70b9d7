//! Writing refs with the library: one transaction, one new table.
//!
//! ```sh
//! cargo run --example commit_transaction -- /path/to/reftable/repo
//! ```
//!
//! Creates `refs/heads/example` at `HEAD`'s commit and moves `refs/tags/example-tag`
//! along, checking expected old values the way `git update-ref` does. Either every edit
//! lands (in one table, with reflog entries) or none does.

use reftablefs::repo::{Discover, Repo};
use reftablefs::transaction::{Expected, RefEdit};

fn main() -> reftablefs::Result<()> {
    let discover = Discover {
        cwd: std::env::args().nth(1).map(Into::into),
        ..Discover::default()
    };
    let repo = Repo::discover(&discover)?;
    let mut stack = repo.open_stack()?;

    // Resolve HEAD (a symref) to a commit id through the cached iterator.
    let Some(head) = stack.read_ref(b"HEAD")? else {
        eprintln!("no HEAD");
        return Ok(());
    };
    let target = match head.value {
        reftablefs::RefValue::Symref(t) => t,
        _ => b"HEAD".to_vec(),
    };
    let Some(id) = stack
        .read_ref(&target)?
        .and_then(|r| reftablefs::stack::ref_value_id(&r.value))
    else {
        eprintln!("HEAD is unborn");
        return Ok(());
    };

    // The committer identity and core.logAllRefUpdates come from the repository's config
    // and environment, as git computes them.
    let mut tx = stack.transaction();
    tx.identity(repo.committer()?)
        .log_all_ref_updates(repo.log_all_ref_updates());
    tx.edit(RefEdit::create("refs/heads/example", id).message("example: created"));
    tx.edit(RefEdit::update("refs/tags/example-tag", id).expect(Expected::Any));
    let done = tx.commit()?; // validates, locks tables.list, writes one table, fsyncs once
    println!(
        "committed at update index {} in {:?}",
        done.update_index, done.table
    );
    Ok(())
}
