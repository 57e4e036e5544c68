//! POSIX byte-range locks (`fcntl`) shared by every mount of a striped cache: the server that
//! owns a file's first stripe keeps its locks, so processes on different nodes exclude each
//! other as processes on one node do (ROMIO's data sieving takes such locks around its
//! read-modify-write of a shared file).
//!
//! A lock belongs to a mount's session (a random number each mount draws) and, inside it, to the
//! kernel's lock owner. A session that stops renewing its lease (a mount killed, a node lost)
//! loses its locks after [`LEASE`], so a dead node cannot block the others for ever.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a session's locks outlive its last renewal.
pub const LEASE: Duration = Duration::from_secs(30);

/// Locks a server keeps at most, over all files: one more gets ENOLCK (a client cannot make a
/// server hold unbounded memory by splitting ranges).
pub const MAX_LOCKS: usize = 65_536;

/// What a lock request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `F_RDLCK`: shared.
    Read,
    /// `F_WRLCK`: exclusive.
    Write,
    /// `F_UNLCK`.
    Unlock,
}

/// One lock held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The mount's session.
    pub session: u64,
    /// The kernel's lock owner inside it.
    pub owner: u64,
    /// Exclusive.
    pub write: bool,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive; `u64::MAX`: to the end of the file, however far).
    pub end: u64,
    /// The holder's pid on its own node (what `F_GETLK` reports).
    pub pid: u32,
}

/// Why a lock cannot be had now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Another owner holds a conflicting lock (EAGAIN).
    Conflict,
    /// The table is full (ENOLCK).
    Full,
}

/// The locks of the files whose first stripe this server owns.
#[derive(Debug, Default)]
pub struct LockTable {
    files: HashMap<u64, Vec<Held>>,
    sessions: HashMap<u64, Instant>,
    count: usize,
}

fn overlaps(a: &Held, start: u64, end: u64) -> bool {
    a.start <= end && start <= a.end
}

impl LockTable {
    /// The first lock of another owner that conflicts with `kind` over `start..=end` of `ino`.
    pub fn conflict(
        &self,
        ino: u64,
        session: u64,
        owner: u64,
        kind: Kind,
        start: u64,
        end: u64,
    ) -> Option<Held> {
        if kind == Kind::Unlock {
            return None;
        }
        self.files.get(&ino)?.iter().copied().find(|h| {
            (h.session, h.owner) != (session, owner)
                && overlaps(h, start, end)
                && (h.write || kind == Kind::Write)
        })
    }

    /// Takes, changes or releases (`Kind::Unlock`) the owner's lock over `start..=end`, as
    /// `fcntl(F_SETLK)` does: the owner's own locks in the range are replaced (split where the
    /// range cuts them), never merged with another owner's.
    #[allow(clippy::too_many_arguments)]
    pub fn set(
        &mut self,
        ino: u64,
        session: u64,
        owner: u64,
        kind: Kind,
        start: u64,
        end: u64,
        pid: u32,
        now: Instant,
    ) -> Result<(), Refused> {
        if self
            .conflict(ino, session, owner, kind, start, end)
            .is_some()
        {
            return Err(Refused::Conflict);
        }
        let empty = Vec::new();
        let locks = self.files.get(&ino).unwrap_or(&empty);
        let before = locks.len();
        let mut kept = Vec::with_capacity(locks.len() + 2);
        for h in locks.iter().copied() {
            if (h.session, h.owner) != (session, owner) || !overlaps(&h, start, end) {
                kept.push(h);
                continue;
            }
            // The owner's lock the new range cuts: what lies outside it stays.
            if h.start < start {
                kept.push(Held {
                    end: start - 1,
                    ..h
                });
            }
            if h.end > end {
                kept.push(Held {
                    start: end + 1,
                    ..h
                });
            }
        }
        if kind != Kind::Unlock {
            kept.push(Held {
                session,
                owner,
                write: kind == Kind::Write,
                start,
                end,
                pid,
            });
        }
        let after = kept.len();
        if after > before && self.count + (after - before) > MAX_LOCKS {
            return Err(Refused::Full);
        }
        self.sessions.insert(session, now);
        self.count = self.count + after - before;
        if kept.is_empty() {
            self.files.remove(&ino);
        } else {
            self.files.insert(ino, kept);
        }
        Ok(())
    }

    /// The session is alive: its locks stay for another [`LEASE`].
    pub fn renew(&mut self, session: u64, now: Instant) {
        if let Some(t) = self.sessions.get_mut(&session) {
            *t = now;
        }
    }

    /// Drops every lock of `session` (its mount unmounted).
    pub fn drop_session(&mut self, session: u64) {
        self.sessions.remove(&session);
        self.retain(|h| h.session != session);
    }

    /// Drops the locks of sessions not renewed for [`LEASE`].
    pub fn expire(&mut self, now: Instant) {
        let dead: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, t)| now.duration_since(**t) > LEASE)
            .map(|(s, _)| *s)
            .collect();
        for s in dead {
            self.drop_session(s);
        }
    }

    fn retain(&mut self, keep: impl Fn(&Held) -> bool) {
        let mut count = 0;
        self.files.retain(|_, locks| {
            locks.retain(&keep);
            count += locks.len();
            !locks.is_empty()
        });
        self.count = count;
    }

    /// Locks held, over all files.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No lock held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const END: u64 = u64::MAX;

    #[test]
    fn readers_share_a_writer_excludes_and_an_owner_never_conflicts_with_itself() {
        let mut t = LockTable::default();
        let now = Instant::now();
        assert_eq!(t.set(1, 10, 1, Kind::Read, 0, 99, 7, now), Ok(()));
        assert_eq!(t.set(1, 20, 1, Kind::Read, 50, 150, 8, now), Ok(()));
        assert_eq!(
            t.set(1, 20, 2, Kind::Write, 90, 95, 8, now),
            Err(Refused::Conflict)
        );
        // Another file, or beyond every reader: free.
        assert_eq!(t.set(2, 20, 2, Kind::Write, 90, 95, 8, now), Ok(()));
        assert_eq!(t.set(1, 20, 2, Kind::Write, 151, END, 8, now), Ok(()));
        // The same owner upgrades its own read lock where nobody else reads.
        assert_eq!(t.set(1, 10, 1, Kind::Write, 0, 49, 7, now), Ok(()));
        let c = t
            .conflict(1, 30, 1, Kind::Read, 10, 10)
            .expect("a writer holds it");
        assert_eq!((c.session, c.write, c.pid), (10, true, 7));
    }

    #[test]
    fn an_unlock_in_the_middle_splits_the_lock_and_frees_only_that_range() {
        let mut t = LockTable::default();
        let now = Instant::now();
        t.set(1, 10, 1, Kind::Write, 0, 999, 7, now).expect("lock");
        t.set(1, 10, 1, Kind::Unlock, 100, 199, 7, now)
            .expect("unlock");
        assert_eq!(t.len(), 2);
        assert!(t.conflict(1, 20, 1, Kind::Write, 100, 199).is_none());
        assert!(t.conflict(1, 20, 1, Kind::Write, 99, 99).is_some());
        assert!(t.conflict(1, 20, 1, Kind::Write, 200, 200).is_some());
        t.set(1, 10, 1, Kind::Unlock, 0, END, 7, now)
            .expect("unlock all");
        assert!(t.is_empty());
    }

    #[test]
    fn a_session_that_stops_renewing_loses_its_locks_after_the_lease() {
        let mut t = LockTable::default();
        let t0 = Instant::now();
        t.set(1, 10, 1, Kind::Write, 0, END, 7, t0).expect("lock");
        t.set(1, 20, 1, Kind::Read, 0, END, 8, t0)
            .expect_err("held by session 10");
        t.set(2, 20, 1, Kind::Write, 0, END, 8, t0).expect("lock");
        t.renew(20, t0 + LEASE);
        t.expire(t0 + LEASE + Duration::from_secs(1));
        assert!(
            t.conflict(1, 20, 1, Kind::Write, 0, END).is_none(),
            "10 expired"
        );
        assert!(
            t.conflict(2, 30, 1, Kind::Write, 0, END).is_some(),
            "20 renewed"
        );
        t.drop_session(20);
        assert!(t.is_empty());
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = LockTable::default();
        let now = Instant::now();
        for i in 0..MAX_LOCKS as u64 {
            t.set(i, 1, 1, Kind::Read, 0, 0, 1, now).expect("room");
        }
        assert_eq!(
            t.set(u64::MAX, 1, 1, Kind::Read, 0, 0, 1, now),
            Err(Refused::Full)
        );
        // Unlocking still works, and frees room.
        t.set(0, 1, 1, Kind::Unlock, 0, END, 1, now)
            .expect("unlock");
        t.set(u64::MAX, 1, 1, Kind::Read, 0, 0, 1, now)
            .expect("room again");
    }
}
