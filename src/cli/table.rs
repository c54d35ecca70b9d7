//! The one definition of the command line: every subcommand with its usage lines, its
//! options (one line of help each), what its arguments are, an example and its exit
//! codes. Help (`reftablefs help CMD`, `CMD -h`, `CMD --help`), the usage printed on
//! misuse, the shell completions and the man page are all generated from [`COMMANDS`]
//! (see `gen`), so they cannot drift apart; `tests/cli_help.rs` checks that every
//! option listed here is accepted and that every option a parser takes is listed.
//!
//! Pure data, with no reference to the code that runs a command (`commands::runner`
//! does), so that `tests/cli_help.rs` can include this file and hold the binary to it.
//!
//! An option's `spelling` is written as git's `-h` output writes it, and is parsed for
//! completions: alternatives separated by `, ` (`-v, --verbose`), a value after `=` or a
//! space (`--format=<format>`, `-m <reason>`), and `--[no-]x` for a negatable flag.

/// One option of a command.
#[derive(Debug)]
pub struct Opt {
    /// As git's `-h` shows it: `-d, --dereference`, `--format=<format>`, `--[no-]progress`.
    pub spelling: &'static str,
    /// One line.
    pub help: &'static str,
}

/// What a command's non-option arguments are (for completions and the man page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operands {
    /// No arguments.
    None,
    /// Ref names of the current repository.
    Refs,
    /// Files.
    Files,
    /// Directories (a git dir, a mount point).
    Dirs,
    /// Mount points of reftablefs mounts.
    Mounts,
    /// Command names (`help`).
    Commands,
    /// Shell names (`completions`).
    Shells,
}

/// One subcommand.
#[derive(Debug)]
pub struct Command {
    pub name: &'static str,
    /// One line, lower case, no final period (as git's command list).
    pub summary: &'static str,
    /// The synopsis lines, after `reftablefs NAME `.
    pub usage: &'static [&'static str],
    /// A paragraph: what it does, the git command it mirrors.
    pub description: &'static str,
    pub options: &'static [Opt],
    /// Words taken before the options (`reflog show`, `reflog exists`).
    pub words: &'static [&'static str],
    pub operands: Operands,
    /// (command line, what it does).
    pub examples: &'static [(&'static str, &'static str)],
    /// Exit codes besides 0, 128 and 129 (which every command shares).
    pub exit_codes: &'static [(u8, &'static str)],
}

/// Options taken before the command, as git's.
pub const GLOBAL_OPTIONS: &[Opt] = &[
    Opt {
        spelling: "-C <path>",
        help: "run as if started in <path> (repeatable; each is relative to the previous)",
    },
    Opt {
        spelling: "--git-dir=<path>",
        help: "use the repository at <path> (as GIT_DIR)",
    },
    Opt {
        spelling: "-c <name>=<value>",
        help: "set a configuration value for this command (as git -c)",
    },
    Opt {
        spelling: "-h, --help",
        help: "show the list of commands",
    },
    Opt {
        spelling: "--version",
        help: "print the version",
    },
];

/// Exit codes every command shares.
pub const COMMON_EXIT_CODES: &[(u8, &str)] = &[
    (0, "success"),
    (128, "fatal error (\"fatal: ...\" on stderr)"),
    (
        129,
        "usage error: unknown option or wrong arguments (the usage is printed)",
    ),
];

/// Every subcommand, in the order `reftablefs help` lists them.
pub const COMMANDS: &[Command] = &[
    Command {
        name: "show-ref",
        summary: "list references in the repository (as git show-ref)",
        usage: &[
            "[--head] [-d | --dereference] [-s | --hash] [--branches] [--tags] [-q | --quiet] [--] [<pattern>...]",
            "--verify [-q | --quiet] [-d | --dereference] [-s | --hash] [--] [<ref>...]",
            "--exists <ref>",
        ],
        description: "Prints each ref as '<oid> <refname>', in name order, with symrefs resolved. \
            A pattern matches a ref whose name ends with it at a '/' boundary ('main' matches \
            refs/heads/main). Output and exit codes are git show-ref's.",
        options: &[
            Opt { spelling: "--head", help: "show the HEAD reference, even if it would be filtered out" },
            Opt { spelling: "-d, --dereference", help: "dereference tags into object IDs (adds '<refname>^{}' lines)" },
            Opt { spelling: "-s, --hash", help: "only show the object ID, not the reference name" },
            Opt { spelling: "--branches, --heads", help: "only show branches (refs/heads/)" },
            Opt { spelling: "--tags", help: "only show tags (refs/tags/)" },
            Opt { spelling: "-q, --quiet", help: "do not print results to stdout (useful with --verify)" },
            Opt { spelling: "--verify", help: "stricter reference checking, requires exact ref path" },
            Opt { spelling: "--exists <ref>", help: "check for reference existence without resolving" },
        ],
        words: &[],
        operands: Operands::Refs,
        examples: &[("reftablefs show-ref --branches", "list every branch with its object ID")],
        exit_codes: &[
            (1, "nothing matched (or --verify of a missing ref with --quiet)"),
            (2, "--exists: the reference does not exist"),
        ],
    },
    Command {
        name: "for-each-ref",
        summary: "output information on each ref (as git for-each-ref)",
        usage: &["[--format=<format>] [--sort=<key>] [--count=<n>] [--include-root-refs] [<pattern>...]"],
        description: "Lists refs/ (and root refs with --include-root-refs) in name order, formatted. \
            Atoms: %(refname), %(refname:short), %(objectname), %(objectname:short), \
            %(objecttype), %(symref), %(*objectname), %(*objecttype), %(HEAD); %% and %xx escapes. \
            The default format is '%(objectname) %(objecttype)<TAB>%(refname)'. A pattern matches a \
            ref equal to it, under it up to a '/', or as a glob ('*' does not cross '/').",
        options: &[
            Opt { spelling: "--format=<format>", help: "format to use for the output" },
            Opt { spelling: "--sort=<key>", help: "field name to sort on: [-]refname or [-]objectname" },
            Opt { spelling: "--count=<n>", help: "show only <n> matched refs" },
            Opt { spelling: "--include-root-refs", help: "also include HEAD ref and pseudorefs" },
        ],
        words: &[],
        operands: Operands::Refs,
        examples: &[(
            "reftablefs for-each-ref --format='%(refname:short)' refs/heads",
            "list branch names",
        )],
        exit_codes: &[],
    },
    Command {
        name: "resolve",
        summary: "print the object ID of ref names (as git rev-parse NAME)",
        usage: &["[--stdin] [--symbolic-full-name] <name>..."],
        description: "Resolves each name with git's rules (<name>, refs/<name>, refs/tags/<name>, \
            refs/heads/<name>, refs/remotes/<name>, refs/remotes/<name>/HEAD), following \
            symrefs up to 5 hops, with git's warnings. Full hex object IDs are printed as given \
            and '@' is HEAD; revision syntax (~, ^, @{...}) is not supported.",
        options: &[
            Opt { spelling: "--stdin", help: "also read names from stdin, one per line" },
            Opt { spelling: "--symbolic-full-name", help: "print the full ref name (after following symrefs) instead of the object ID" },
        ],
        words: &[],
        operands: Operands::Refs,
        examples: &[("reftablefs resolve HEAD main", "print the object IDs of HEAD and branch main")],
        exit_codes: &[],
    },
    Command {
        name: "update-ref",
        summary: "update the object name stored in a ref safely (as git update-ref)",
        usage: &[
            "[<options>] -d <refname> [<old-oid>]",
            "[<options>]    <refname> <new-oid> [<old-oid>]",
            "[<options>] --stdin [-z]",
        ],
        description: "Writes one transaction as one new table on the stack. With --stdin, reads \
            git's update-ref command language (update, create, delete, verify, symref-update, \
            symref-create, symref-delete, symref-verify, option, start, prepare, commit, abort). \
            As git, a new object ID must name an existing object and a branch (refs/heads/*, \
            HEAD) must point at a commit; otherwise nothing is written.",
        options: &[
            Opt { spelling: "-m <reason>", help: "reason of the update" },
            Opt { spelling: "-d", help: "delete the reference" },
            Opt { spelling: "--no-deref", help: "update <refname> not the one it points to" },
            Opt { spelling: "-z", help: "stdin has NUL-terminated arguments" },
            Opt { spelling: "--stdin", help: "read updates from stdin" },
            Opt { spelling: "--create-reflog", help: "create a reflog" },
        ],
        words: &[],
        operands: Operands::Refs,
        examples: &[
            ("reftablefs update-ref -m 'reset' refs/heads/topic HEAD", "point branch topic at HEAD's commit"),
            ("printf 'delete refs/heads/old\\n' | reftablefs update-ref --stdin", "delete a branch through the command language"),
        ],
        exit_codes: &[],
    },
    Command {
        name: "reflog",
        summary: "show a ref's log, or check that one exists (as git reflog)",
        usage: &["[show] [--no-abbrev | --abbrev=<n>] [<ref>]", "exists <ref>"],
        description: "'show' (the default) prints '<abbrev-oid> <ref>@{<n>}: <message>', newest \
            first; <ref> defaults to HEAD and is expanded as git does. Abbreviations are 7 hex \
            digits (git lengthens ambiguous ones; use --no-abbrev to compare). 'exists' answers \
            with its exit code only.",
        options: &[
            Opt { spelling: "--no-abbrev", help: "show full object IDs" },
            Opt { spelling: "--abbrev=<n>", help: "abbreviate object IDs to <n> hex digits (at least 4)" },
        ],
        words: &["show", "exists"],
        operands: Operands::Refs,
        examples: &[("reftablefs reflog show --no-abbrev refs/heads/main", "the log of branch main with full IDs")],
        exit_codes: &[(1, "exists: the ref has no reflog")],
    },
    Command {
        name: "compact",
        summary: "compact the reftable stack (as git pack-refs)",
        usage: &["[--auto] [-v | --verbose]"],
        description: "Without --auto, merges every table into one; with --auto, only what git's \
            geometric rule asks for (factor reftable.geometricFactor, default 2).",
        options: &[
            Opt { spelling: "--auto", help: "compact only if the stack's geometry asks for it" },
            Opt { spelling: "-v, --verbose", help: "print 'tables: <before> -> <after>'" },
        ],
        words: &[],
        operands: Operands::None,
        examples: &[("reftablefs compact -v", "merge all tables and say how many there were")],
        exit_codes: &[(1, "the stack is locked by another writer (\"error: unable to compact stack: data is locked\")")],
    },
    Command {
        name: "verify",
        summary: "check the reftable stack and its refs (as git refs verify)",
        usage: &["[-v | --verbose]"],
        description: "Checks tables.list, every table (structure, order, checksums) and every \
            ref (names, symref targets, D/F conflicts), and reports problems with git's \
            'error:'/'warning:' wording.",
        options: &[Opt { spelling: "-v, --verbose", help: "name each table as it is checked" }],
        words: &[],
        operands: Operands::None,
        examples: &[("reftablefs verify", "check the current repository's stack")],
        exit_codes: &[(1, "a problem was found (printed on stderr)")],
    },
    Command {
        name: "migrate",
        summary: "convert a files-backend repository to reftable (as git refs migrate)",
        usage: &["[--dry-run] [--ref-format=reftable] [--no-reflogs] [--[no-]progress]"],
        description: "Builds a reftable stack from loose refs, packed-refs, root refs and reflogs, \
            then switches the repository over (extensions.refStorage = reftable). Without \
            reflogs the table is byte-identical to git 2.47's.",
        options: &[
            Opt { spelling: "--dry-run", help: "build the new store but leave the repository unchanged (prints where)" },
            Opt { spelling: "--ref-format=<format>", help: "the format to migrate to (only 'reftable')" },
            Opt { spelling: "--no-reflogs", help: "do not migrate reflogs (as git 2.47)" },
            Opt { spelling: "--[no-]progress", help: "force or suppress progress lines (default: when stderr is a terminal)" },
        ],
        words: &[],
        operands: Operands::None,
        examples: &[("reftablefs -C repo migrate --dry-run", "see what the migration would write")],
        exit_codes: &[],
    },
    Command {
        name: "dump",
        summary: "print or check every block and record of one table file",
        usage: &["[--verify] <file>"],
        description: "Prints the header, footer, every block and every record of a .ref table \
            (as git's test-tool dump-reftable); --verify checks it all and prints 'ok' or \
            the first problem.",
        options: &[Opt { spelling: "--verify", help: "check the whole table instead of printing it" }],
        words: &[],
        operands: Operands::Files,
        examples: &[(
            "reftablefs dump .git/reftable/0x000000000001-0x000000000001-01234567.ref",
            "print one table",
        )],
        exit_codes: &[(1, "--verify: the table is damaged (\"FAILED <file>: <reason>\")")],
    },
    Command {
        name: "mount",
        summary: "mount a reftable repository as git's files layout (FUSE)",
        usage: &["[--read-only] [--refs-only] [--no-kernel-passthrough] [--no-follow-cpu] [--daemon [--log=<file>]] [--batch-window=<ms>] [--batch-max=<n>] [--inode-cap=<n>] [--no-fsync] (<gitdir> <mountpoint> | --over <worktree>)"],
        description: "Serves <gitdir> on <mountpoint> as a complete files-backend git \
            directory: refs as loose refs, packed-refs and logs/ from the reftable stack, \
            everything else (objects, config, index, ...) passed through to <gitdir>, so \
            tools that only know the files layout work on it. Ref writes are batched into one \
            table per window. Runs in the foreground until unmounted (unmount, fusermount3 -u, \
            SIGINT, SIGTERM) unless --daemon.",
        options: &[
            Opt { spelling: "--read-only", help: "refuse every write (EROFS)" },
            Opt { spelling: "--refs-only", help: "serve the ref view alone, without the rest of <gitdir>" },
            Opt { spelling: "--no-kernel-passthrough", help: "forward reads and writes of passed-through files instead of kernel FUSE passthrough" },
            Opt { spelling: "--no-follow-cpu", help: "leave the request threads where the scheduler puts them (by default each moves to its client's CPU, no cross-CPU wake-up per request, unless that client moves away from it)" },
            Opt { spelling: "--daemon", help: "run in the background; return once the mount is ready" },
            Opt { spelling: "--log=<file>", help: "with --daemon, where log lines go (default $TMPDIR/reftablefs-mount.<pid>.log)" },
            Opt { spelling: "--batch-window=<ms>", help: "how long writes are gathered into one table (default 5)" },
            Opt { spelling: "--batch-max=<n>", help: "commit a batch once it holds <n> edits (default 10000)" },
            Opt { spelling: "--inode-cap=<n>", help: "names the mount keeps known to the kernel before it has the oldest dropped (default 131072, about 175 bytes each; at least 1024)" },
            Opt { spelling: "--no-fsync", help: "do not fsync tables and tables.list (faster, not crash safe)" },
            Opt { spelling: "--over", help: "with one operand <worktree>: mount on <worktree>/.git itself (the real directory stays reachable underneath; unmount gives it back)" },
        ],
        words: &[],
        operands: Operands::Dirs,
        examples: &[
            ("reftablefs mount --daemon repo/.git /mnt/repo", "mount in the background"),
            ("reftablefs mount --daemon --over repo", "every tool in repo/ sees a files-backend .git"),
        ],
        exit_codes: &[],
    },
    Command {
        name: "unmount",
        summary: "flush pending writes and unmount a reftablefs mount",
        usage: &["[--timeout=<seconds>] <mountpoint>"],
        description: "Commits every pending batch (an fsync of the mount's root), unmounts \
            with fusermount3 -u (a lazy unmount if that fails), then waits until the process \
            that served the mount has written what was left, compacted the stack, released \
            its locks and exited. Exits 0 only if all of that happened and the process said \
            it wrote everything; 128, saying which, when a pending update was not written, the \
            process did not exit within --timeout, or it ended with an error or was killed.",
        options: &[Opt { spelling: "--timeout=<seconds>", help: "how long to wait for the mount's process to exit (default 60)" }],
        words: &[],
        operands: Operands::Mounts,
        examples: &[("reftablefs unmount /mnt/repo", "flush, unmount, wait for the mount's process")],
        exit_codes: &[(1, "<mountpoint> is not mounted")],
    },
    Command {
        name: "exec",
        summary: "run one command where the repository's .git is the files view",
        usage: &["[-C <dir>] [--read-only] [--no-kernel-passthrough] [--no-follow-cpu] [--batch-window=<ms>] [--batch-max=<n>] [--inode-cap=<n>] [--no-fsync] [--log=<file>] [--] <command> [<args>...]"],
        description: "Finds the repository as git does (from <dir> or the current directory; a \
            linked worktree's common directory), then runs <command> in a private mount \
            namespace where that git directory is the files view (as mount --over makes \
            it), while every other process keeps the native reftable repository and sees \
            no mount. As root a new mount namespace; as an ordinary user a user namespace \
            with only your own uid and gid mapped (the kernel must allow unprivileged user \
            namespaces and FUSE in them, and /dev/fuse must be open to you; otherwise it \
            fails at once naming the setting). <command> keeps your credentials, \
            environment, terminal and process group; signals sent to exec are forwarded. \
            When it exits, every pending update is written and the view unmounted; exec \
            exits with its status (128+N when signal N killed it), or 128 when the view \
            cannot be made or an update was not written.",
        options: &[
            Opt { spelling: "-C <dir>", help: "find the repository from <dir> and run <command> there (repeatable; each is relative to the previous)" },
            Opt { spelling: "--read-only", help: "refuse every write through the view (EROFS)" },
            Opt { spelling: "--no-kernel-passthrough", help: "forward reads and writes of passed-through files instead of kernel FUSE passthrough" },
            Opt { spelling: "--no-follow-cpu", help: "leave the request threads where the scheduler puts them" },
            Opt { spelling: "--batch-window=<ms>", help: "how long writes are gathered into one table (default 5)" },
            Opt { spelling: "--batch-max=<n>", help: "commit a batch once it holds <n> edits (default 10000)" },
            Opt { spelling: "--inode-cap=<n>", help: "names the view keeps known to the kernel (default 131072; at least 1024)" },
            Opt { spelling: "--no-fsync", help: "do not fsync tables and tables.list (faster, not crash safe)" },
            Opt { spelling: "--log=<file>", help: "append the view's log lines to <file> and keep it (default: a temporary file, shown and kept only on failure)" },
        ],
        words: &[],
        operands: Operands::Files,
        examples: &[
            ("reftablefs exec -- cargo publish --dry-run", "libgit2 sees a files repository"),
            ("reftablefs exec -C ~/src/project -- $SHELL", "a shell where everything sees files"),
        ],
        exit_codes: &[
            (126, "<command> cannot be run"),
            (127, "<command> is not found"),
        ],
    },
    Command {
        name: "status",
        summary: "list this user's reftablefs mounts, or show what one is doing",
        usage: &["[--json] [<mountpoint>]"],
        description: "Without <mountpoint>, lists every reftablefs mount of this user \
            (repository, mount point, pid, mode) from /proc/self/mountinfo. With one, also the \
            mount's own report (pending edits, open batch age, last commit, conflicts and \
            refused writes, stale locks) read from <mountpoint>/.reftablefs/status, when the \
            mount serves it.",
        options: &[Opt { spelling: "--json", help: "machine-readable output (one JSON document)" }],
        words: &[],
        operands: Operands::Mounts,
        examples: &[("reftablefs status --json /mnt/repo", "one mount's state as JSON")],
        exit_codes: &[(1, "<mountpoint> is not a reftablefs mount")],
    },
    Command {
        name: "unlock",
        summary: "remove a stale tables.list.lock and what killed writers left behind",
        usage: &["[-f | --force] [--min-age=<seconds>] [-n | --dry-run] [<gitdir>]"],
        description: "Diagnoses tables.list.lock (age, processes holding it open) and removes \
            it only when no process holds it open and it is at least --min-age seconds old; \
            then, holding the list lock, removes locks of tables the list no longer names, \
            stale locks of listed tables and leftover temporary tables. Says what it did.",
        options: &[
            Opt { spelling: "-f, --force", help: "remove the lock whatever its age (never a lock held open)" },
            Opt { spelling: "--min-age=<seconds>", help: "how old a lock nobody holds must be to be removed (default 10)" },
            Opt { spelling: "-n, --dry-run", help: "say what would be removed, remove nothing" },
        ],
        words: &[],
        operands: Operands::Dirs,
        examples: &[("reftablefs unlock --dry-run repo/.git", "see whether a stale lock blocks the stack")],
        exit_codes: &[(1, "a lock was kept (held open, or too young)")],
    },
    Command {
        name: "completions",
        summary: "print a shell completion script (bash, zsh or fish)",
        usage: &["<shell>"],
        description: "Prints the completion script for <shell>, generated from the same \
            definition as this help. 'make install' installs all three.",
        options: &[],
        words: &["bash", "zsh", "fish"],
        operands: Operands::Shells,
        examples: &[("source <(reftablefs completions bash)", "enable completion in the current bash")],
        exit_codes: &[],
    },
    Command {
        name: "man",
        summary: "print the reftablefs(1) man page (roff)",
        usage: &[""],
        description: "Prints the manual page, generated from the same definition as this help.",
        options: &[],
        words: &[],
        operands: Operands::None,
        examples: &[("reftablefs man | man -l -", "read the manual")],
        exit_codes: &[],
    },
    Command {
        name: "help",
        summary: "show the list of commands, or one command's help",
        usage: &["[<command>]"],
        description: "Without <command>, lists the commands; with one, prints its help (the same \
            as 'reftablefs <command> --help').",
        options: &[],
        words: &[],
        operands: Operands::Commands,
        examples: &[("reftablefs help update-ref", "the options of update-ref")],
        exit_codes: &[(1, "no such command")],
    },
];

/// The command called `name`.
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// One alternative of an option's spelling, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptName {
    /// `-m`, `--format`, `--progress`.
    pub name: String,
    /// `<format>` when the option takes a value.
    pub value: Option<String>,
    /// Whether the value is attached with `=` (`--format=<f>`).
    pub equals: bool,
}

impl Opt {
    /// Every name this option answers to (`--[no-]x` gives `--x` and `--no-x`).
    pub fn names(&self) -> Vec<OptName> {
        let mut out = Vec::new();
        for alt in self.spelling.split(", ") {
            let (name, value, equals) = match alt.find(['=', ' ']) {
                Some(i) => (
                    alt.get(..i).unwrap_or(alt),
                    alt.get(i + 1..).map(str::to_owned),
                    alt.get(i..i + 1) == Some("="),
                ),
                None => (alt, None, false),
            };
            if let Some(rest) = name.strip_prefix("--[no-]") {
                for n in [format!("--{rest}"), format!("--no-{rest}")] {
                    out.push(OptName {
                        name: n,
                        value: value.clone(),
                        equals,
                    });
                }
            } else {
                out.push(OptName {
                    name: name.to_owned(),
                    value,
                    equals,
                });
            }
        }
        out
    }
}
