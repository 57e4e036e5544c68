//! The contract of `Store`, run against every backend: each test is written once over
//! `&dyn Store` and instantiated per backend by `backends!`.

use std::ops::Bound::{Excluded, Included, Unbounded};

use pliant_store::{
    ALL, Batch, Entry, FaultyStore, FjallStore, MAX_KEY_LEN, MemStore, Store, StoreError,
};

fn collect(it: pliant_store::Entries<'_>) -> Vec<Entry> {
    it.collect::<Result<_, _>>().expect("iterate")
}

fn keys(it: pliant_store::Entries<'_>) -> Vec<Vec<u8>> {
    collect(it).into_iter().map(|(k, _)| k).collect()
}

fn put_get_overwrite_delete(s: &dyn Store) {
    assert_eq!(s.get(b"a").expect("get"), None);
    assert_eq!(s.value_len(b"a").expect("len"), None);
    s.put(b"a", b"one").expect("put");
    assert_eq!(s.get(b"a").expect("get").as_deref(), Some(&b"one"[..]));
    assert_eq!(s.value_len(b"a").expect("len"), Some(3));
    s.put(b"a", b"three").expect("overwrite");
    assert_eq!(s.get(b"a").expect("get").as_deref(), Some(&b"three"[..]));
    s.delete(b"a").expect("delete");
    assert_eq!(s.get(b"a").expect("get"), None);
    s.delete(b"never")
        .expect("deleting an absent key is not an error");
}

fn arbitrary_bytes_and_empty_values(s: &dyn Store) {
    let key = [0u8, 255, 10, 13, 0];
    s.put(&key, &[]).expect("empty value");
    assert_eq!(s.get(&key).expect("get"), Some(Vec::new()));
    s.put(b"", b"empty key").expect("empty key");
    assert_eq!(s.get(b"").expect("get").as_deref(), Some(&b"empty key"[..]));
    assert_eq!(keys(s.range(ALL)), vec![b"".to_vec(), key.to_vec()]);
}

fn oversized_keys_are_refused_not_written(s: &dyn Store) {
    let long = vec![7u8; MAX_KEY_LEN + 1];
    assert!(matches!(
        s.put(&long, b"v"),
        Err(StoreError::TooLarge { what: "key", .. })
    ));
    let mut b = Batch::new();
    b.put(b"ok", b"v").put(&long, b"v");
    assert!(matches!(s.batch(&b), Err(StoreError::TooLarge { .. })));
    assert_eq!(s.get(b"ok").expect("get"), None, "the batch wrote nothing");
    assert!(matches!(s.delete(&long), Err(StoreError::TooLarge { .. })));
    let max = vec![7u8; MAX_KEY_LEN];
    s.put(&max, b"v").expect("a key at the limit");
    assert_eq!(s.value_len(&max).expect("get"), Some(1));
    // Reads with such a key find nothing and do not fail.
    assert_eq!(s.get(&long).expect("get"), None);
    assert!(keys(s.prefix(&long)).is_empty());
    assert_eq!(
        keys(s.range((Included(&max[..]), Included(&long[..])))),
        vec![max.clone()]
    );
    assert!(keys(s.range((Excluded(&long[..]), Unbounded))).is_empty());
}

fn batch_applies_in_order(s: &dyn Store) {
    s.put(b"gone", b"x").expect("put");
    let mut b = Batch::new();
    b.put(b"k1", b"1")
        .put(b"k2", b"2")
        .delete(b"gone")
        .put(b"k1", b"again")
        .delete(b"k2");
    assert_eq!(b.len(), 5);
    s.batch(&b).expect("batch");
    assert_eq!(
        collect(s.range(ALL)),
        vec![(b"k1".to_vec(), b"again".to_vec())],
        "a later write to a key wins"
    );
    s.batch(&Batch::new()).expect("an empty batch");
}

/// Readers on other threads never see part of a batch: every snapshot they take holds all of
/// a batch's keys or none (each batch writes the same generation number to every key).
fn batch_is_atomic_for_readers(s: &dyn Store) {
    const KEYS: usize = 8;
    const BATCHES: u32 = 200;
    let key = |i: usize| format!("key{i}").into_bytes();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for g in 1..=BATCHES {
                let mut b = Batch::new();
                for i in 0..KEYS {
                    b.put(&key(i), &g.to_be_bytes());
                }
                s.batch(&b).expect("batch");
            }
        });
        let mut seen = 0;
        loop {
            let done = writer.is_finished();
            let snapshot = collect(s.range(ALL));
            let gens: Vec<_> = snapshot.iter().map(|(_, v)| v.clone()).collect();
            assert!(
                snapshot.is_empty() || snapshot.len() == KEYS,
                "a snapshot holds part of a batch: {} keys",
                snapshot.len()
            );
            assert!(
                gens.windows(2).all(|w| w[0] == w[1]),
                "a snapshot mixes two batches: {gens:?}"
            );
            seen += 1;
            if done {
                break;
            }
        }
        assert!(seen > 0);
    });
    let last = BATCHES.to_be_bytes().to_vec();
    for i in 0..KEYS {
        assert_eq!(s.get(&key(i)).expect("get"), Some(last.clone()));
    }
}

fn range_bounds_and_order(s: &dyn Store) {
    // Inserted out of order; bytewise order puts "b" before "b\0" before "ba" before "c".
    for k in [&b"c"[..], b"ba", b"a", b"b\0", b"b", b"\xff"] {
        s.put(k, k).expect("put");
    }
    let all = keys(s.range(ALL));
    assert_eq!(
        all,
        [&b"a"[..], b"b", b"b\0", b"ba", b"c", b"\xff"].map(|k| k.to_vec())
    );
    for (k, v) in collect(s.range(ALL)) {
        assert_eq!(k, v);
    }
    let r = |lo, hi| keys(s.range((lo, hi)));
    assert_eq!(
        r(Included(&b"b"[..]), Excluded(&b"c"[..])),
        [&b"b"[..], b"b\0", b"ba"].map(|k| k.to_vec())
    );
    assert_eq!(
        r(Excluded(&b"b"[..]), Included(&b"c"[..])),
        [&b"b\0"[..], b"ba", b"c"].map(|k| k.to_vec())
    );
    assert_eq!(r(Unbounded, Excluded(&b"b"[..])), vec![b"a".to_vec()]);
    assert_eq!(
        r(Included(&b"c"[..]), Unbounded),
        vec![b"c".to_vec(), b"\xff".to_vec()]
    );
    // Empty and inverted ranges yield nothing (BTreeMap would panic on some of them).
    assert!(r(Included(&b"c"[..]), Excluded(&b"c"[..])).is_empty());
    assert!(r(Excluded(&b"c"[..]), Excluded(&b"c"[..])).is_empty());
    assert!(r(Included(&b"c"[..]), Included(&b"a"[..])).is_empty());
    assert_eq!(
        r(Included(&b"c"[..]), Included(&b"c"[..])),
        vec![b"c".to_vec()]
    );
}

fn prefix_order_and_edges(s: &dyn Store) {
    for k in [
        &b"user:2"[..],
        b"user:10",
        b"user;",
        b"user",
        b"user:1",
        b"usera",
        b"\xff\xff",
        b"\xff\xff\x01",
        b"\xff",
    ] {
        s.put(k, b"").expect("put");
    }
    assert_eq!(
        keys(s.prefix(b"user:")),
        [&b"user:1"[..], b"user:10", b"user:2"].map(|k| k.to_vec())
    );
    assert_eq!(
        keys(s.prefix(b"user")),
        [
            &b"user"[..],
            b"user:1",
            b"user:10",
            b"user:2",
            b"user;",
            b"usera"
        ]
        .map(|k| k.to_vec())
    );
    // A prefix of 0xff bytes has no upper bound key.
    assert_eq!(
        keys(s.prefix(b"\xff\xff")),
        vec![b"\xff\xff".to_vec(), b"\xff\xff\x01".to_vec()]
    );
    assert_eq!(keys(s.prefix(b"")).len(), 9);
    assert!(keys(s.prefix(b"nobody")).is_empty());
}

fn iterators_are_snapshots(s: &dyn Store) {
    s.put(b"a", b"1").expect("put");
    s.put(b"b", b"1").expect("put");
    let mut it = s.range(ALL);
    let first = it.next().expect("an entry").expect("ok");
    s.put(b"b", b"2").expect("put");
    s.put(b"c", b"2").expect("put");
    let rest: Vec<_> = it.collect::<Result<_, _>>().expect("iterate");
    assert_eq!(first, (b"a".to_vec(), b"1".to_vec()));
    assert_eq!(rest, vec![(b"b".to_vec(), b"1".to_vec())]);
}

fn sync_succeeds_and_keeps_data(s: &dyn Store) {
    s.put(b"a", b"1").expect("put");
    s.sync().expect("sync");
    s.sync().expect("sync with nothing new");
    assert_eq!(s.get(b"a").expect("get").as_deref(), Some(&b"1"[..]));
}

fn shared_across_threads(s: &dyn Store) {
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            scope.spawn(move || {
                for i in 0..50u8 {
                    s.put(&[t, i], &[i]).expect("put");
                }
            });
        }
    });
    let all = collect(s.range(ALL));
    assert_eq!(all.len(), 200);
    assert!(all.iter().all(|(k, v)| k[1] == v[0]));
}

/// A batch by the bulk path: deletes and overwrites of what was there, a value large enough to
/// live beside the tree, then a write after it wins; keys out of order take the ordinary path.
fn ingest_is_a_batch(s: &dyn Store) {
    s.put(b"b", b"old").expect("put");
    s.put(b"d", b"gone").expect("put");
    let big = vec![7u8; 4000];
    let mut b = Batch::new();
    b.put(b"a", b"1")
        .put(b"b", b"2")
        .delete(b"d")
        .put(b"e", &big);
    s.ingest(&b).expect("ingest");
    assert_eq!(
        collect(s.range(ALL)),
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec()),
            (b"e".to_vec(), big.clone()),
        ]
    );
    s.put(b"b", b"3").expect("put after");
    assert_eq!(s.get(b"b").expect("get").as_deref(), Some(&b"3"[..]));
    let mut unordered = Batch::new();
    unordered.put(b"z", b"1").put(b"c", b"1").put(b"c", b"2");
    s.ingest(&unordered).expect("ingest out of order");
    assert_eq!(s.get(b"c").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(s.get(b"z").expect("get").as_deref(), Some(&b"1"[..]));
    s.sync().expect("sync");
}

macro_rules! backends {
    ($($name:ident),* $(,)?) => {
        mod mem {
            use super::*;
            $(#[test] fn $name() { super::$name(&MemStore::new()) })*
        }
        mod fjall {
            use super::*;
            $(#[test] fn $name() { super::$name(&FjallStore::temporary().expect("store")) })*
        }
        mod write_behind {
            $(#[test] fn $name() {
                // Applied every millisecond: readers meet writes in every place they can be.
                let opts = pliant_store::WriteBehindOptions {
                    apply_every: std::time::Duration::from_millis(1),
                    max_pending_bytes: 1 << 10,
                    ingest_from: usize::MAX,
                    preallocate: 0,
                };
                super::$name(&pliant_store::WriteBehind::temporary(opts).expect("store"))
            })*
        }
        mod write_behind_ingesting {
            $(#[test] fn $name() {
                // The same, every application ingested into the tree (fjall's bulk path).
                let opts = pliant_store::WriteBehindOptions {
                    apply_every: std::time::Duration::from_millis(1),
                    max_pending_bytes: 1 << 10,
                    ingest_from: 0,
                    preallocate: 0,
                };
                super::$name(&pliant_store::WriteBehind::temporary(opts).expect("store"))
            })*
        }
        mod faulty_mem {
            use super::*;
            $(#[test] fn $name() { super::$name(&FaultyStore::new(MemStore::new())) })*
        }
        mod arc_dyn {
            use super::*;
            $(#[test] fn $name() {
                let s: std::sync::Arc<dyn Store> = std::sync::Arc::new(MemStore::new());
                super::$name(&s)
            })*
        }
    };
}

backends!(
    ingest_is_a_batch,
    put_get_overwrite_delete,
    arbitrary_bytes_and_empty_values,
    oversized_keys_are_refused_not_written,
    batch_applies_in_order,
    batch_is_atomic_for_readers,
    range_bounds_and_order,
    prefix_order_and_edges,
    iterators_are_snapshots,
    sync_succeeds_and_keeps_data,
    shared_across_threads,
);
