# Sourced (POSIX sh) by git 2.39's t/test-lib.sh, patched by test-lib.patch, when
# REFTABLEFS_GIT_SUITE_HOOK names this file: mode (b) of tests/git-suite/run.sh.
#
# Right after test-lib's `git init` of the trash repository, git 2.47 converts it to
# reftable and reftablefs mounts it over its .git; test_done and test-lib's exit trap
# unmount it. Other repositories a test makes stay plain files repositories.
#
# Set by run.sh: REFTABLEFS_GIT_SUITE_BIN (the reftablefs binary), REFTABLEFS_GIT_SUITE_GIT
# (absolute path of a git >= 2.46, for the migration only: the tests run git 2.39),
# REFTABLEFS_GIT_SUITE_LOGDIR (the mount's log, its status at unmount, failure markers).

reftablefs_suite_mounted_=

reftablefs_suite_mount () {
	reftablefs_suite_log_="$REFTABLEFS_GIT_SUITE_LOGDIR/$TEST_NAME" &&
	rm -f "$reftablefs_suite_log_".* &&
	# test-lib points GIT_EXEC_PATH and GIT_TEMPLATE_DIR at the 2.39 build.
	env -u GIT_EXEC_PATH -u GIT_TEMPLATE_DIR "$REFTABLEFS_GIT_SUITE_GIT" \
		-C "$TRASH_DIRECTORY" refs migrate --ref-format=reftable >&3 2>&4 &&
	"$REFTABLEFS_GIT_SUITE_BIN" mount --daemon --log="$reftablefs_suite_log_.mount.log" \
		--over "$TRASH_DIRECTORY" >&3 2>&4 &&
	reftablefs_suite_mounted_=t &&
	# git 2.39 sees the files layout: HEAD names the unborn default branch.
	git symbolic-ref HEAD >&3 2>&4
}

reftablefs_suite_unmount () {
	test -n "$reftablefs_suite_mounted_" || return 0
	reftablefs_suite_mounted_=
	# A working directory inside .git would keep the mount busy.
	cd "$TRASH_DIRECTORY" 2>/dev/null || cd /
	timeout 10 cat "$TRASH_DIRECTORY/.git/.reftablefs/status" \
		>"$reftablefs_suite_log_.status" 2>/dev/null
	if ! timeout -k 5 90 "$REFTABLEFS_GIT_SUITE_BIN" unmount --timeout=60 \
		"$TRASH_DIRECTORY/.git" >>"$reftablefs_suite_log_.unmount" 2>&1
	then
		# run.sh reports this and detaches whatever is left (aborting the connection).
		echo "reftablefs unmount failed: see $reftablefs_suite_log_.unmount" >&4
		: >"$reftablefs_suite_log_.unmount-failed"
	fi
	return 0
}
