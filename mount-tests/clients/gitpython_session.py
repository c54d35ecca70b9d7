"""A GitPython session through one work tree (cwd). 21 operations. GitPython writes refs
and reflogs itself for commits, branch creation and deletion, light tags and
`set_object`; the rest it hands to the `git` on PATH (2.47, which sees a files
repository through the mount), as any GitPython user gets."""

import git

from common import append, fail, step

repo = git.Repo(".")


def commit(msg):
    repo.index.add(["f0", "f1"])
    return repo.index.commit(msg)


with step():
    append("f1", "one\n")
    c1 = commit("c1")
with step():
    topic = repo.create_head("topic")
with step():
    topic.rename("topic2")
with step():
    side = repo.create_head("side")
with step():
    repo.delete_head(side, force=True)
with step():
    light = git.TagReference.create(repo, "light")
with step():
    repo.create_tag("ann", message="annotated")
with step():
    repo.delete_tag(light)
with step():
    repo.heads.topic2.checkout()
with step():
    append("f1", "two\n")
    commit("c2")
with step():
    repo.heads.main.checkout()
with step():
    repo.head.reset("HEAD~1", index=True, working_tree=True)
with step():
    append("f0", "dirty\n")
    repo.git.stash("push", "-q", "-m", "wip")
with step():
    repo.git.stash("pop", "-q")
head = repo.head.commit
topic2 = repo.heads.topic2.commit
with step():
    ur = git.Head.create(repo, "ur", head, logmsg="create")
with step():
    repo.git.update_ref("-m", "right old", "refs/heads/ur", topic2.hexsha, head.hexsha)
step()
try:
    repo.git.update_ref("-m", "wrong old", "refs/heads/ur", head.hexsha, head.hexsha)
    fail("update-ref with a wrong old value succeeded")
except git.GitCommandError:
    pass
with step():
    repo.git.pack_refs("--all", "--prune")
with step():
    repo.git.gc("-q")
with step():
    repo.git.reflog("expire", "--expire=now", "--all")
with step():
    append("f1", "three\n")
    commit("after-expire")
