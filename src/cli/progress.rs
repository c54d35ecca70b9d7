//! A git-style progress line on stderr (`Migrating refs:  42% (420000/1000000)`), shown
//! only when stderr is a terminal and the work is large (100k items) or lasts longer than
//! half a second (git's delayed progress), redrawn at most every 100 ms.

use std::io::Write;
use std::time::{Duration, Instant};

/// Work of this many items or more shows its progress line at once.
const LARGE: u64 = 100_000;

/// One progress line. Silent when stderr is not a terminal.
pub struct Progress {
    title: String,
    total: Option<u64>,
    enabled: bool,
    last_draw: Option<Instant>,
    last_value: u64,
    start: Instant,
    delay: Duration,
}

impl Progress {
    /// Starts a progress line; `total` gives a percentage.
    pub fn new(title: &str, total: Option<u64>) -> Progress {
        // SAFETY: isatty only inspects the descriptor.
        let tty = unsafe { libc::isatty(2) } == 1;
        Progress {
            title: title.to_owned(),
            total,
            enabled: tty,
            last_draw: None,
            last_value: 0,
            start: Instant::now(),
            delay: Duration::from_millis(500),
        }
    }

    /// Forces the line on or off (`--progress`/`--no-progress`); forced on, it draws
    /// without the initial delay.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
        if on {
            self.delay = Duration::ZERO;
        }
    }

    /// The line as it would be drawn for `value`.
    pub fn render(&self, value: u64) -> String {
        match self.total {
            Some(t) if t > 0 => {
                let pct = value.saturating_mul(100) / t;
                format!("{}: {:3}% ({}/{})", self.title, pct, value, t)
            }
            _ => format!("{}: {}", self.title, value),
        }
    }

    /// Updates the value; redraws if 100 ms passed since the last draw.
    pub fn update(&mut self, value: u64) {
        self.last_value = value;
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        // Large work shows at once (it is fast, but a progress line tells what happens);
        // small work only once it has taken longer than the delay.
        let large = value >= LARGE || self.total.is_some_and(|t| t >= LARGE);
        if !large && now.duration_since(self.start) < self.delay {
            return;
        }
        if self
            .last_draw
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(100))
        {
            return;
        }
        self.last_draw = Some(now);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{}\r", self.render(value));
        let _ = err.flush();
    }

    /// Draws the final value followed by `, done.` and a newline.
    pub fn finish(&mut self) {
        // Nothing drawn yet: the work was quick, stay silent as git does.
        if !self.enabled || self.last_draw.is_none() {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}, done.", self.render(self.last_value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_git() {
        let p = Progress::new("Migrating refs", Some(1_000_000));
        assert_eq!(p.render(420_000), "Migrating refs:  42% (420000/1000000)");
        let q = Progress::new("Reading refs", None);
        assert_eq!(q.render(7), "Reading refs: 7");
    }
}
