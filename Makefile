# reftablefs — build, test, benchmark and demo entry points.
#
#   make build        debug build of the library and the `reftablefs` binary
#   make test         everything CI checks: fmt, clippy, rustdoc (warnings are errors),
#                     unit + integration tests (real git), examples, the library without
#                     FUSE, then the mount tests
#   make mount-test   only the mount tests (real FUSE mounts; SKIP line without /dev/fuse)
#   make mount-test-uring  the mount tests again with every mount over io_uring
#                     (`--io-uring`, the fuse module's enable_uring on for the run)
#   make git-suite    git 2.39's own test scripts with their repository on a reftablefs
#                     mount, every subtest compared with tests/git-suite/expected.txt
#   make fuzz         the property tests and the mutation fuzzer for longer, seeded from
#                     the clock (`make test` runs them with fixed seeds)
#   make bench        every benchmark, printing ours-vs-git side-by-side tables
#   make demo         a small git-made reftable repo, mounted and shown with ls/cat
#   make generated    the man page and bash/zsh/fish completions, into target/generated/,
#                     checked to name every subcommand (part of `make test`)
#   make install      release binary, man page and completions under $(DESTDIR)$(PREFIX)
#
# Variables: CARGO (default cargo), MOUNT_TEST_ARGS (filter passed to the mount test
# binary, e.g. `make mount-test MOUNT_TEST_ARGS=read_`), BENCH_SCALE (1 = full sizes),
# GIT_SUITE_ARGS (options and scripts for tests/git-suite/run.sh, e.g. `--update t1400`).
# FUZZ_SECS, FUZZ_CASES and FUZZ_SEED (see `fuzz`).

CARGO ?= cargo
# The test-only hooks (Cargo.toml's test-hooks) for everything the tests build, so the unit
# tests, the examples and the mount tests share one build of the crate.
TEST_FEATURES ?= --features test-hooks
MOUNT_TEST_ARGS ?=
MOUNT_TEST_TIMEOUT ?= 1500
GIT_SUITE_ARGS ?=

PREFIX ?= /usr/local
DESTDIR ?=
GEN := target/generated
# Where cargo puts what it builds (CARGO_TARGET_DIR when set, as cargo reads it).
BUILD := $(or $(CARGO_TARGET_DIR),target)

.PHONY: all build check fmt-check clippy doc unit-test examples lib-nofuse test mount-test mount-test-uring git-suite fuzz bench demo clean generated install uninstall

all: build

build:
	$(CARGO) build

fmt-check:
	$(CARGO) fmt --all --check

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

check: fmt-check clippy

# The API docs, with broken intra-doc links and other rustdoc warnings as errors (a few
# seconds: only this crate is documented).
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps

# `cargo test` runs unit tests, tests/ (which drive real git) and the doctests. The mount
# test target runs only through `make mount-test` (it prints a SKIP line otherwise).
unit-test:
	$(CARGO) test $(TEST_FEATURES)

examples:
	$(CARGO) build $(TEST_FEATURES) --examples

lib-nofuse:
	$(CARGO) test --no-default-features --lib

test: fmt-check clippy doc unit-test examples lib-nofuse generated mount-test mount-test-uring

# The man page and the completions come from the binary's own command table
# (src/cli/table.rs); each generated file must name every subcommand the binary lists.
generated: build
	@mkdir -p $(GEN)
	$(BUILD)/debug/reftablefs man > $(GEN)/reftablefs.1
	$(BUILD)/debug/reftablefs completions bash > $(GEN)/reftablefs.bash
	$(BUILD)/debug/reftablefs completions zsh > $(GEN)/_reftablefs
	$(BUILD)/debug/reftablefs completions fish > $(GEN)/reftablefs.fish
	bash -n $(GEN)/reftablefs.bash
	@cmds=$$($(BUILD)/debug/reftablefs help | sed -n '/^These are/,/^$$/p' | awk 'NF>1 && /^   / {print $$1}'); \
	test -n "$$cmds" || { echo "no commands listed by 'reftablefs help'"; exit 1; }; \
	for f in reftablefs.1 reftablefs.bash _reftablefs reftablefs.fish; do \
		for c in $$cmds; do \
			grep -q -e "$$c" -e "$$(echo $$c | sed 's/-/\\\\-/g')" $(GEN)/$$f || { echo "$(GEN)/$$f does not mention $$c"; exit 1; }; \
		done; \
	done; echo "generated: man page and completions name all $$(echo $$cmds | wc -w) commands"

# Installs what `cargo build --release` makes, with the man page and completions made by
# that binary: bin/, share/man/man1/, and bash, zsh and fish completion directories.
install:
	$(CARGO) build --release
	@mkdir -p $(GEN)/release
	$(BUILD)/release/reftablefs man > $(GEN)/release/reftablefs.1
	$(BUILD)/release/reftablefs completions bash > $(GEN)/release/reftablefs.bash
	$(BUILD)/release/reftablefs completions zsh > $(GEN)/release/_reftablefs
	$(BUILD)/release/reftablefs completions fish > $(GEN)/release/reftablefs.fish
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 755 $(BUILD)/release/reftablefs $(DESTDIR)$(PREFIX)/bin/reftablefs
	install -m 644 $(GEN)/release/reftablefs.1 $(DESTDIR)$(PREFIX)/share/man/man1/reftablefs.1
	install -m 644 $(GEN)/release/reftablefs.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/reftablefs
	install -m 644 $(GEN)/release/_reftablefs $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_reftablefs
	install -m 644 $(GEN)/release/reftablefs.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/reftablefs.fish

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/reftablefs $(DESTDIR)$(PREFIX)/share/man/man1/reftablefs.1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/reftablefs \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_reftablefs \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/reftablefs.fish

# Real FUSE mounts. The test binary guards every mount (unmount on success, failure, panic
# and per-test timeout); `timeout` bounds the whole run, and the cleanup script detaches any
# mount a killed run could have left behind.
mount-test:
	@if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null 2>&1; then \
		$(CARGO) build $(TEST_FEATURES) --bin reftablefs && \
		status=0; run_id=$$$$; \
		RTFS_RUN_ID=$$run_id REFTABLEFS_MOUNT_TESTS=1 timeout -k 10 $(MOUNT_TEST_TIMEOUT) \
			$(CARGO) test $(TEST_FEATURES) --test mount -- $(MOUNT_TEST_ARGS) || status=$$?; \
		bash mount-tests/cleanup.sh "rtfs-mt-$$run_id-"; \
		exit $$status; \
	else \
		echo "SKIP mount tests: /dev/fuse or fusermount3 missing (install fuse3; CI has both)"; \
	fi

# The mount tests with every mount asking for FUSE over io_uring (docs/fuse.md, "FUSE over
# io_uring"); the fuse module's enable_uring is set for the run and given back its value.
# Not run here: uring:: (it ran above and sets the parameter itself), the two tests of
# /dev/fuse threads following their clients (io_uring threads stay on their CPU), and
# stuck::a_stopped_mount_stalls_no_diagnosis (with io_uring a client of a stopped mount
# cannot be killed: the kernel's doing, the reason io_uring is not the default).
URING_PARAM := /sys/module/fuse/parameters/enable_uring
mount-test-uring:
	@if [ -e /dev/fuse ] && [ -w $(URING_PARAM) ] && [ "$$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null)" != 2 ] && \
		command -v fusermount3 >/dev/null 2>&1; then \
		old=$$(cat $(URING_PARAM)); echo 1 > $(URING_PARAM); \
		$(MAKE) mount-test MOUNT_TEST_ARGS="--skip uring:: --skip status::request_threads --skip stuck::a_stopped_mount_stalls_no_diagnosis $(MOUNT_TEST_ARGS)" \
			REFTABLEFS_TEST_IO_URING=1; status=$$?; \
		if [ "$$old" = Y ]; then echo 1 > $(URING_PARAM); else echo 0 > $(URING_PARAM); fi; \
		exit $$status; \
	else \
		echo "SKIP mount tests over io_uring: no writable $(URING_PARAM) (Linux 6.14+, root), or kernel.io_uring_disabled=2"; \
	fi

# git 2.39's t/ scripts (tests/git-suite/scripts.txt), each with its trash repository
# converted to reftable and mounted over its .git (docs/git-suite.md). The first run
# fetches Debian's git 2.39 source and builds it (niced, -j2) into
# ~/.cache/reftablefs/git-suite; run.sh bounds every script in time and unmounts (or
# aborts) every mount it made.
git-suite:
	@if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null 2>&1; then \
		$(CARGO) build $(TEST_FEATURES) --bin reftablefs && bash tests/git-suite/run.sh $(GIT_SUITE_ARGS); \
	else \
		echo "SKIP git-suite: /dev/fuse or fusermount3 missing (install fuse3; CI has both)"; \
	fi

# The randomised tests beyond `make test`'s fixed seeds: FUZZ_CASES property-test cases
# (tests/all/props.rs) and FUZZ_SECS seconds per mutation-fuzzer target (mutation_fuzz.rs),
# all seeded from the clock, or from FUZZ_SEED to replay a run. The seed is printed first.
# (The cargo-fuzz targets under fuzz/ need nightly: see fuzz/Cargo.toml.)
FUZZ_SECS ?= 60
FUZZ_CASES ?= 5000
FUZZ_SEED ?=
fuzz:
	@seed=$${FUZZ_SEED:-$$(date +%s%N)}; \
	echo "fuzz: seed $$seed (replay: make fuzz FUZZ_SEED=$$seed)"; \
	PROPTEST_RNG_SEED=$$seed PROPTEST_CASES=$(FUZZ_CASES) \
	MUTATION_FUZZ_SEED=$$seed MUTATION_FUZZ_SECS=$(FUZZ_SECS) \
		$(CARGO) test --test all -- --nocapture props:: mutation_fuzz::

bench:
	bash benches/run_all.sh

demo:
	bash mount-tests/demo.sh

clean:
	$(CARGO) clean
