# reftablefs — build, test, benchmark and demo entry points.
#
#   make build        debug build of the library and the `reftablefs` binary
#   make test         everything CI checks: fmt, clippy, rustdoc (warnings are errors),
#                     unit + integration tests (real git), examples, the library without
#                     FUSE, then the mount tests
#   make mount-test   only the mount tests (real FUSE mounts; SKIP line without /dev/fuse)
#   make bench        every benchmark, printing ours-vs-git side-by-side tables
#   make demo         a small git-made reftable repo, mounted and shown with ls/cat
#
# Variables: CARGO (default cargo), MOUNT_TEST_ARGS (filter passed to the mount test
# binary, e.g. `make mount-test MOUNT_TEST_ARGS=read_`), BENCH_SCALE (1 = full sizes).

CARGO ?= cargo
MOUNT_TEST_ARGS ?=
MOUNT_TEST_TIMEOUT ?= 1500

.PHONY: all build check fmt-check clippy doc unit-test examples lib-nofuse test mount-test bench demo clean

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
	$(CARGO) test

examples:
	$(CARGO) build --examples

lib-nofuse:
	$(CARGO) test --no-default-features --lib

test: fmt-check clippy doc unit-test examples lib-nofuse mount-test

# Real FUSE mounts. The test binary guards every mount (unmount on success, failure, panic
# and per-test timeout); `timeout` bounds the whole run, and the cleanup script detaches any
# mount a killed run could have left behind.
mount-test:
	@if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null 2>&1; then \
		$(CARGO) build --bin reftablefs && \
		status=0; run_id=$$$$; \
		RTFS_RUN_ID=$$run_id REFTABLEFS_MOUNT_TESTS=1 timeout -k 10 $(MOUNT_TEST_TIMEOUT) \
			$(CARGO) test --test mount -- $(MOUNT_TEST_ARGS) || status=$$?; \
		bash mount-tests/cleanup.sh "rtfs-mt-$$run_id-"; \
		exit $$status; \
	else \
		echo "SKIP mount tests: /dev/fuse or fusermount3 missing (install fuse3; CI has both)"; \
	fi

bench:
	bash benches/run_all.sh

demo:
	bash mount-tests/demo.sh

clean:
	$(CARGO) clean
