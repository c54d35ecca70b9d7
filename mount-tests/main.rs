//! Real-mount tests for `reftablefs mount` (issues 4 and 5), one test binary with a module
//! per area. Run with `make mount-test` (or `REFTABLEFS_MOUNT_TESTS=1 cargo test --test
//! mount -- [filter]`). Tests that need a mount print a SKIP line when /dev/fuse,
//! fusermount3 or the `mount` subcommand is missing, or outside `make mount-test`.
//! See `harness.rs` for the watchdog and the always-unmount guard.

#[macro_use]
mod harness;
mod clients;
mod crash;
mod differential;
mod expected;
mod lifecycle;
mod packaging;
mod read_path;
mod status;
mod times;
mod worktrees;
mod write_path;

use harness::Test;

const TESTS: &[Test] = &[
    Test {
        name: "expected::generator_matches_files_backend",
        needs_mount: false,
        timeout_secs: 120,
        run: expected::generator_matches_files_backend,
    },
    Test {
        name: "expected::scenario_same_shape_in_reftable",
        needs_mount: false,
        timeout_secs: 120,
        run: expected::scenario_same_shape_in_reftable,
    },
    Test {
        name: "read_path::tree_matches_git",
        needs_mount: true,
        timeout_secs: 120,
        run: read_path::tree_matches_git,
    },
    Test {
        name: "read_path::updates_visible_within_bound",
        needs_mount: true,
        timeout_secs: 120,
        run: read_path::updates_visible_within_bound,
    },
    Test {
        name: "read_path::no_torn_reads",
        needs_mount: true,
        timeout_secs: 180,
        run: read_path::no_torn_reads,
    },
    Test {
        name: "read_path::length_changes_never_truncate",
        needs_mount: true,
        timeout_secs: 180,
        run: read_path::length_changes_never_truncate,
    },
    Test {
        name: "read_path::corrupt_table_eio_then_recovers",
        needs_mount: true,
        timeout_secs: 120,
        run: read_path::corrupt_table_eio_then_recovers,
    },
    Test {
        name: "read_path::hundred_k_refs",
        needs_mount: true,
        timeout_secs: 300,
        run: read_path::hundred_k_refs,
    },
    Test {
        name: "write_path::replay_update_existing",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::replay_update_existing,
    },
    Test {
        name: "write_path::replay_create_in_new_dirs",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::replay_create_in_new_dirs,
    },
    Test {
        name: "write_path::replay_delete",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::replay_delete,
    },
    Test {
        name: "write_path::replay_head_symref_change",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::replay_head_symref_change,
    },
    Test {
        name: "write_path::replay_pack_refs_prune_noop",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::replay_pack_refs_prune_noop,
    },
    Test {
        name: "write_path::replay_branch_rename",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::replay_branch_rename,
    },
    Test {
        name: "write_path::parallel_writers_and_git",
        needs_mount: true,
        timeout_secs: 300,
        run: write_path::parallel_writers_and_git,
    },
    Test {
        name: "write_path::bad_inputs_change_nothing",
        needs_mount: true,
        timeout_secs: 180,
        run: write_path::bad_inputs_change_nothing,
    },
    Test {
        name: "write_path::kill9_keeps_fsynced_updates",
        needs_mount: true,
        timeout_secs: 180,
        run: write_path::kill9_keeps_fsynced_updates,
    },
    Test {
        name: "write_path::files_backend_git_through_mount",
        needs_mount: true,
        timeout_secs: 180,
        run: write_path::files_backend_git_through_mount,
    },
    Test {
        name: "lifecycle::mount_failures_say_why",
        needs_mount: true,
        timeout_secs: 120,
        run: lifecycle::mount_failures_say_why,
    },
    Test {
        name: "lifecycle::daemon_then_unmount",
        needs_mount: true,
        timeout_secs: 120,
        run: lifecycle::daemon_then_unmount,
    },
    Test {
        name: "lifecycle::sigint_flushes_and_unmounts",
        needs_mount: true,
        timeout_secs: 120,
        run: lifecycle::sigint_flushes_and_unmounts,
    },
    Test {
        name: "lifecycle::sha256_repository",
        needs_mount: true,
        timeout_secs: 120,
        run: lifecycle::sha256_repository,
    },
    Test {
        name: "write_path::conflict_with_git_first_committer_wins",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::conflict_with_git_first_committer_wins,
    },
    Test {
        name: "write_path::orphaned_lock_stays_until_unlinked",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::orphaned_lock_stays_until_unlinked,
    },
    Test {
        name: "differential::random_client_sequences",
        needs_mount: true,
        timeout_secs: 240,
        run: differential::random_client_sequences,
    },
    Test {
        name: "write_path::case1_head_and_referent_in_one_batch",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::case1_head_and_referent_in_one_batch,
    },
    Test {
        name: "write_path::case2_lock_then_foreign_update_fails_rename",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::case2_lock_then_foreign_update_fails_rename,
    },
    Test {
        name: "write_path::case3_conflict_at_commit_reaches_the_stager",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::case3_conflict_at_commit_reaches_the_stager,
    },
    Test {
        name: "write_path::case4_reflogs_like_files_backend",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::case4_reflogs_like_files_backend,
    },
    Test {
        name: "write_path::case5_non_ref_root_files_and_rw_reflogs",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::case5_non_ref_root_files_and_rw_reflogs,
    },
    Test {
        name: "write_path::case7_refusals",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::case7_refusals,
    },
    Test {
        name: "write_path::scratch_files_are_bounded",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::scratch_files_are_bounded,
    },
    Test {
        name: "write_path::stale_stack_lock_fails_fast",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::stale_stack_lock_fails_fast,
    },
    Test {
        name: "write_path::lock_create_latency_during_slow_commit",
        needs_mount: true,
        timeout_secs: 120,
        run: write_path::lock_create_latency_during_slow_commit,
    },
    Test {
        name: "write_path::cas_increments_never_lost",
        needs_mount: true,
        timeout_secs: 180,
        run: write_path::cas_increments_never_lost,
    },
    Test {
        name: "clients::boundaries_and_bad_input",
        needs_mount: true,
        timeout_secs: 120,
        run: clients::boundaries_and_bad_input,
    },
    Test {
        name: "clients::config_keeps_extension",
        needs_mount: true,
        timeout_secs: 120,
        run: clients::config_keeps_extension,
    },
    Test {
        name: "clients::git239_session",
        needs_mount: true,
        timeout_secs: 300,
        run: clients::git239_session,
    },
    Test {
        name: "clients::git247_files_session",
        needs_mount: true,
        timeout_secs: 300,
        run: clients::git247_files_session,
    },
    Test {
        name: "clients::pygit2_session",
        needs_mount: true,
        timeout_secs: 300,
        run: clients::pygit2_session,
    },
    Test {
        name: "clients::dulwich_session",
        needs_mount: true,
        timeout_secs: 300,
        run: clients::dulwich_session,
    },
    Test {
        name: "clients::gitpython_session",
        needs_mount: true,
        timeout_secs: 300,
        run: clients::gitpython_session,
    },
    Test {
        name: "crash::moved_tables_list_is_eio_and_deletes_nothing",
        needs_mount: true,
        timeout_secs: 120,
        run: crash::moved_tables_list_is_eio_and_deletes_nothing,
    },
    Test {
        name: "crash::changed_table_is_reread",
        needs_mount: true,
        timeout_secs: 120,
        run: crash::changed_table_is_reread,
    },
    Test {
        name: "crash::kill9_loop_loses_no_acknowledged_update",
        needs_mount: true,
        timeout_secs: 300,
        run: crash::kill9_loop_loses_no_acknowledged_update,
    },
    Test {
        name: "crash::injected_faults_fail_the_batch_and_the_mount_keeps_serving",
        needs_mount: true,
        timeout_secs: 180,
        run: crash::injected_faults_fail_the_batch_and_the_mount_keeps_serving,
    },
    Test {
        name: "clients::over_dotgit",
        needs_mount: true,
        timeout_secs: 300,
        run: clients::over_dotgit,
    },
    Test {
        name: "status::lists_live_mounts",
        needs_mount: true,
        timeout_secs: 120,
        run: status::lists_live_mounts,
    },
    Test {
        name: "status::shows_pending_and_refused_writes",
        needs_mount: true,
        timeout_secs: 120,
        run: status::shows_pending_and_refused_writes,
    },
    Test {
        name: "times::ls_t_lists_branches_in_update_order",
        needs_mount: true,
        timeout_secs: 120,
        run: times::ls_t_lists_branches_in_update_order,
    },
    Test {
        name: "times::head_mtime_moves_when_head_changes",
        needs_mount: true,
        timeout_secs: 120,
        run: times::head_mtime_moves_when_head_changes,
    },
    Test {
        name: "worktrees::git239_session_in_linked_worktree",
        needs_mount: true,
        timeout_secs: 240,
        run: worktrees::git239_session_in_linked_worktree,
    },
    Test {
        name: "worktrees::git247_files_session_in_linked_worktree",
        needs_mount: true,
        timeout_secs: 240,
        run: worktrees::git247_files_session_in_linked_worktree,
    },
    Test {
        name: "worktrees::linked_worktree_over_dotgit",
        needs_mount: true,
        timeout_secs: 180,
        run: worktrees::linked_worktree_over_dotgit,
    },
    Test {
        name: "worktrees::worktree_added_while_mounted",
        needs_mount: true,
        timeout_secs: 180,
        run: worktrees::worktree_added_while_mounted,
    },
    Test {
        name: "packaging::mount_helper",
        needs_mount: true,
        timeout_secs: 120,
        run: packaging::mount_helper,
    },
];

fn main() -> std::process::ExitCode {
    harness::run_all(TESTS)
}
