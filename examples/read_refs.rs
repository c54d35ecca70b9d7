//! Reading a repository's refs with the library, from a user's side.
//!
//! ```sh
//! cargo run --example read_refs -- /path/to/reftable/repo [REF]
//! ```
//!
//! Finds the repository as git does, opens its reftable stack, looks one ref up,
//! lists the branches, and prints the ref's reflog.

use reftablefs::repo::{Discover, Repo};
use reftablefs::RefValue;

fn main() -> reftablefs::Result<()> {
    let mut args = std::env::args().skip(1);
    // 1. Find the repository: like `git -C DIR`, walking up to the `.git` directory.
    let discover = Discover {
        cwd: args.next().map(Into::into),
        ..Discover::default()
    };
    let repo = Repo::discover(&discover)?;
    let name = args.next().unwrap_or_else(|| "HEAD".to_owned());

    // 2. Open its stack with the options its config asks for (hash, block size, ...).
    let mut stack = repo.open_stack()?;
    println!(
        "{} tables in {}",
        stack.table_names().len(),
        stack.dir().display()
    );

    // 3. Point lookups go through the stack's one cached, reseekable iterator.
    match stack.read_ref(name.as_bytes())? {
        Some(rec) => match rec.value {
            RefValue::Val1(id) => println!("{name} = {id}"),
            RefValue::Val2 { value, peeled } => println!("{name} = {value} (peels to {peeled})"),
            RefValue::Symref(target) => println!("{name} -> {}", String::from_utf8_lossy(&target)),
            RefValue::Deletion => println!("{name} is deleted"), // read_ref filters these out
        },
        None => println!("{name} does not exist"),
    }

    // 4. Prefix scans reuse the same iterator: every branch, in name order.
    stack.for_each_ref(b"refs/heads/", |rec| {
        println!("branch {}", String::from_utf8_lossy(&rec.name));
        true // keep going
    })?;

    // 5. A reflog, newest entry first.
    for (n, entry) in stack.read_log(name.as_bytes())?.iter().enumerate() {
        print!(
            "{name}@{{{n}}}: {} -> {} by {} at {}: {}",
            entry.old_id,
            entry.new_id,
            String::from_utf8_lossy(&entry.name),
            entry.time,
            String::from_utf8_lossy(&entry.message)
        );
    }
    Ok(())
}
