"""Shared by the Python client sessions: fixed per-step dates and git 2.39 for the
operations a client library cannot do itself."""

import atexit
import os
import subprocess
import sys

BASE = 1700000000
step_no = 0


class step:
    """One operation: advances the fixed clock (every operation gets its own date, in
    git's format); used as `with step() as t:` it records an exception raised by the
    operation (printed on stdout at exit, so the runner compares the failures of both
    sides) and the session goes on."""

    def __init__(self):
        global step_no
        step_no += 1
        self.no = step_no
        self.t = BASE + step_no * 60
        date = f"{self.t} +0100"
        os.environ["GIT_AUTHOR_DATE"] = date
        os.environ["GIT_COMMITTER_DATE"] = date

    def __enter__(self):
        return self.t

    def __exit__(self, kind, value, tb):
        if kind is not None and issubclass(kind, Exception):
            failed.append(f"step {self.no}: {kind.__name__}: {value}")
            return True
        return False


failed = []


@atexit.register
def report():
    for line in failed:
        print(f"FAILED {line}")


def git239(*args):
    """An operation the client library cannot do, done by git 2.39 in its session."""
    subprocess.run(["/usr/bin/git", *args], check=True, stdout=subprocess.DEVNULL)


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def append(path, text):
    with open(path, "a") as f:
        f.write(text)
