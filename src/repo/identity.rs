//! The committer identity (environment, config, system) and the date forms git accepts.

use crate::Result;

use super::{repo_err, Config, Env};

/// The committer identity type is the transaction layer's; this module knows how git
/// finds it.
pub use crate::transaction::Identity;

impl Identity {
    /// git's committer identity: environment, then config, then system fallbacks; the
    /// date from `GIT_COMMITTER_DATE` (see [`parse_git_date`]) or the clock.
    pub fn committer(cfg: &Config, env: &Env) -> Result<Identity> {
        let name = env
            .get("GIT_COMMITTER_NAME")
            .or_else(|| cfg.string("committer.name"))
            .or_else(|| cfg.string("user.name"))
            .map(str::to_owned)
            .unwrap_or_else(system_user_name);
        let email = env
            .get("GIT_COMMITTER_EMAIL")
            .or_else(|| cfg.string("committer.email"))
            .or_else(|| cfg.string("user.email"))
            .or_else(|| env.get_nonempty("EMAIL"))
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}@{}", system_login(), hostname()));
        let (time, tz_offset) = match env.get("GIT_COMMITTER_DATE") {
            Some(d) => {
                parse_git_date(d).ok_or_else(|| repo_err(format!("invalid date format: {d}")))?
            }
            None => now_with_local_tz(),
        };
        Ok(Identity {
            name: crud_trim(&name).into_bytes(),
            email: crud_trim(&email).into_bytes(),
            time,
            tz_offset,
        })
    }
}

/// git strips "crud" (spaces, `.`, `,`, `:`, `;`, `<`, `>`, quotes, `\`) from both ends of
/// ident parts, and drops `<`, `>` and newlines inside.
fn crud_trim(s: &str) -> String {
    let is_crud =
        |c: char| c <= ' ' || matches!(c, '.' | ',' | ':' | ';' | '<' | '>' | '"' | '\\' | '\'');
    s.trim_matches(is_crud)
        .chars()
        .filter(|c| !matches!(c, '<' | '>' | '\n'))
        .collect()
}

fn system_login() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

fn system_user_name() -> String {
    system_login()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Seconds since the epoch and the local timezone as ±HHMM.
pub fn now_with_local_tz() -> (u64, i16) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    (now, local_tz_at(now))
}

/// The local timezone offset at `time`, as ±HHMM.
pub fn local_tz_at(time: u64) -> i16 {
    crate::transaction::local_tz_hhmm(time)
}

/// Parses the date forms git accepts in `GIT_COMMITTER_DATE` that tests use:
/// `@<unix> [±hhmm]`, `<unix> ±hhmm` (git's raw form), RFC 2822
/// (`Thu, 07 Apr 2005 22:13:13 +0200`) and ISO 8601 (`2005-04-07T22:13:13+0200`,
/// `2005-04-07 22:13:13 +02:00`, optional `Z`). Returns (seconds, ±HHMM); a missing
/// zone means UTC for `@` forms and local time otherwise.
pub fn parse_git_date(s: &str) -> Option<(u64, i16)> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('@') {
        let mut it = rest.split_whitespace();
        let t: u64 = it.next()?.parse().ok()?;
        let tz = match it.next() {
            Some(z) => parse_tz(z)?,
            None => 0,
        };
        return it.next().is_none().then_some((t, tz));
    }
    let parts: Vec<&str> = s.split_whitespace().collect();
    if let [t, z] = parts.as_slice() {
        if t.bytes().all(|b| b.is_ascii_digit()) && t.len() >= 9 {
            return Some((t.parse().ok()?, parse_tz(z)?));
        }
    }
    parse_iso8601(s).or_else(|| parse_rfc2822(s))
}

/// `+hhmm`, `-hh:mm`, `+hh`, `Z`, `UTC`, `GMT` → ±HHMM.
fn parse_tz(z: &str) -> Option<i16> {
    if matches!(z, "Z" | "z" | "UTC" | "GMT") {
        return Some(0);
    }
    let (sign, digits) = match z.as_bytes().first()? {
        b'+' => (1i16, z.get(1..)?),
        b'-' => (-1i16, z.get(1..)?),
        _ => return None,
    };
    let digits: String = digits.chars().filter(|&c| c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i16 = match digits.len() {
        2 => digits.parse::<i16>().ok()? * 100,
        4 => digits.parse().ok()?,
        _ => return None,
    };
    Some(sign * v)
}

/// Minutes east of UTC for a ±HHMM value.
fn tz_minutes(tz: i16) -> i64 {
    let t = i64::from(tz);
    (t / 100) * 60 + t % 100
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// The proleptic Gregorian date of a day number since 1970-01-01: (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

/// `seconds` since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (for people reading a status).
pub fn utc_timestamp(seconds: u64) -> String {
    let (date, time) = utc_date_time(seconds);
    format!("{date} {time} UTC")
}

/// `millis` since the epoch as ISO 8601 / RFC 3339 in UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ`
/// (for log lines).
pub fn utc_timestamp_millis(millis: u64) -> String {
    let (date, time) = utc_date_time(millis / 1000);
    format!("{date}T{time}.{:03}Z", millis % 1000)
}

/// `seconds` since the epoch as `YYYY-MM-DD` and `HH:MM:SS`, in UTC.
fn utc_date_time(seconds: u64) -> (String, String) {
    let secs = i64::try_from(seconds).unwrap_or(i64::MAX);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60),
    )
}

fn to_epoch(
    y: i64,
    mo: u32,
    d: u32,
    h: u32,
    mi: u32,
    s: u32,
    tz: Option<i16>,
) -> Option<(u64, i16)> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let local =
        days_from_civil(y, mo, d) * 86400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
    let tz = match tz {
        Some(tz) => tz,
        // Local time: take the zone in force near that moment.
        None => local_tz_at(u64::try_from(local).ok()?),
    };
    let t = local - tz_minutes(tz) * 60;
    Some((u64::try_from(t).ok()?, tz))
}

fn parse_hms(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.split(':');
    let h = it.next()?.parse().ok()?;
    let m = it.next()?.parse().ok()?;
    let sec = match it.next() {
        Some(x) => x.split('.').next()?.parse().ok()?,
        None => 0,
    };
    it.next().is_none().then_some((h, m, sec))
}

fn parse_iso8601(s: &str) -> Option<(u64, i16)> {
    let date = s.get(..10)?;
    let mut dp = date.split('-');
    let y: i64 = dp.next()?.parse().ok()?;
    let mo: u32 = dp.next()?.parse().ok()?;
    let d: u32 = dp.next()?.parse().ok()?;
    let rest = s.get(10..)?;
    let rest = rest
        .strip_prefix('T')
        .or_else(|| rest.strip_prefix(' '))
        .unwrap_or(rest)
        .trim();
    if rest.is_empty() {
        return to_epoch(y, mo, d, 0, 0, 0, None);
    }
    // Split the time from a zone that may be glued on (`+0200`, `Z`) or spaced.
    let cut = rest.find(['+', '-', 'Z', ' ']).unwrap_or(rest.len());
    let time = rest.get(..cut)?;
    let zone = rest.get(cut..)?.trim();
    let (h, mi, sec) = parse_hms(time)?;
    let tz = if zone.is_empty() {
        None
    } else {
        Some(parse_tz(zone)?)
    };
    to_epoch(y, mo, d, h, mi, sec, tz)
}

fn parse_rfc2822(s: &str) -> Option<(u64, i16)> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let s = match s.split_once(',') {
        Some((_day, rest)) => rest,
        None => s,
    };
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [d, mon, y, time, rest @ ..] = parts.as_slice() else {
        return None;
    };
    let d: u32 = d.parse().ok()?;
    let mon = mon.to_ascii_lowercase();
    let mo = MONTHS.iter().position(|m| mon.starts_with(m))? as u32 + 1;
    let y: i64 = y.parse().ok()?;
    let (h, mi, sec) = parse_hms(time)?;
    let tz = match rest {
        [] => None,
        [z, ..] => Some(parse_tz(z)?),
    };
    to_epoch(y, mo, d, h, mi, sec, tz)
}
