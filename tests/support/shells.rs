//! Real shells completing a command line with the generated completion scripts: bash
//! (its completion function called as bash's `complete` would), zsh (an interactive zsh on
//! a pseudo-terminal through `zsh/zpty`, a key bound to `complete-word`) and fish
//! (`complete -C`). Used by `tests/cli_help.rs` and the mount tests (`status.rs`).
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Whether `shell` can be run. Missing, it is a test failure on CI (`.ci/run` installs
/// bash, zsh and fish) and a printed SKIP elsewhere.
pub fn have(shell: &str) -> bool {
    let ok = Command::new(shell)
        .arg("-c")
        .arg("exit 0")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{shell} is not installed (CI installs it: .ci/run)"
        );
        eprintln!("SKIP: {shell} is not installed; its completion is not exercised");
    }
    ok
}

/// `PATH` with `bin_dir` first, so the scripts' calls of `reftablefs` reach this build.
fn path_with(bin_dir: &Path) -> String {
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// bash: `COMPREPLY` of the completion function for `words` (the last is completed).
pub fn bash(script: &Path, bin_dir: &Path, words: &[&str]) -> String {
    let quoted: Vec<String> = words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect();
    let probe = format!(
        "source '{}'\nCOMP_WORDS=({}); COMP_CWORD={}; _reftablefs; echo \"${{COMPREPLY[*]}}\"\n",
        script.display(),
        quoted.join(" "),
        words.len().saturating_sub(1)
    );
    let o = Command::new("bash")
        .arg("-c")
        .arg(probe)
        .env("PATH", path_with(bin_dir))
        .output()
        .expect("run bash");
    assert!(
        o.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim_end().to_string()
}

/// The zsh driver: an interactive `zsh -f` on a pty, the script's directory on `fpath`,
/// compinit, a widget that runs `complete-word` and prints the buffer between markers (the
/// markers are spelled split in the typed command, so its echo never matches them).
const ZSH_DRIVER: &str = r#"
zmodload zsh/zpty || exit 2
zmodload zsh/datetime
zpty z zsh -f -i
zpty -w z "PROMPT='>'; fpath=($1 \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z "comptest () { zle complete-word; print -r -- \"<E\"\"ND>\$BUFFER</E\"\"ND>\"; }; zle -N comptest; bindkey '^T' comptest"
zpty -n -w z "$2"$'\C-t'
local out='' line
local -F start=$EPOCHREALTIME
while (( EPOCHREALTIME - start < 20 )); do
  if zpty -r -t z line; then
    out+=$line
    [[ $out == *'</END>'* ]] && break
  else
    sleep 0.02
  fi
done
zpty -d z
out=${out//$'\r'/}
[[ $out =~ '<END>(.*)</END>' ]] && print -r -- "$match[1]"
"#;

/// zsh: the command line after one `complete-word` on `line` (a unique match is inserted
/// with a trailing space; an ambiguous one extends to the common prefix).
pub fn zsh(script: &Path, bin_dir: &Path, line: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(script, dir.path().join("_reftablefs")).expect("copy the zsh script");
    let driver = dir.path().join("driver.zsh");
    std::fs::write(&driver, ZSH_DRIVER).expect("write the driver");
    let o = Command::new("timeout")
        .arg("30")
        .arg("zsh")
        .arg("-f")
        .arg(&driver)
        .arg(dir.path())
        .arg(line)
        .env("PATH", path_with(bin_dir))
        .output()
        .expect("run zsh");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && !out.is_empty(),
        "zsh completion of {line:?} gave nothing ({}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out.trim_end_matches('\n').to_string()
}

/// fish: the candidates of `complete -C line` (without their descriptions).
pub fn fish(script: &Path, bin_dir: &Path, line: &str) -> Vec<String> {
    let o = Command::new("fish")
        .arg("--no-config")
        .arg("-c")
        .arg(format!(
            "source '{}'; complete -C '{}'",
            script.display(),
            line.replace('\'', "\\'")
        ))
        .env("PATH", path_with(bin_dir))
        .output()
        .expect("run fish");
    assert!(
        o.status.success(),
        "fish: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_string())
        .collect()
}
