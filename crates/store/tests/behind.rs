//! `WriteBehind`: what a write returned for survives a killed process (the log is replayed by
//! the next open, whoever opens the directory), a torn last record is skipped and nothing before
//! it, readers always see the last write while the applier moves writes into the tree, and a
//! writer far ahead of the applier waits instead of growing memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pliant_store::{
    ALL, Batch, FORMAT_FILE, FORMAT_VERSION, FaultyStore, FjallStore, MemStore, Store, StoreError,
    WriteBehind, WriteBehindOptions, log_segment,
};

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    (tmp, dir)
}

/// A seeded xorshift: the tests need reproducible choices, not good randomness.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A random batch of puts and deletes over 200 keys, applied to `model` too.
fn random_batch(rng: &mut Rng, model: &mut Model, step: usize) -> Batch {
    let mut b = Batch::new();
    for _ in 0..=rng.below(8) {
        let key = format!("k{:03}", rng.below(200)).into_bytes();
        if rng.below(5) == 0 {
            b.delete(&key);
            model.remove(&key);
        } else {
            let value = format!("v{step}-{}", rng.below(1000)).repeat(rng.below(4) as usize);
            b.put(&key, value.as_bytes());
            model.insert(key, value.into_bytes());
        }
    }
    b
}

fn contents(s: &dyn Store) -> Model {
    s.range(ALL).collect::<Result<Model, _>>().expect("iterate")
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("log"))
        .map(|d| d.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn quick() -> WriteBehindOptions {
    WriteBehindOptions {
        apply_every: Duration::from_millis(5),
        max_pending_bytes: 4 << 10,
        ingest_from: usize::MAX,
        // The zeros after the last record of a killed store's first segment end its replay.
        preallocate: 8 << 10,
    }
}

fn never() -> WriteBehindOptions {
    WriteBehindOptions {
        apply_every: Duration::from_secs(3600),
        max_pending_bytes: usize::MAX,
        ingest_from: usize::MAX,
        preallocate: 0,
    }
}

#[test]
fn reads_follow_every_write_while_the_applier_runs_and_reopens_agree() {
    follow_and_reopen(quick());
}

/// The same with every application ingested into the tree (fjall's bulk path, which a slot
/// move's applications take) rather than written through its journal and memtable.
#[test]
fn reads_follow_every_write_and_reopens_agree_when_applications_are_ingested() {
    follow_and_reopen(WriteBehindOptions {
        ingest_from: 0,
        ..quick()
    });
}

fn follow_and_reopen(opts: WriteBehindOptions) {
    let (_tmp, dir) = scratch();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut model = Model::new();
    let mut s = WriteBehind::open(&dir, opts.clone()).expect("open");
    for step in 0..3_000 {
        match rng.below(20) {
            0 => assert_eq!(contents(&s), model, "iteration at step {step}"),
            1 => s.sync().expect("sync"),
            2 => {
                // A graceful close applies everything; a kill leaves it to the log.
                if rng.below(2) == 0 {
                    drop(s);
                } else {
                    s.abandon();
                }
                s = WriteBehind::open(&dir, opts.clone()).expect("reopen");
            }
            _ => {
                let b = random_batch(&mut rng, &mut model, step);
                s.batch(&b).expect("batch");
            }
        }
        let key = format!("k{:03}", rng.below(200)).into_bytes();
        assert_eq!(
            s.get(&key).expect("get"),
            model.get(&key).cloned(),
            "get at step {step}"
        );
        assert_eq!(
            s.value_len(&key).expect("len"),
            model.get(&key).map(Vec::len),
            "value_len at step {step}"
        );
    }
    s.abandon();
    // Any opener of the directory replays the log, not only a write-behind one.
    let tree = FjallStore::open(&dir).expect("open as a plain store");
    assert_eq!(contents(&tree), model);
    assert!(segments(&dir).is_empty(), "replayed segments are removed");
}

#[test]
fn a_killed_process_loses_nothing_that_was_written_and_the_log_is_then_empty() {
    let (_tmp, dir) = scratch();
    let mut rng = Rng(7);
    let mut model = Model::new();
    let s = WriteBehind::open(&dir, never()).expect("open");
    for step in 0..500 {
        s.batch(&random_batch(&mut rng, &mut model, step))
            .expect("batch");
    }
    // Nothing was applied: iteration is the pending writes laid over an empty tree.
    assert_eq!(contents(&s), model);
    s.abandon();
    let logged: u64 = segments(&dir)
        .iter()
        .map(|p| std::fs::metadata(p).expect("segment").len())
        .sum();
    assert!(logged > 0, "the writes were only in the log");
    let s = WriteBehind::open(&dir, never()).expect("reopen");
    assert_eq!(contents(&s), model);
}

/// The log a write-behind store leaves when killed after `writes`: its segments' bytes.
fn log_of(writes: &[(&[u8], &[u8])]) -> Vec<u8> {
    let (_tmp, dir) = scratch();
    let s = WriteBehind::open(&dir, never()).expect("open");
    for (k, v) in writes {
        s.put(k, v).expect("put");
    }
    s.abandon();
    segments(&dir)
        .iter()
        .flat_map(|p| std::fs::read(p).expect("segment"))
        .collect()
}

/// A fresh store directory holding `segments` as its log, opened as a plain store: what the
/// replay made of them.
fn replayed(segs: &[Vec<u8>]) -> Model {
    let (_tmp, dir) = scratch();
    drop(FjallStore::open(&dir).expect("create"));
    std::fs::create_dir_all(dir.join("log")).expect("log dir");
    for (i, bytes) in segs.iter().enumerate() {
        std::fs::write(dir.join("log").join(format!("{i:020}.log")), bytes).expect("segment");
    }
    let s = FjallStore::open(&dir).expect("reopen");
    assert!(segments(&dir).is_empty(), "replayed segments are removed");
    contents(&s)
}

#[test]
fn a_torn_last_record_is_skipped_and_everything_before_it_kept() {
    let writes: Vec<(Vec<u8>, Vec<u8>)> = (0..100u32)
        .map(|i| (format!("k{i:02}").into_bytes(), i.to_le_bytes().to_vec()))
        .collect();
    let refs: Vec<(&[u8], &[u8])> = writes.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    let whole = log_of(&refs);
    // The segment's 16-byte header, then one record per put: 12-byte header, tag, 4 + 3 key
    // bytes, 4 + 4 value bytes.
    const RECORD: usize = 28;
    assert_eq!(whole.len(), 16 + 100 * RECORD);
    assert_eq!(replayed(std::slice::from_ref(&whole)).len(), 100);
    // Cut the last record at every length, as a crash in the middle of its write would.
    for cut in 1..RECORD {
        let got = replayed(&[whole[..whole.len() - cut].to_vec()]);
        assert_eq!(got.len(), 99, "cut {cut}");
        assert!(!got.contains_key(&b"k99"[..]), "cut {cut}");
    }
}

#[test]
fn a_damaged_record_stops_the_replay_for_later_segments_too() {
    let mut first = log_of(&[(b"a", b"1"), (b"b", b"2")]);
    let mut c = Batch::new();
    c.put(b"c", b"3");
    let second = log_segment(1, &[c]);
    let good = replayed(&[first.clone(), second.clone()]);
    assert_eq!(good.len(), 3);
    // The segment's header is 16 bytes, each record 12 + 1 + 4 + 1 + 4 + 1 = 23; damage the
    // second record's value.
    assert_eq!(first.len(), 16 + 46);
    first[16 + 45] ^= 0xff;
    let got = replayed(&[first, second]);
    assert_eq!(
        got,
        Model::from([(b"a".to_vec(), b"1".to_vec())]),
        "b is damaged, and c came after it: applying c without b would be a state that never was"
    );
}

#[test]
fn a_writer_far_ahead_of_the_applier_waits_for_it_and_nothing_is_lost() {
    far_ahead(usize::MAX);
}

/// The same with the applications the budget starts ingested, as a slot move's are.
#[test]
fn a_writer_far_ahead_loses_nothing_when_its_applications_are_ingested() {
    far_ahead(16 << 10);
}

fn far_ahead(ingest_from: usize) {
    let (_tmp, dir) = scratch();
    let opts = WriteBehindOptions {
        apply_every: Duration::from_secs(3600),
        max_pending_bytes: 16 << 10,
        ingest_from,
        preallocate: 0,
    };
    let s = WriteBehind::open(&dir, opts.clone()).expect("open");
    let value = vec![b'x'; 1_000];
    for i in 0..2_000u32 {
        s.put(format!("k{i:05}").as_bytes(), &value).expect("put");
        // Never more than the budget and one write waiting: the log holds at most a few
        // segments' worth, the rest was applied.
        let logged: u64 = segments(&dir)
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        assert!(
            logged < 64 << 10,
            "{logged} bytes in the log after {i} writes"
        );
    }
    let (batched, ingested) = s.applications();
    if ingest_from == usize::MAX {
        assert_eq!(ingested, 0);
    } else {
        assert!(
            ingested > 50,
            "{ingested} of the applications ingested, {batched} not"
        );
    }
    drop(s);
    let s = FjallStore::open(&dir).expect("reopen");
    assert_eq!(contents(&s).len(), 2_000);
}

#[test]
fn a_format_1_store_is_opened_and_upgraded() {
    let (_tmp, dir) = scratch();
    {
        let s = FjallStore::open(&dir).expect("create");
        s.put(b"old", b"data").expect("put");
        s.sync().expect("sync");
    }
    std::fs::write(dir.join(FORMAT_FILE), "pliant-store format 1\n").expect("downgrade");
    let s = WriteBehind::open(&dir, never()).expect("open a format 1 store");
    assert_eq!(s.get(b"old").expect("get"), Some(b"data".to_vec()));
    assert_eq!(
        std::fs::read_to_string(dir.join(FORMAT_FILE)).expect("format"),
        format!("pliant-store format {FORMAT_VERSION}\n")
    );
}

#[test]
fn zeros_where_a_record_should_be_end_the_replay() {
    // A power cut can leave a hole of zeros where a write had not reached the disk; the CRC of
    // an empty payload is 0, so the hole must not pass for an empty record and let the replay
    // step over it to writes that came after it.
    let mut log = log_of(&[(b"a", b"1")]);
    log.extend_from_slice(&[0; 64]);
    log.extend(log_of(&[(b"b", b"2")]));
    assert_eq!(
        replayed(&[log]),
        Model::from([(b"a".to_vec(), b"1".to_vec())])
    );
}

#[test]
fn a_store_that_fails_under_the_log_refuses_later_writes_and_loses_nothing_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("log");
    let tree = FaultyStore::new(MemStore::new());
    let faults = tree.faults();
    // The applier's first write into the store fails.
    faults.fail_write(1);
    let s = WriteBehind::over(tree, &log, quick()).expect("open");
    s.put(b"a", b"1").expect("acknowledged: it is in the log");
    // The applier fails within a few of its 5-ms rounds; from then on writes are refused.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match s.put(b"b", b"2") {
            Err(e) => break e,
            Ok(()) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the failure never showed"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    assert!(matches!(refused, StoreError::Poisoned { .. }), "{refused}");
    assert!(
        s.sync().is_err(),
        "a sync after the failure does not pretend"
    );
    // Reads go on: what was acknowledged is served from the writes not yet in the store.
    assert_eq!(s.get(b"a").expect("get"), Some(b"1".to_vec()));
    drop(s);
    // The log kept everything acknowledged: a store under it again gets it all.
    let again = WriteBehind::over(MemStore::new(), &log, never()).expect("reopen");
    assert_eq!(again.get(b"a").expect("get"), Some(b"1".to_vec()));
}

/// The store's first failure, once the store refuses writes: what `Poisoned` carries, and the
/// refusal's `source()` too.
fn first_failure(refused: &StoreError) -> &StoreError {
    let StoreError::Poisoned { first, .. } = refused else {
        panic!("{refused:?} is not Poisoned");
    };
    let source = std::error::Error::source(refused).expect("a source");
    assert_eq!(source.to_string(), first.to_string());
    first
}

#[test]
fn a_poisoned_write_behind_store_is_a_variant_callers_can_match() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("log");
    let tree = FaultyStore::new(MemStore::new());
    tree.faults().fail_write(1);
    let s = WriteBehind::over(tree, &log, quick()).expect("open");
    s.put(b"a", b"1").expect("acknowledged: it is in the log");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match s.put(b"b", b"2") {
            Err(e) => break e,
            Ok(()) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the failure never showed"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    // Matched as a variant, not found in a backend error's text.
    let StoreError::Poisoned { dir, .. } = &refused else {
        panic!("a write after the failure: {refused:?}, not Poisoned");
    };
    assert_eq!(dir, &log);
    // The cause is the applier's write into the store, the fault injected, kept typed.
    assert!(
        matches!(
            first_failure(&refused),
            StoreError::Injected { op: "batch" }
        ),
        "{:?}",
        first_failure(&refused)
    );
    // The refusal's own text names the state once; the cause is left to the chain.
    let text = refused.to_string();
    assert!(text.contains("reopened"), "{text}");
    assert!(!text.contains("injected"), "{text}");
    // A sync is refused the same way, with the same first failure.
    let synced = s
        .sync()
        .expect_err("a sync after the failure does not pretend");
    assert!(matches!(synced, StoreError::Poisoned { .. }), "{synced}");
    assert!(matches!(
        first_failure(&synced),
        StoreError::Injected { .. }
    ));
}

#[test]
fn a_recycled_segment_never_replays_what_it_held_before() {
    // Each record below is 23 bytes and each pending key counts 66 against the budget: the
    // fourth write of a segment wakes the applier, and the fifth waits until the segment is
    // applied and kept as the spare. So segment 0 holds writes 1-4, segment 1 (a new file)
    // writes 5-8, and segment 2 is segment 0's file again, with write 9 over write 1 and
    // writes 2-4 after it, whole records of an older life, of the same size, with old values.
    let (_tmp, dir) = scratch();
    let opts = WriteBehindOptions {
        apply_every: Duration::from_secs(3600),
        max_pending_bytes: 200,
        ingest_from: usize::MAX,
        preallocate: 0,
    };
    let s = WriteBehind::open(&dir, opts).expect("open");
    for _ in 0..4 {
        s.put(b"a", b"1").expect("put");
    }
    for _ in 0..4 {
        s.put(b"a", b"2").expect("put");
    }
    s.put(b"b", b"9").expect("put");
    s.abandon();
    let files = segments(&dir);
    let names: Vec<_> = files
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [format!("{:020}.log", 2), "spare".to_string()],
        "segment 1 was applied and kept as the spare"
    );
    let reused = std::fs::metadata(&files[0]).expect("segment 2").len();
    assert_eq!(
        reused,
        16 + 4 * 23 + 13,
        "segment 2 is segment 0's file (header, 4 records, seal), its older records still in it"
    );
    let s = FjallStore::open(&dir).expect("reopen");
    assert_eq!(
        contents(&s),
        Model::from([
            (b"a".to_vec(), b"2".to_vec()),
            (b"b".to_vec(), b"9".to_vec())
        ]),
        "a = 1 from segment 0's life is not replayed over a = 2"
    );
    assert!(
        segments(&dir).is_empty(),
        "the replay removes the spare too"
    );
}

#[test]
fn a_recycled_segment_whose_new_header_was_lost_replays_nothing() {
    // The spare renamed to segment 1 reached the disk, its rewritten header did not: the file
    // still says it is segment 0, and its records, whole and with valid CRCs, are segment 0's
    // older life. A write of segment 1's life was acknowledged as on disk only after an fsync
    // that carried the header too, so nothing of it is lost by skipping the file.
    let mut old = Batch::new();
    old.put(b"k", b"old");
    let mut new = Batch::new();
    new.put(b"k", b"new");
    let got = replayed(&[log_segment(0, &[new]), log_segment(0, &[old])]);
    assert_eq!(got, Model::from([(b"k".to_vec(), b"new".to_vec())]));
}
