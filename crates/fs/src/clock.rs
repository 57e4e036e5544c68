//! Time, injected: the write window and file times read it, and tests move it by hand.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Where the cache reads the time.
pub trait Clock: Send + Sync {
    /// Wall-clock now.
    fn now(&self) -> SystemTime;
}

/// The system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told: for tests of the write window.
#[derive(Debug)]
pub struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    /// Starts at `t`.
    pub fn new(t: SystemTime) -> Self {
        Self(Mutex::new(t))
    }
    /// Moves the clock forward.
    pub fn advance(&self, d: Duration) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *t += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
