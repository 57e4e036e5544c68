//! The transactions' gate: every command holds it shared while it runs, EXEC exclusively, so no
//! other client's command runs between a transaction's commands.
//!
//! One `RwLock` for all would put one cache line under every command of every worker thread:
//! each shared lock is a write to that line, so two threads running commands bounce it between
//! their cores on every command (issue 29's gate cost the pipelined cells of
//! `tools/bench/vs_redis.sh` several percent). Here each thread takes a lock of its own, on a
//! line of its own; EXEC, rare, takes them all, always in the same order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks: more than the threads that run commands (a runtime's workers, and the blocking pool's
/// rare caller), so threads seldom share one; sharing is correct, only slower.
pub(super) const SHARDS: usize = 16;

/// One lock on a cache line of its own (128 bytes: two lines, as adjacent-line prefetch pairs
/// them on x86).
#[repr(align(128))]
#[derive(Default)]
struct Shard(RwLock<()>);

/// See the module doc.
pub(crate) struct ExecGate {
    shards: [Shard; SHARDS],
}

impl Default for ExecGate {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Shard::default()),
        }
    }
}

/// The calling thread's shard (of its lock here, of its counters): threads are numbered as they
/// first ask.
pub(super) fn thread_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    MINE.with(|m| *m)
}

impl ExecGate {
    /// Held while one command runs.
    pub(crate) fn shared(&self) -> RwLockReadGuard<'_, ()> {
        // A panic while it was held poisons nothing the gate guards: it guards no data.
        self.shards[thread_shard()]
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Held while a transaction's commands run: every thread's lock, in order.
    pub(crate) fn exclusive(&self) -> Vec<RwLockWriteGuard<'_, ()>> {
        self.shards
            .iter()
            .map(|s| s.0.write().unwrap_or_else(|p| p.into_inner()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    /// EXEC waits for a command running on any thread, and no command starts on any thread while
    /// EXEC holds the gate.
    #[test]
    fn exclusive_keeps_out_every_thread_s_commands() {
        let gate = Arc::new(ExecGate::default());
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        // A command running on another thread.
        let runner = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let _g = gate.shared();
                held_tx.send(()).expect("send");
                release_rx
                    .recv_timeout(Duration::from_secs(30))
                    .expect("released");
            })
        };
        held_rx.recv_timeout(Duration::from_secs(30)).expect("held");
        let exclusive_held = Arc::new(AtomicBool::new(false));
        let exec = {
            let (gate, flag) = (gate.clone(), exclusive_held.clone());
            std::thread::spawn(move || {
                let _all = gate.exclusive();
                flag.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
                flag.store(false, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !exclusive_held.load(Ordering::SeqCst),
            "EXEC waits for the command running"
        );
        release_tx.send(()).expect("send");
        runner.join().expect("runner");
        // Commands on many threads, each checking EXEC is not inside.
        let checkers: Vec<_> = (0..8)
            .map(|_| {
                let (gate, flag) = (gate.clone(), exclusive_held.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _g = gate.shared();
                        assert!(!flag.load(Ordering::SeqCst), "a command ran inside EXEC");
                    }
                })
            })
            .collect();
        exec.join().expect("exec");
        for c in checkers {
            c.join().expect("no command ran inside EXEC");
        }
    }
}
