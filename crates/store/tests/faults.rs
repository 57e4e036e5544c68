//! The fault-injecting wrapper: failed writes leave nothing behind, failed syncs surface, and a
//! stalled operation waits for the test. Nothing here depends on timing: stalls are released by
//! the test, and the only time limit is a bound for a broken test.

use std::time::Duration;

use pliant_store::{ALL, Batch, FaultyStore, FjallStore, MemStore, OpKind, Store, StoreError};

/// Long enough never to matter for a working store; it only stops a broken test from hanging.
const LIMIT: Duration = Duration::from_secs(60);

fn nth_write_fails_and_none_of_it_is_applied<S: Store>(s: FaultyStore<S>) {
    let faults = s.faults();
    faults.fail_write(3);
    s.put(b"a", b"1").expect("first write");
    s.delete(b"nothing").expect("second write");
    let mut b = Batch::new();
    b.put(b"c", b"3").put(b"d", b"4").delete(b"a");
    assert!(matches!(
        s.batch(&b),
        Err(StoreError::Injected { op: "batch" })
    ));
    assert_eq!(
        s.range(ALL).collect::<Result<Vec<_>, _>>().expect("scan"),
        vec![(b"a".to_vec(), b"1".to_vec())],
        "nothing of the failed batch is visible"
    );
    assert_eq!(
        s.inner().get(b"c").expect("get"),
        None,
        "nor in the wrapped store"
    );
    // Only the n-th write fails.
    s.batch(&b).expect("the retry");
    assert_eq!(s.get(b"c").expect("get").as_deref(), Some(&b"3"[..]));
    assert_eq!(s.get(b"a").expect("get"), None);
    assert_eq!(faults.writes(), 4);

    faults.fail_write(1);
    assert!(matches!(
        s.put(b"e", b"5"),
        Err(StoreError::Injected { op: "put" })
    ));
    assert_eq!(s.get(b"e").expect("get"), None);
    faults.fail_write(1);
    assert!(matches!(
        s.delete(b"c"),
        Err(StoreError::Injected { op: "delete" })
    ));
    assert!(
        s.get(b"c").expect("get").is_some(),
        "the failed delete kept c"
    );
}

#[test]
fn nth_write_fails_and_none_of_it_is_applied_mem() {
    nth_write_fails_and_none_of_it_is_applied(FaultyStore::new(MemStore::new()));
}

#[test]
fn nth_write_fails_and_none_of_it_is_applied_fjall() {
    nth_write_fails_and_none_of_it_is_applied(FaultyStore::new(
        FjallStore::temporary().expect("store"),
    ));
}

#[test]
fn failed_syncs_surface_and_the_next_ones_succeed() {
    let s = FaultyStore::new(FjallStore::temporary().expect("store"));
    let faults = s.faults();
    s.put(b"a", b"1").expect("put");
    faults.fail_syncs(2);
    for _ in 0..2 {
        let e = s.sync().expect_err("injected");
        assert!(matches!(e, StoreError::Injected { op: "sync" }));
        assert!(e.to_string().contains("sync"), "{e}");
    }
    s.sync().expect("the third sync");
    // A sync failure does not fail writes.
    faults.fail_syncs(u64::MAX);
    s.put(b"b", b"2").expect("put");
    assert!(s.sync().is_err());
    assert!(s.sync().is_err());
    faults.fail_syncs(0);
    s.sync().expect("cleared");
}

#[test]
fn a_stalled_write_waits_for_the_test_and_reads_go_on() {
    let s = FaultyStore::new(MemStore::new());
    let stall = s.faults().stall(OpKind::Write);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| s.put(b"k", b"v"));
        assert!(stall.wait_held(LIMIT), "the put reached the gate");
        // Held, so it cannot have returned, nor written.
        assert!(!writer.is_finished());
        assert_eq!(
            s.get(b"k").expect("a read is not held by a write stall"),
            None
        );
        assert_eq!(s.faults().writes(), 0);
        stall.release();
        writer
            .join()
            .expect("join")
            .expect("the put, once released");
    });
    assert_eq!(s.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
    // The gate is gone: the next write passes.
    s.put(b"k2", b"v").expect("put");
}

#[test]
fn stalls_hold_successive_operations_of_their_kind() {
    let s = FaultyStore::new(MemStore::new());
    s.put(b"k", b"v").expect("put");
    let faults = s.faults();
    let first = faults.stall(OpKind::Sync);
    let second = faults.stall(OpKind::Sync);
    let read = faults.stall(OpKind::Read);
    assert!(!read.wait_held(Duration::ZERO), "nothing has read yet");
    std::thread::scope(|scope| {
        let a = scope.spawn(|| s.sync());
        assert!(first.wait_held(LIMIT));
        let b = scope.spawn(|| s.sync());
        assert!(second.wait_held(LIMIT));
        let r = scope.spawn(|| s.get(b"k"));
        assert!(read.wait_held(LIMIT));
        assert!(!a.is_finished() && !b.is_finished() && !r.is_finished());
        // Releasing the second first: each operation waits for its own gate only.
        second.release();
        b.join().expect("join").expect("second sync");
        assert!(!a.is_finished());
        // Dropping a stall releases it, so a failing test does not leave a thread blocked.
        drop(first);
        a.join().expect("join").expect("first sync");
        drop(read);
        assert_eq!(
            r.join().expect("join").expect("get").as_deref(),
            Some(&b"v"[..])
        );
    });
}

#[test]
fn a_stall_released_before_any_operation_holds_nothing() {
    let s = FaultyStore::new(MemStore::new());
    let stall = s.faults().stall(OpKind::Write);
    stall.release();
    s.put(b"k", b"v").expect("not held");
}
