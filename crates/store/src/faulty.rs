//! A store that fails or stalls on a test's command.
//!
//! Every fault is triggered by counting operations or by the test releasing a gate, never by
//! time, so a test that uses them is deterministic.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::{Batch, Entries, KeyRange, Store, StoreError};

/// Which operations a [`Stall`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpKind {
    /// `get`, `value_len`, `range`, `prefix` (a range is held when it is created).
    Read,
    /// `put`, `delete`, `batch`.
    Write,
    /// `sync`.
    Sync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GateState {
    /// Waiting for an operation to arrive.
    Armed,
    /// An operation is held at the gate.
    Holding,
}

#[derive(Debug)]
struct Gate {
    id: u64,
    kind: OpKind,
    state: GateState,
}

#[derive(Debug, Default)]
struct State {
    /// Writes that reached the failure check.
    writes: u64,
    /// The value of `writes` at which a write fails.
    fail_write_at: Option<u64>,
    /// Syncs still to fail.
    syncs_to_fail: u64,
    /// Whether a sync panics (a store's bug).
    syncs_panic: bool,
    gates: Vec<Gate>,
    next_gate: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    // A panic while the mutex is held leaves the counters consistent (each change is one
    // assignment), so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The controls of a [`FaultyStore`]; clones control the same store.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Shared>);

impl Faults {
    /// Makes the `n`-th write from now fail (`n = 1`: the next one) with
    /// [`StoreError::Injected`], before it reaches the wrapped store: none of it is applied.
    /// Writes are `put`, `delete` and `batch`, one each. Replaces an earlier `fail_write`.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn fail_write(&self, n: u64) {
        assert!(n > 0, "fail_write(0): the first write from now is n = 1");
        let mut st = self.0.lock();
        st.fail_write_at = Some(st.writes + n);
    }

    /// Makes the next `n` syncs fail with [`StoreError::Injected`] (`u64::MAX`: every sync, a
    /// disk that no longer syncs). The wrapped store is not synced by a failed sync.
    pub fn fail_syncs(&self, n: u64) {
        self.0.lock().syncs_to_fail = n;
    }

    /// Makes every sync from now panic, as a bug in a store would: for tests of what a panic
    /// under a caller leaves behind.
    pub fn panic_syncs(&self) {
        self.0.lock().syncs_panic = true;
    }

    /// Writes seen so far (including failed ones).
    pub fn writes(&self) -> u64 {
        self.0.lock().writes
    }

    /// Holds the next operation of `kind` when it starts, until the returned [`Stall`] is
    /// released or dropped. Several stalls of one kind hold successive operations.
    pub fn stall(&self, kind: OpKind) -> Stall {
        let mut st = self.0.lock();
        let id = st.next_gate;
        st.next_gate += 1;
        st.gates.push(Gate {
            id,
            kind,
            state: GateState::Armed,
        });
        Stall {
            shared: Arc::clone(&self.0),
            id,
        }
    }

    /// Holds the calling operation at the first armed gate of its kind, if there is one.
    fn gate(&self, kind: OpKind) {
        let mut st = self.0.lock();
        let Some(g) = st
            .gates
            .iter_mut()
            .find(|g| g.kind == kind && g.state == GateState::Armed)
        else {
            return;
        };
        g.state = GateState::Holding;
        let id = g.id;
        self.0.changed.notify_all();
        // Released when the gate is gone.
        let _released = self
            .0
            .changed
            .wait_while(st, |st| st.gates.iter().any(|g| g.id == id))
            .unwrap_or_else(PoisonError::into_inner);
    }

    fn check_write(&self, op: &'static str) -> Result<(), StoreError> {
        let mut st = self.0.lock();
        st.writes += 1;
        if st.fail_write_at == Some(st.writes) {
            st.fail_write_at = None;
            return Err(StoreError::Injected { op });
        }
        Ok(())
    }

    fn check_sync(&self) -> Result<(), StoreError> {
        let mut st = self.0.lock();
        if st.syncs_panic {
            drop(st);
            panic!("an injected fault: the store's sync panics");
        }
        if st.syncs_to_fail > 0 {
            st.syncs_to_fail -= 1;
            return Err(StoreError::Injected { op: "sync" });
        }
        Ok(())
    }
}

/// A gate armed by [`Faults::stall`]: the operation it catches waits until [`Stall::release`]
/// (or the drop of this handle, so a failing test does not leave a thread blocked).
#[derive(Debug)]
pub struct Stall {
    shared: Arc<Shared>,
    id: u64,
}

impl Stall {
    /// Waits until an operation is held at this gate; `false` if none arrived within `limit`
    /// (a bound for a broken test, not a timing assumption: the operation stays held until
    /// released, so once this returns `true` the test knows exactly where it is).
    pub fn wait_held(&self, limit: Duration) -> bool {
        let st = self.shared.lock();
        let (st, _) = self
            .shared
            .changed
            .wait_timeout_while(st, limit, |st| {
                st.gates
                    .iter()
                    .any(|g| g.id == self.id && g.state == GateState::Armed)
            })
            .unwrap_or_else(PoisonError::into_inner);
        st.gates
            .iter()
            .any(|g| g.id == self.id && g.state == GateState::Holding)
    }

    /// Lets the held operation go on (or disarms the gate if none arrived yet).
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.gates.retain(|g| g.id != self.id);
        self.shared.changed.notify_all();
    }
}

/// A store that passes every operation to `S`, except those a test makes fail or stall through
/// its [`Faults`].
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    faults: Faults,
}

impl<S: Store> FaultyStore<S> {
    /// Wraps `inner`, with no fault armed.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            faults: Faults::default(),
        }
    }

    /// The controls (a handle that can move to another thread).
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The wrapped store, bypassing the faults.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the store.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn write(&self, op: &'static str) -> Result<(), StoreError> {
        self.faults.gate(OpKind::Write);
        self.faults.check_write(op)
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.faults.gate(OpKind::Read);
        self.inner.get(key)
    }

    fn value_len(&self, key: &[u8]) -> Result<Option<usize>, StoreError> {
        self.faults.gate(OpKind::Read);
        self.inner.value_len(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.write("put")?;
        self.inner.put(key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        self.write("delete")?;
        self.inner.delete(key)
    }

    fn batch(&self, batch: &Batch) -> Result<(), StoreError> {
        self.write("batch")?;
        self.inner.batch(batch)
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.faults.gate(OpKind::Sync);
        self.faults.check_sync()?;
        self.inner.sync()
    }

    fn range(&self, range: KeyRange<'_>) -> Entries<'_> {
        self.faults.gate(OpKind::Read);
        self.inner.range(range)
    }

    fn prefix(&self, prefix: &[u8]) -> Entries<'_> {
        self.faults.gate(OpKind::Read);
        self.inner.prefix(prefix)
    }
}
