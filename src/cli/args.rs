//! A small argument cursor: options and positionals in order, `--` ends options.

use std::ffi::OsString;
use std::path::PathBuf;

/// The remaining command-line words, consumed front to back.
#[derive(Debug)]
pub struct Args {
    words: std::collections::VecDeque<OsString>,
    options_done: bool,
}

impl Args {
    /// Wraps the words after the program name.
    pub fn new(words: Vec<OsString>) -> Self {
        Args {
            words: words.into(),
            options_done: false,
        }
    }

    /// Takes the next word if it is exactly `flag` (e.g. `--verify`).
    pub fn flag(&mut self, flag: &str) -> bool {
        if !self.options_done && self.words.front().is_some_and(|w| w == flag) {
            self.words.pop_front();
            return true;
        }
        false
    }

    /// Takes `--name VALUE` or `--name=VALUE` if it is next.
    pub fn value(&mut self, name: &str) -> Option<OsString> {
        if self.options_done {
            return None;
        }
        let front = self.words.front()?.to_str()?.to_owned();
        if front == name {
            self.words.pop_front();
            return self.words.pop_front();
        }
        if let Some(v) = front.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            self.words.pop_front();
            return Some(v.into());
        }
        None
    }

    /// Whether the next word looks like an option (starts with `-`, not `-` alone).
    pub fn peek_is_option(&self) -> bool {
        !self.options_done
            && self
                .words
                .front()
                .and_then(|w| w.to_str())
                .is_some_and(|w| w.starts_with('-') && w != "-")
    }

    /// The next word, as an option name, for "unknown option" errors.
    pub fn peek(&self) -> Option<String> {
        self.words.front().map(|w| w.to_string_lossy().into_owned())
    }

    /// Takes the next positional word (after `--`, anything counts).
    pub fn next_positional(&mut self) -> Option<String> {
        if !self.options_done && self.words.front().is_some_and(|w| w == "--") {
            self.words.pop_front();
            self.options_done = true;
        }
        self.words
            .pop_front()
            .map(|w| w.to_string_lossy().into_owned())
    }

    /// Takes the next positional word as a path.
    pub fn next_path(&mut self) -> Option<PathBuf> {
        if !self.options_done && self.words.front().is_some_and(|w| w == "--") {
            self.words.pop_front();
            self.options_done = true;
        }
        self.words.pop_front().map(PathBuf::from)
    }

    /// All remaining words.
    pub fn rest(&mut self) -> Vec<String> {
        self.words
            .drain(..)
            .map(|w| w.to_string_lossy().into_owned())
            .collect()
    }

    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}
