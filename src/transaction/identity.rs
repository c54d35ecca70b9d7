//! The committer identity written into generated reflog entries, with the local time
//! zone as git's ±HHMM.

/// The committer identity written into generated reflog entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub name: Vec<u8>,
    /// Without `<` `>`.
    pub email: Vec<u8>,
    /// Seconds since the epoch.
    pub time: u64,
    /// ±HHMM as a decimal integer (-0700 is -700).
    pub tz_offset: i16,
}

impl Identity {
    /// An identity at the current time in the local time zone.
    pub fn now(name: impl Into<Vec<u8>>, email: impl Into<Vec<u8>>) -> Identity {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Identity {
            name: name.into(),
            email: email.into(),
            time,
            tz_offset: local_tz_hhmm(time),
        }
    }
}

/// The local UTC offset at `time` as git's ±HHMM integer.
pub fn local_tz_hhmm(time: u64) -> i16 {
    let t = time as libc::time_t;
    // SAFETY: localtime_r only writes into the zeroed `tm` we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return 0;
    }
    let minutes = tm.tm_gmtoff / 60;
    let (sign, m) = if minutes < 0 {
        (-1, -minutes)
    } else {
        (1, minutes)
    };
    (sign * ((m / 60) * 100 + m % 60)) as i16
}
