//! The commands' counters (`INFO commandstats`, `total_commands_processed`), kept per thread.
//!
//! Every command adds to them. One set for all would be a write to lines every worker thread
//! shares, bounced between their cores on every command (issue 29 added `commandstats`, and the
//! pipelined cells of `tools/bench/vs_redis.sh` lost 5-16%); so each thread adds to a set of its
//! own, as the transactions' gate keeps a lock per thread ([`super::exec_gate`]), and a reader
//! sums them. A connection first counts a batch's commands in its own [`BatchCounts`] (no atomic
//! at all) and folds them in once a batch: a pipeline of 16 GETs costs three atomic adds, not
//! 48. A command that reads the counters (INFO, CLIENT, PLIANT.STATS) folds its batch's first, so
//! it sees every command before it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::CommandStats;
use super::exec_gate::{SHARDS, thread_shard};

/// One command's counters.
#[derive(Debug, Default)]
struct CommandCounters {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

/// One thread's counters: the commands run, and each command's, by its index in
/// [`crate::COMMANDS`] (in an allocation of its own).
#[repr(align(128))]
#[derive(Debug)]
struct Shard {
    commands: AtomicU64,
    each: Box<[CommandCounters]>,
}

/// One connection's counts of the batch it is running (see the module doc).
#[derive(Debug, Default)]
pub struct BatchCounts {
    commands: u64,
    /// `(calls, usec, failed)` by command index; allocated at the first command.
    each: Vec<(u64, u64, u64)>,
    /// The indices counted since the last fold.
    touched: Vec<usize>,
    /// The batch's last command so far and when it started (`mono_ns`), for CLIENT LIST's `cmd` and
    /// `idle`: handed to the connection's registry entry at the fold, not written there by
    /// every command.
    pub(crate) last: Option<(usize, u64)>,
}

impl BatchCounts {
    /// A command ran.
    pub(crate) fn command(&mut self) {
        self.commands += 1;
    }

    /// Command `i` ran for `usec`, and failed or not.
    #[inline]
    pub(crate) fn call(&mut self, i: usize, usec: u64, failed: bool) {
        if self.each.is_empty() {
            self.each = vec![(0, 0, 0); crate::COMMANDS.len()];
        }
        let Some(c) = self.each.get_mut(i) else {
            return;
        };
        if c.0 == 0 {
            self.touched.push(i);
        }
        c.0 += 1;
        c.1 += usec;
        c.2 += u64::from(failed);
    }
}

/// See the module doc.
#[derive(Debug)]
pub(crate) struct Counters {
    shards: Box<[Shard]>,
}

impl Counters {
    /// Counters for `commands` commands.
    pub(crate) fn new(commands: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    commands: AtomicU64::new(0),
                    each: (0..commands).map(|_| CommandCounters::default()).collect(),
                })
                .collect(),
        }
    }

    fn mine(&self) -> &Shard {
        &self.shards[thread_shard()]
    }

    /// A command ran (`total_commands_processed`).
    pub(crate) fn command(&self) {
        self.mine().commands.fetch_add(1, Ordering::Relaxed);
    }

    /// Command `i` was refused before it ran.
    pub(crate) fn rejected(&self, i: usize) {
        if let Some(c) = self.mine().each.get(i) {
            c.rejected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds a connection's counts and empties them.
    pub(crate) fn fold(&self, b: &mut BatchCounts) {
        let mine = self.mine();
        if b.commands > 0 {
            mine.commands.fetch_add(b.commands, Ordering::Relaxed);
            b.commands = 0;
        }
        for i in b.touched.drain(..) {
            let (calls, usec, failed) = std::mem::take(&mut b.each[i]);
            if let Some(c) = mine.each.get(i) {
                c.calls.fetch_add(calls, Ordering::Relaxed);
                c.usec.fetch_add(usec, Ordering::Relaxed);
                if failed > 0 {
                    c.failed.fetch_add(failed, Ordering::Relaxed);
                }
            }
        }
    }

    /// Commands run so far, every thread's.
    pub(crate) fn commands(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.commands.load(Ordering::Relaxed))
            .sum()
    }

    /// Each command's counters, every thread's summed, by index.
    pub(crate) fn each(&self) -> Vec<CommandStats> {
        let n = self.shards.first().map_or(0, |s| s.each.len());
        (0..n)
            .map(|i| {
                let mut t = CommandStats::default();
                for s in self.shards.iter() {
                    let c = &s.each[i];
                    t.calls += c.calls.load(Ordering::Relaxed);
                    t.usec += c.usec.load(Ordering::Relaxed);
                    t.rejected += c.rejected.load(Ordering::Relaxed);
                    t.failed += c.failed.load(Ordering::Relaxed);
                }
                t
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts added on many threads are all there when read.
    #[test]
    fn every_thread_s_counts_are_summed() {
        let c = std::sync::Arc::new(Counters::new(3));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut b = BatchCounts::default();
                    for _ in 0..1000 {
                        c.command();
                        b.call(1, 2, t % 2 == 0);
                    }
                    c.fold(&mut b);
                    c.rejected(2);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(c.commands(), 8000);
        let each = c.each();
        assert_eq!(each.len(), 3);
        assert_eq!(
            (each[1].calls, each[1].usec, each[1].failed),
            (8000, 16000, 4000)
        );
        assert_eq!((each[0].calls, each[2].rejected), (0, 8));
    }

    /// A connection's batch counts reach the node when folded, once, and start again empty.
    #[test]
    fn a_batch_s_counts_are_folded_once() {
        let c = Counters::new(crate::COMMANDS.len());
        let mut b = BatchCounts::default();
        for failed in [false, true, false] {
            b.command();
            b.call(1, 5, failed);
        }
        assert_eq!(c.commands(), 0, "nothing until the fold");
        c.fold(&mut b);
        c.fold(&mut b);
        assert_eq!(c.commands(), 3);
        let one = c.each()[1];
        assert_eq!((one.calls, one.usec, one.failed), (3, 15, 1));
    }
}
