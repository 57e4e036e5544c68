//! Decision intervals as users write them, the same everywhere in Pliant: `10s`, `500ms`, `2m`,
//! `1h`, or plain seconds (`10`, `0.5`).

use std::time::Duration;

/// Parses an interval: a positive number with an optional unit (`ms`, `s`, `m`, `h`; none means
/// seconds). Zero, negative and non-finite intervals are errors, as is anything else; the error
/// names the text and the accepted forms.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "interval {s:?}: expected a positive duration such as 10s, 500ms, 2m, 1h or 10 (seconds)"
        )
    };
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let secs = v * scale;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(bad());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_users_write_parses() {
        for (s, ms) in [
            ("10s", 10_000),
            ("500ms", 500),
            ("10", 10_000),
            ("0.5", 500),
            ("2m", 120_000),
            ("1h", 3_600_000),
            (" 1.5 s ", 1_500),
        ] {
            assert_eq!(parse_interval(s), Ok(Duration::from_millis(ms)), "{s}");
        }
        for s in ["", "0", "-1s", "10 parsecs", "s", "inf", "nan"] {
            let e = parse_interval(s).expect_err(s);
            assert!(e.contains("10s, 500ms"), "{e}");
        }
    }
}
