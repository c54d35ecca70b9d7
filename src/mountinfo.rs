//! `/proc/self/mountinfo` fields (proc(5)), shared by the mount and `reftablefs status`.

/// Undoes mountinfo's octal escapes (`\040` for a space).
pub fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        if b == b'\\' {
            if let Some(v) = s
                .get(i + 1..i + 4)
                .and_then(|o| std::str::from_utf8(o).ok())
                .and_then(|o| u8::from_str_radix(o, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    out
}
