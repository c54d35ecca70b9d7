"""A dulwich session through one work tree (cwd). 21 operations; the branch rename is
done by git 2.39 (dulwich has no branch rename)."""

import time

from dulwich import porcelain as p
from dulwich.repo import Repo

from common import append, fail, git239, step

AUTHOR = b"A U Thor <author@example.com>"


def commit(msg, t):
    p.add(".", paths=["f0", "f1"])
    p.commit(
        ".",
        message=msg,
        author=AUTHOR,
        committer=AUTHOR,
        author_timestamp=t,
        author_timezone=3600,
        commit_timestamp=t,
        commit_timezone=3600,
    )


with step() as t:
    append("f1", "one\n")
    commit(b"c1", t)
with step():
    p.branch_create(".", "topic")
with step():
    git239("branch", "-m", "topic", "topic2")
with step():
    p.branch_create(".", "side")
with step():
    p.branch_delete(".", "side")
with step():
    p.tag_create(".", "light")
with step() as t:
    p.tag_create(".", "ann", author=AUTHOR, message=b"annotated\n", annotated=True, tag_time=t, tag_timezone=3600)
with step():
    p.tag_delete(".", b"light")
with step():
    p.switch(".", "topic2")
with step() as t:
    append("f1", "two\n")
    commit(b"c2", t)
with step():
    p.checkout(".", "main")
with Repo(".") as r:
    parent = r[r.refs[b"HEAD"]].parents[0]
with step():
    p.reset(".", "hard", parent)
with step():
    append("f0", "dirty\n")
    p.stash_push(".")
with step():
    p.stash_pop(".")
with Repo(".") as r:
    head = r.refs[b"HEAD"]
    topic = r.refs[b"refs/heads/topic2"]
with step():
    p.update_ref(".", "refs/heads/ur", head, message=b"create")
with step():
    p.update_ref(".", "refs/heads/ur", topic, old_value=head, message=b"right old")
step()
try:
    p.update_ref(".", "refs/heads/ur", head, old_value=head, message=b"wrong old")
    fail("update_ref with a wrong old value succeeded")
except Exception:
    pass
with Repo(".") as r:
    if r.refs[b"refs/heads/ur"] != topic:
        fail("update_ref with a wrong old value changed the ref")
with step():
    p.pack_refs(".", all=True)
with step():
    p.gc(".")
with step():
    p.reflog_expire(".", all=True, expire_time=int(time.time()) + 1)
with step() as t:
    append("f1", "three\n")
    commit(b"after-expire", t)
