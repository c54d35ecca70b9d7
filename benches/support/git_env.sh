# Sourced by the shell benchmarks: git (2.47 and /usr/bin/git 2.39) runs with no system or
# global configuration, HOME and LC_ALL fixed, and a fixed identity, so every side of a
# run does the same work.
#
#   . "$(dirname "$0")/support/git_env.sh"; bench_git_env "$work"

# bench_git_env HOME_DIR: exports that environment, HOME being HOME_DIR.
bench_git_env() {
    export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME="$1" LC_ALL=C
    export GIT_AUTHOR_NAME=Bench GIT_AUTHOR_EMAIL=bench@example.com
    export GIT_COMMITTER_NAME=Bench GIT_COMMITTER_EMAIL=bench@example.com
}
