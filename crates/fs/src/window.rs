//! DataWarp's excessive-write protection: at most `multiplier × capacity` bytes may be written
//! into the cache per window, so a runaway job cannot wear out the SSDs; past it writes fail with
//! EDQUOT until the window rolls over.

use std::time::{Duration, SystemTime};

/// Bytes written in the current window.
#[derive(Debug)]
pub(crate) struct WriteWindow {
    limit: u64,
    length: Duration,
    start: Option<SystemTime>,
    used: u64,
    /// Writes refused in this window: the first one is logged.
    refused: u64,
}

/// A write the window refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverQuota {
    pub used: u64,
    pub limit: u64,
    /// True for the first refusal of a window: the one worth a log line.
    pub first: bool,
}

impl WriteWindow {
    pub fn new(limit: u64, length: Duration) -> Self {
        Self {
            limit,
            length,
            start: None,
            used: 0,
            refused: 0,
        }
    }

    /// Charges `bytes` written at `now`, or refuses them.
    pub fn charge(&mut self, bytes: u64, now: SystemTime) -> Result<(), OverQuota> {
        let rolled = match self.start {
            None => true,
            // A clock that went backwards starts a new window rather than locking writes out.
            Some(s) => now.duration_since(s).map_or(true, |d| d >= self.length),
        };
        if rolled {
            self.start = Some(now);
            self.used = 0;
            self.refused = 0;
        }
        if self.used.saturating_add(bytes) > self.limit {
            self.refused += 1;
            return Err(OverQuota {
                used: self.used,
                limit: self.limit,
                first: self.refused == 1,
            });
        }
        self.used += bytes;
        Ok(())
    }

    /// (bytes used, limit, seconds left in the window).
    pub fn usage(&self, now: SystemTime) -> (u64, u64, f64) {
        let left = self
            .start
            .and_then(|s| now.duration_since(s).ok())
            .map_or(self.length, |d| self.length.saturating_sub(d));
        let used = if left.is_zero() { 0 } else { self.used };
        (used, self.limit, left.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_until_the_window_rolls_over() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut w = WriteWindow::new(100, Duration::from_secs(60));
        assert_eq!(w.charge(60, t0), Ok(()));
        assert_eq!(w.charge(40, t0), Ok(()));
        let e = w.charge(1, t0 + Duration::from_secs(59)).expect_err("over");
        assert_eq!((e.used, e.limit, e.first), (100, 100, true));
        assert!(
            !w.charge(1, t0 + Duration::from_secs(59))
                .expect_err("over")
                .first
        );
        assert_eq!(w.charge(100, t0 + Duration::from_secs(60)), Ok(()));
        assert_eq!(w.usage(t0 + Duration::from_secs(70)).0, 100);
    }
}
