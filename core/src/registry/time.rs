//! The manifest's times: RFC 3339 UTC to the second (`2026-11-25T03:00:00Z`), the one form a
//! publisher writes and a reader accepts, as seconds since the Unix epoch. No clock here: the
//! caller passes the current time in.

/// Seconds since the Unix epoch of `text`, exactly `YYYY-MM-DDTHH:MM:SSZ` (years 1970 to 9999,
/// a real calendar date, no leap second, no fraction, no other offset); `None` otherwise.
pub fn parse_utc(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z' {
        return None;
    }
    let num = |at: usize, len: usize| -> Option<u64> {
        b[at..at + len].iter().try_fold(0u64, |n, &c| c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0')))
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if year < 1970 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (what [`parse_utc`] reads back).
pub fn format_utc(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date on or after it (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_utc("2026-11-25T03:00:00Z"), Some(1_795_575_600));
        assert_eq!(parse_utc("2000-02-29T23:59:59Z"), Some(951_868_799));
        assert_eq!(parse_utc("9999-12-31T23:59:59Z"), Some(253_402_300_799));
        assert_eq!(format_utc(1_795_575_600), "2026-11-25T03:00:00Z");
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn round_trips_every_day_for_centuries() {
        // Each day from 1970 to 2400 at a varying time of day: leap years, centuries, 2100.
        for day in 0..157_000u64 {
            let secs = day * 86_400 + (day * 7919) % 86_400;
            let text = format_utc(secs);
            assert_eq!(parse_utc(&text), Some(secs), "{text}");
        }
    }

    #[test]
    fn refuses_every_other_form() {
        for bad in [
            "",
            "2026-11-25T03:00:00",
            "2026-11-25T03:00:00z",
            "2026-11-25 03:00:00Z",
            "2026-11-25T03:00:00.5Z",
            "2026-11-25T03:00:00+00:00",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-00T00:00:00Z",
            "2026-11-25T24:00:00Z",
            "2026-11-25T23:60:00Z",
            "2026-12-31T23:59:60Z",
            "1969-12-31T23:59:59Z",
            "+026-11-25T03:00:00Z",
            "2026-1a-25T03:00:00Z",
            "２026-11-25T03:00:00Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad:?}");
        }
        assert_eq!(parse_utc("2024-02-29T00:00:00Z"), Some(1_709_164_800));
    }
}
