#!/bin/sh
# A client session of git through one work tree: ./git_session.sh GIT (cwd: the work
# tree; GIT: /usr/bin/git 2.39, or git 2.47 which sees a files repository through the
# mount). Every step gets its own fixed date, so object ids and reflogs are the same in
# every run. 21 operations; exits non-zero at the first unexpected result.
set -eu
G="$1"
n=0
step() {
    n=$((n + 1))
    GIT_AUTHOR_DATE="$((1700000000 + n * 60)) +0100"
    GIT_COMMITTER_DATE="$GIT_AUTHOR_DATE"
    export GIT_AUTHOR_DATE GIT_COMMITTER_DATE
}
step; echo one >>f1; "$G" add f1; "$G" commit -q -m c1
step; "$G" branch topic
step; "$G" branch -m topic topic2
step; "$G" branch side
step; "$G" branch -D side >/dev/null
step; "$G" tag light
step; "$G" tag -a -m annotated ann
step; "$G" tag -d light >/dev/null
step; "$G" switch -q topic2
step; echo two >>f1; "$G" commit -q -am c2
step; "$G" checkout -q main
step; "$G" reset -q --hard HEAD~1
step; echo dirty >>f0; "$G" stash push -q -m wip
step; "$G" stash pop -q
step; "$G" update-ref -m create refs/heads/ur HEAD
old=$("$G" rev-parse HEAD)
new=$("$G" rev-parse topic2)
step; "$G" update-ref -m "right old" refs/heads/ur "$new" "$old"
step
if "$G" update-ref -m "wrong old" refs/heads/ur "$old" "$old" 2>/dev/null; then
    echo "update-ref with a wrong old value succeeded" >&2
    exit 1
fi
step; "$G" pack-refs --all --prune
step; "$G" gc -q
step; "$G" reflog expire --expire=now --all
step; "$G" commit -q --allow-empty -m after-expire
