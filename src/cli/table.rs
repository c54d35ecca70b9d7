//! The one definition of the command line: every subcommand with its usage lines, its
//! options (one line of help each), what its arguments are, an example and its exit
//! codes. The parser (`parse`) reads options from it; help (`reftablefs help CMD`,
//! `CMD -h`, `CMD --help`), the usage printed on misuse, the shell completions and the
//! man page (`help`, `gen`) are generated from it, so none of them can drift apart.
//!
//! Pure data, with no reference to the code that runs a command (`commands::runner`
//! does), so that `tests/cli_help.rs` can include this file and hold the binary to it.
//!
//! An option's `spelling` is written as git's `-h` output writes it, and is parsed for
//! the parser and the completions ([`Opt::names`]): alternatives separated by `, `
//! (`-v, --verbose`), a value after `=` or a space (`--format=<format>`, `-m <reason>`),
//! an optional value as `[=<n>]` (`--hash[=<n>]`), and `--[no-]x` for an option that
//! `--no-x` turns off again. Each option has an [`Id`], which is what the code running a
//! command asks the parsed command line for.

/// What an option means, as the code running a command asks for it. Several commands may
/// share one (`Verbose`); within one command each option has its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Id {
    // Global options.
    ChangeDir,
    GitDir,
    Config,
    Help,
    Version,
    // show-ref
    Head,
    Dereference,
    Hash,
    Branches,
    Tags,
    Quiet,
    Verify,
    Exists,
    // for-each-ref
    Format,
    Sort,
    Count,
    IncludeRootRefs,
    // resolve, update-ref
    Stdin,
    SymbolicFullName,
    Message,
    Delete,
    NoDeref,
    NulTerminated,
    CreateReflog,
    // reflog
    NoAbbrev,
    Abbrev,
    // compact, verify, migrate, unlock
    Auto,
    Verbose,
    DryRun,
    RefFormat,
    NoReflogs,
    Progress,
    Force,
    MinAge,
    // mount, unmount, status
    ReadOnly,
    RefsOnly,
    NoKernelPassthrough,
    NoFollowCpu,
    IoUring,
    Daemon,
    Log,
    Debug,
    BatchWindow,
    BatchMax,
    InodeCap,
    Layout,
    NoFsync,
    Over,
    MountOptions,
    Timeout,
    Json,
}

/// One option of a command.
#[derive(Clone, Copy, Debug)]
pub struct Opt {
    pub id: Id,
    /// As git's `-h` shows it: `-d, --dereference`, `--format=<format>`, `--[no-]progress`.
    pub spelling: &'static str,
    /// One line.
    pub help: &'static str,
    /// Its value is a number, as git's `OPT_INTEGER`: anything else is refused with git's
    /// "option `count' expects a numerical value" (exit 129).
    pub number: bool,
}

/// An option (see [`Opt`]).
pub const fn opt(id: Id, spelling: &'static str, help: &'static str) -> Opt {
    Opt {
        id,
        spelling,
        help,
        number: false,
    }
}

/// An option whose value is a number (see [`Opt::number`]).
pub const fn num(id: Id, spelling: &'static str, help: &'static str) -> Opt {
    Opt {
        id,
        spelling,
        help,
        number: true,
    }
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

/// An option whose value is a comma-separated list of the command's other options, as
/// mount(8), fstab and FUSE file systems (sshfs, gocryptfs, rclone) take `-o`: each item
/// is a long option without its `--` and with `_` for `-` (`batch_window=5`,
/// `no_fsync`), or an alias; names are whole, never abbreviated.
#[derive(Debug)]
pub struct SubOptions {
    /// The option that takes the list (`-o`).
    pub option: Id,
    /// (item, the long option it stands for): `ro` is `read-only`.
    pub aliases: &'static [(&'static str, &'static str)],
    /// Items accepted and ignored (mount(8)'s own options).
    pub ignored: &'static [&'static str],
    /// Prefixes of items accepted and ignored (`x-` for `x-systemd.automount`).
    pub ignored_prefixes: &'static [&'static str],
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
    /// Words that may come first, before the options (`reflog show`, `reflog exists`;
    /// `completions bash`).
    pub words: &'static [&'static str],
    /// Options may also follow operands (`dump FILE --verify`), as git's parse-options
    /// lets them; otherwise the first operand ends the options (`show-ref main -q` looks
    /// for a ref named `-q`), as each command parsed its line before.
    pub options_anywhere: bool,
    /// The option taking the others as a comma-separated list (`mount -o`), if any.
    pub sub_options: Option<&'static SubOptions>,
    pub operands: Operands,
    /// (command line, what it does).
    pub examples: &'static [(&'static str, &'static str)],
    /// Exit codes besides 0, 128 and 129 (which every command shares).
    pub exit_codes: &'static [(u8, &'static str)],
}

/// Options taken before the command, as git's (whole names only: git does not
/// abbreviate these either).
pub const GLOBAL_OPTIONS: &[Opt] = &[
    opt(
        Id::ChangeDir,
        "-C <path>",
        "run as if started in <path> (repeatable; each is relative to the previous)",
    ),
    opt(
        Id::GitDir,
        "--git-dir=<path>",
        "use the repository at <path> (as GIT_DIR)",
    ),
    opt(
        Id::Config,
        "-c <name>=<value>",
        "set a configuration value for this command (as git -c)",
    ),
    opt(Id::Help, "-h, --help", "show the list of commands"),
    opt(Id::Version, "--version", "print the version"),
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

/// `mount -o`: how mount(8) and fstab give the mount's options.
pub const MOUNT_SUB_OPTIONS: SubOptions = SubOptions {
    option: Id::MountOptions,
    aliases: &[("ro", "read-only")],
    ignored: &[
        "rw", "defaults", "auto", "noauto", "user", "users", "nouser", "exec", "noexec", "suid",
        "nosuid", "dev", "nodev", "_netdev", "nofail",
    ],
    ignored_prefixes: &["x-"],
};

/// Every subcommand, in the order `reftablefs help` lists them.
pub const COMMANDS: &[Command] = &[
    Command {
        name: "show-ref",
        summary: "list references in the repository (as git show-ref)",
        usage: &[
            "[--head] [-d | --dereference] [-s | --hash[=<n>]] [--branches] [--tags] [-q | --quiet] [--] [<pattern>...]",
            "--verify [-q | --quiet] [-d | --dereference] [-s | --hash[=<n>]] [--] [<ref>...]",
            "--exists <ref>",
        ],
        description: "Prints each ref as '<oid> <refname>', in name order, with symrefs resolved. \
            A pattern matches a ref whose name ends with it at a '/' boundary ('main' matches \
            refs/heads/main). Output and exit codes are git show-ref's.",
        options: &[
            opt(Id::Head, "--head", "show the HEAD reference, even if it would be filtered out"),
            opt(Id::Dereference, "-d, --dereference", "dereference tags into object IDs (adds '<refname>^{}' lines)"),
            num(Id::Hash, "-s, --hash[=<n>]", "only show the object ID, not the reference name (its first <n> hex digits)"),
            opt(Id::Branches, "--branches, --heads", "only show branches (refs/heads/)"),
            opt(Id::Tags, "--tags", "only show tags (refs/tags/)"),
            opt(Id::Quiet, "-q, --quiet", "do not print results to stdout (useful with --verify)"),
            opt(Id::Verify, "--verify", "stricter reference checking, requires exact ref path"),
            opt(Id::Exists, "--exists <ref>", "check for reference existence without resolving"),
        ],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
            opt(Id::Format, "--format=<format>", "format to use for the output"),
            opt(Id::Sort, "--sort=<key>", "field name to sort on: [-]refname or [-]objectname"),
            num(Id::Count, "--count=<n>", "show only <n> matched refs"),
            opt(Id::IncludeRootRefs, "--include-root-refs", "also include HEAD ref and pseudorefs"),
        ],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
            opt(Id::Stdin, "--stdin", "also read names from stdin, one per line"),
            opt(Id::SymbolicFullName, "--symbolic-full-name", "print the full ref name (after following symrefs) instead of the object ID"),
        ],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
            opt(Id::Message, "-m <reason>", "reason of the update"),
            opt(Id::Delete, "-d", "delete the reference"),
            opt(Id::NoDeref, "--no-deref", "update <refname> not the one it points to"),
            opt(Id::NulTerminated, "-z", "stdin has NUL-terminated arguments"),
            opt(Id::Stdin, "--stdin", "read updates from stdin"),
            opt(Id::CreateReflog, "--create-reflog", "create a reflog"),
        ],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
            opt(Id::NoAbbrev, "--no-abbrev", "show full object IDs"),
            opt(Id::Abbrev, "--abbrev=<n>", "abbreviate object IDs to <n> hex digits (at least 4)"),
        ],
        words: &["show", "exists"],
        options_anywhere: false,
        sub_options: None,
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
            opt(Id::Auto, "--auto", "compact only if the stack's geometry asks for it"),
            opt(Id::Verbose, "-v, --verbose", "print 'tables: <before> -> <after>'"),
        ],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
        options: &[opt(Id::Verbose, "-v, --verbose", "name each table as it is checked")],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
            opt(Id::DryRun, "--dry-run", "build the new store but leave the repository unchanged (prints where)"),
            opt(Id::RefFormat, "--ref-format=<format>", "the format to migrate to (only 'reftable')"),
            opt(Id::NoReflogs, "--no-reflogs", "do not migrate reflogs (as git 2.47)"),
            opt(Id::Progress, "--[no-]progress", "force or suppress progress lines (default: when stderr is a terminal)"),
        ],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
        options: &[opt(Id::Verify, "--verify", "check the whole table instead of printing it")],
        words: &[],
        options_anywhere: true,
        sub_options: None,
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
        usage: &["[--read-only] [--refs-only] [--layout=<loose|packed>] [--no-kernel-passthrough] [--no-follow-cpu] [--daemon [--log=<file>]] [--debug] [--batch-window=<ms>] [--batch-max=<n>] [--inode-cap=<n>] [--no-fsync] [-o <option>[,<option>...]] (<gitdir> <mountpoint> | --over <worktree> [<worktree>/.git])"],
        description: "Serves <gitdir> on <mountpoint> as a complete files-backend git \
            directory: refs as loose refs, packed-refs and logs/ from the reftable stack, \
            everything else (objects, config, index, ...) passed through to <gitdir>, so \
            tools that only know the files layout work on it. Ref writes are batched into one \
            table per window. Runs in the foreground until unmounted (unmount, fusermount3 -u, \
            SIGINT, SIGTERM) unless --daemon. The layout: loose (the default) shows every ref \
            as a loose file, for tools that read a ref's file by name (prompts and build \
            scripts reading .git/refs/heads/<branch>, IDEs watching ref files); packed shows \
            the repository as after git gc, every ref in packed-refs and loose files only for \
            the root refs, symrefs and refs written through the mount since, for tools that \
            list many refs (git 2.39's for-each-ref, branch -a, describe and the prompt read \
            one file instead of one per ref). Either way git's pack-refs through the mount \
            packs refs as in a files .git.",
        options: &[
            opt(Id::ReadOnly, "--read-only", "refuse every write (EROFS)"),
            opt(Id::RefsOnly, "--refs-only", "serve the ref view alone, without the rest of <gitdir>"),
            opt(Id::Layout, "--layout=<loose|packed>", "loose: every ref a loose file (default; tools that read ref files by name); packed: as after git gc, refs in packed-refs only, loose files for refs written since (tools that list many refs)"),
            opt(Id::NoKernelPassthrough, "--no-kernel-passthrough", "forward reads and writes of passed-through files instead of kernel FUSE passthrough"),
            opt(Id::NoFollowCpu, "--no-follow-cpu", "leave the request threads where the scheduler puts them (by default each moves to its client's CPU, no cross-CPU wake-up per request, unless that client moves away from it)"),
            opt(Id::IoUring, "--io-uring", "serve requests over io_uring when the kernel offers it (Linux 6.14+, the fuse module's enable_uring on): a queue per CPU, answered on the client's CPU (unpinned git for-each-ref over loose refs 0.39x the /dev/fuse time in docs/benchmarks.md); else /dev/fuse. While the mount is stopped (SIGSTOP, a debugger; it ignores ^Z) its clients cannot be killed (with /dev/fuse they can)"),
            opt(Id::Daemon, "--daemon", "run in the background; return once the mount is ready"),
            opt(Id::Log, "--log=<file>", "with --daemon, where log lines go (default $TMPDIR/reftablefs-mount.<pid>.log)"),
            opt(Id::Debug, "--debug", "log debug lines too, the mount's and fuser's (else the level RUST_LOG names, default info)"),
            opt(Id::BatchWindow, "--batch-window=<ms>", "how long writes are gathered into one table (default 5)"),
            opt(Id::BatchMax, "--batch-max=<n>", "commit a batch once it holds <n> edits (default 10000)"),
            opt(Id::InodeCap, "--inode-cap=<n>", "names the mount keeps known to the kernel before it has the oldest dropped (default 131072, about 175 bytes each; at least 1024)"),
            opt(Id::NoFsync, "--no-fsync", "do not fsync tables and tables.list (faster, not crash safe)"),
            opt(Id::Over, "--over", "with the operand <worktree> (and, as fstab gives it, <worktree>/.git): mount on <worktree>/.git itself (the real directory stays reachable underneath; unmount gives it back)"),
            opt(Id::MountOptions, "-o <option>[,<option>...]", "the options above as mount(8) and fstab give them: each without '--', '_' for '-' (batch_window=5, no_fsync, over; ro for read_only); mount(8)'s own (rw, defaults, nosuid, noauto, user, x-*, ...) are ignored"),
        ],
        words: &[],
        options_anywhere: true,
        sub_options: Some(&MOUNT_SUB_OPTIONS),
        operands: Operands::Dirs,
        examples: &[
            ("reftablefs mount --daemon repo/.git /mnt/repo", "mount in the background"),
            ("reftablefs mount --daemon --over repo", "every tool in repo/ sees a files-backend .git"),
            ("reftablefs mount -o ro,batch_window=50 repo/.git /mnt/repo", "mount read-only, the options as mount(8) gives them"),
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
        options: &[opt(Id::Timeout, "--timeout=<seconds>", "how long to wait for the mount's process to exit (default 60)")],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
            opt(Id::ChangeDir, "-C <dir>", "find the repository from <dir> and run <command> there (repeatable; each is relative to the previous)"),
            opt(Id::ReadOnly, "--read-only", "refuse every write through the view (EROFS)"),
            opt(Id::NoKernelPassthrough, "--no-kernel-passthrough", "forward reads and writes of passed-through files instead of kernel FUSE passthrough"),
            opt(Id::NoFollowCpu, "--no-follow-cpu", "leave the request threads where the scheduler puts them"),
            opt(Id::IoUring, "--io-uring", "serve requests over io_uring when the kernel offers it (see mount --help)"),
            opt(Id::BatchWindow, "--batch-window=<ms>", "how long writes are gathered into one table (default 5)"),
            opt(Id::BatchMax, "--batch-max=<n>", "commit a batch once it holds <n> edits (default 10000)"),
            opt(Id::InodeCap, "--inode-cap=<n>", "names the view keeps known to the kernel (default 131072; at least 1024)"),
            opt(Id::NoFsync, "--no-fsync", "do not fsync tables and tables.list (faster, not crash safe)"),
            opt(Id::Log, "--log=<file>", "append the view's log lines to <file> and keep it (default: a temporary file, shown and kept only on failure)"),
        ],
        words: &[],
        // The first operand (<command>) ends the options: the rest are its own.
        options_anywhere: false,
        sub_options: None,
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
        options: &[opt(Id::Json, "--json", "machine-readable output (one JSON document)")],
        words: &[],
        options_anywhere: true,
        sub_options: None,
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
            opt(Id::Force, "-f, --force", "remove the lock whatever its age (never a lock held open)"),
            opt(Id::MinAge, "--min-age=<seconds>", "how old a lock nobody holds must be to be removed (default 10)"),
            opt(Id::DryRun, "-n, --dry-run", "say what would be removed, remove nothing"),
        ],
        words: &[],
        options_anywhere: false,
        sub_options: None,
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
        options_anywhere: false,
        sub_options: None,
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
        options_anywhere: false,
        sub_options: None,
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
        options_anywhere: false,
        sub_options: None,
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
    /// Whether the value may be left out (`--hash[=<n>]`, `-s[<n>]`): then only an
    /// attached one counts.
    pub optional: bool,
    /// `--no-x` of a `--[no-]x` option.
    pub negation: bool,
}

/// One alternative of a spelling, split: its dashes (`-`, `--`), its bare name (`d`,
/// `dereference`, `progress` of `--[no-]progress`), what follows the name (`=<format>`,
/// ` <reason>`, `[=<n>]`, or nothing), and whether it was written `--[no-]`.
fn split_alt(alt: &'static str) -> (&'static str, &'static str, &'static str, bool) {
    let (negatable, dashes, body) = match alt.strip_prefix("--[no-]") {
        Some(body) => (true, "--", body),
        None if alt.starts_with("--") => (false, "--", alt.get(2..).unwrap_or_default()),
        None => (false, "-", alt.get(1..).unwrap_or_default()),
    };
    let cut = body.find(['=', ' ', '[']).unwrap_or(body.len());
    let (bare, rest) = body.split_at(cut);
    (dashes, bare, rest, negatable)
}

impl Opt {
    /// Every name this option answers to (`--[no-]x` gives `--x` and `--no-x`). A value
    /// written on one alternative is the option's (`-s, --hash[=<n>]`: `-s` takes it too).
    pub fn names(&self) -> Vec<OptName> {
        let alts = || self.spelling.split(", ").map(split_alt);
        // The value, wherever it is written: (argh, attached with '=', optional).
        let value = alts().find_map(|(_, _, rest, _)| {
            Some(match rest.strip_prefix("[=") {
                Some(v) => (v.strip_suffix(']').unwrap_or(v).to_owned(), true, true),
                None => (
                    rest.get(1..).filter(|v| !v.is_empty())?.to_owned(),
                    rest.starts_with('='),
                    false,
                ),
            })
        });
        let mut out = Vec::new();
        for (dashes, bare, _, negatable) in alts() {
            let (v, written_equals, optional) = match &value {
                Some((v, e, o)) => (Some(v.clone()), *e, *o),
                None => (None, false, false),
            };
            // A short name takes its value attached or as the next word, never with '='.
            let equals = written_equals && dashes == "--";
            let one = |name: String, negation: bool| OptName {
                name,
                value: if negation { None } else { v.clone() },
                equals: equals && !negation,
                optional,
                negation,
            };
            out.push(one(format!("{dashes}{bare}"), false));
            if negatable {
                out.push(one(format!("--no-{bare}"), true));
            }
        }
        out
    }

    /// Whether `--no-x` turns this option off (it is spelled `--[no-]x`).
    pub fn negatable(&self) -> bool {
        self.spelling.contains("--[no-]")
    }

    /// The long names, without `--` (`--[no-]x` gives `x`).
    pub fn longs(&self) -> impl Iterator<Item = &'static str> {
        self.spelling
            .split(", ")
            .map(split_alt)
            .filter(|(dashes, ..)| *dashes == "--")
            .map(|(_, bare, ..)| bare)
    }

    /// The short name (`-d` gives `d`).
    pub fn short(&self) -> Option<u8> {
        self.spelling
            .split(", ")
            .map(split_alt)
            .find_map(|(dashes, bare, ..)| match bare.as_bytes() {
                [c] if dashes == "-" => Some(*c),
                _ => None,
            })
    }

    /// Whether the option takes a value: `None` no, `Some(false)` always, `Some(true)`
    /// only when attached (`--hash=7`, `-s7`).
    pub fn takes_value(&self) -> Option<bool> {
        self.names()
            .into_iter()
            .find(|n| n.value.is_some())
            .map(|n| n.optional)
    }
}
