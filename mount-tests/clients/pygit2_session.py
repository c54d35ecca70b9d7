"""A pygit2 (libgit2) session through one work tree (cwd). 21 operations; pack-refs, gc
and reflog expire are done by git 2.39 (libgit2 has none of them)."""

import pygit2

from common import append, fail, git239, step

repo = pygit2.Repository(".")


def sig(t):
    return pygit2.Signature("A U Thor", "author@example.com", t, 60)


def commit(msg, t):
    repo.index.read()
    repo.index.add_all()
    repo.index.write()
    tree = repo.index.write_tree()
    return repo.create_commit("HEAD", sig(t), sig(t), msg, tree, [repo.head.target])


with step() as t:
    append("f1", "one\n")
    c1 = commit("c1", t)
with step():
    repo.branches.local.create("topic", repo[c1])
with step():
    repo.branches.local["topic"].rename("topic2")
with step():
    repo.branches.local.create("side", repo[c1])
with step():
    repo.branches.local.delete("side")
with step():
    repo.references.create("refs/tags/light", c1)
with step() as t:
    repo.create_tag("ann", c1, pygit2.enums.ObjectType.COMMIT, sig(t), "annotated\n")
with step():
    repo.references.delete("refs/tags/light")
with step():
    repo.checkout("refs/heads/topic2")
with step() as t:
    append("f1", "two\n")
    commit("c2", t)
with step():
    repo.checkout("refs/heads/main")
with step():
    repo.reset(repo[repo.head.target].parents[0].id, pygit2.enums.ResetMode.HARD)
with step() as t:
    append("f0", "dirty\n")
    repo.stash(sig(t), "wip")
with step():
    repo.stash_pop()
head = repo.head.target
topic = repo.branches.local["topic2"].target
with step():
    repo.create_reference_direct("refs/heads/ur", head, False, message="create")
ur = repo.references["refs/heads/ur"]
with step():
    ur.set_target(topic, "right old")
# The Reference object still expects `head`: a compare-and-swap with a wrong old value.
stale = repo.references["refs/heads/ur"]
repo.references["refs/heads/ur"].set_target(head, "moved under the stale object")
step()
try:
    stale.set_target(topic, "wrong old")
    fail("set_target with a wrong old value succeeded")
except (pygit2.GitError, ValueError):
    pass
with step():
    git239("pack-refs", "--all", "--prune")
with step():
    git239("gc", "-q")
with step():
    git239("reflog", "expire", "--expire=now", "--all")
with step() as t:
    commit("after-expire", t)
