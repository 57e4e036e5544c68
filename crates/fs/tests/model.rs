//! fsx-style random operations on the core against an in-memory model of the file tree:
//! create, write at random offsets, truncate, read, rename, unlink, hard links, fsync, evict,
//! write back, remount and crash-with-everything-fsynced, and opens for writing in kernel
//! passthrough (the test writing the cache file itself, as the kernel would, while the other
//! operations go on; a crash leaves them open), on a cache small enough that eviction
//! and write-back run all the time. Every read and size must match the model, and after the
//! final unmount the backing directory must hold exactly the model. The model is names that
//! lead to files: two names of one file read and write one content.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pliant_fs::{Caller, EvictionUnit, FsCache, FsConfig, FsyncMode, Handle, SystemClock};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

const NAMES: [&str; 6] = ["a", "b", "c", "d/e", "d/f", "g"];
const EXTENT: u64 = 4096;

/// Opens for writing in passthrough the core granted, over all cases of the runs in this
/// process (the two tests share it): the path must be taken, not only offered.
static PT_OPENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Write {
        file: usize,
        offset: u64,
        len: u64,
        seed: u8,
    },
    Truncate {
        file: usize,
        size: u64,
    },
    Read {
        file: usize,
        offset: u64,
        len: u32,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Unlink(usize),
    Link {
        from: usize,
        to: usize,
    },
    Fsync(usize),
    Evict(usize),
    Writeback(usize),
    Remount,
    Crash,
    /// An open for writing in passthrough, if the core allows it (the file preloaded first).
    PtOpen(usize),
    /// A write by "the kernel" into the cache file of a file open in passthrough.
    PtWrite {
        file: usize,
        offset: u64,
        len: u64,
        seed: u8,
    },
    PtClose(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0..NAMES.len();
    prop_oneof![
        2 => f.clone().prop_map(Op::Create),
        8 => (f.clone(), 0..12 * EXTENT, 1..3 * EXTENT, any::<u8>())
            .prop_map(|(file, offset, len, seed)| Op::Write { file, offset, len, seed }),
        2 => (f.clone(), 0..10 * EXTENT).prop_map(|(file, size)| Op::Truncate { file, size }),
        6 => (f.clone(), 0..12 * EXTENT, 1..3 * EXTENT as u32)
            .prop_map(|(file, offset, len)| Op::Read { file, offset, len }),
        1 => (f.clone(), f.clone()).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => f.clone().prop_map(Op::Unlink),
        1 => (f.clone(), f.clone()).prop_map(|(from, to)| Op::Link { from, to }),
        1 => f.clone().prop_map(Op::Fsync),
        1 => f.clone().prop_map(Op::Evict),
        1 => f.clone().prop_map(Op::Writeback),
        1 => Just(Op::Remount),
        1 => Just(Op::Crash),
        2 => f.clone().prop_map(Op::PtOpen),
        5 => (f.clone(), 0..12 * EXTENT, 1..3 * EXTENT, any::<u8>())
            .prop_map(|(file, offset, len, seed)| Op::PtWrite { file, offset, len, seed }),
        1 => f.clone().prop_map(Op::PtClose),
    ]
}

fn config(backing: &Path, cache: &Path, eviction: EvictionUnit) -> FsConfig {
    let mut c = FsConfig::new(backing.into(), cache.into(), 16 * EXTENT);
    c.extent = EXTENT;
    c.writeback_threads = 2;
    c.max_file_size = 1 << 20;
    c.eviction = eviction;
    // The write window is tested on its own; here it must never refuse.
    c.write_window_multiplier = 1 << 20;
    c.fsync = FsyncMode::Cache;
    c
}

struct World {
    backing: tempfile::TempDir,
    cache_dir: tempfile::TempDir,
    eviction: EvictionUnit,
    fs: Option<FsCache>,
    open: BTreeMap<usize, Handle>,
    /// Which file each name leads to.
    names: BTreeMap<usize, u64>,
    /// Each file's content.
    files: BTreeMap<u64, Vec<u8>>,
    next_file: u64,
    /// Files open for writing in passthrough, by model file: the handle and the cache file.
    pt: BTreeMap<u64, (Handle, Arc<std::fs::File>)>,
}

impl World {
    fn new(eviction: EvictionUnit) -> Self {
        let backing = tempfile::tempdir().expect("backing");
        std::fs::create_dir(backing.path().join("d")).expect("d");
        let cache_dir = tempfile::tempdir().expect("cache");
        let mut w = Self {
            backing,
            cache_dir,
            eviction,
            fs: None,
            open: BTreeMap::new(),
            names: BTreeMap::new(),
            files: BTreeMap::new(),
            next_file: 0,
            pt: BTreeMap::new(),
        };
        w.mount();
        w
    }

    fn mount(&mut self) {
        let cfg = config(self.backing.path(), self.cache_dir.path(), self.eviction);
        let (fs, _) = FsCache::new(cfg, Arc::new(SystemClock)).expect("mount");
        self.fs = Some(fs);
    }

    fn fs(&self) -> &FsCache {
        self.fs.as_ref().expect("mounted")
    }

    fn handle(&mut self, file: usize) -> Handle {
        if let Some(h) = self.open.get(&file) {
            return h.clone();
        }
        let h = self.fs().open(Path::new(NAMES[file])).expect("open");
        self.open.insert(file, h.clone());
        h
    }

    /// Closes the passthrough writer of model file `id`, if it has one.
    fn pt_close(&mut self, id: u64) -> Result<(), TestCaseError> {
        if let Some((h, _)) = self.pt.remove(&id) {
            let r = self.fs().end_passthrough_write(&h);
            self.fs().release(h);
            prop_assert!(r.is_ok(), "end of passthrough write: {:?}", r);
        }
        Ok(())
    }

    /// Closes the passthrough writers of files that no longer have a name.
    fn pt_close_gone(&mut self) -> Result<(), TestCaseError> {
        let gone: Vec<u64> = self
            .pt
            .keys()
            .copied()
            .filter(|id| !self.files.contains_key(id))
            .collect();
        for id in gone {
            self.pt_close(id)?;
        }
        Ok(())
    }

    fn close_all(&mut self) {
        for id in self.pt.keys().copied().collect::<Vec<_>>() {
            self.pt_close(id).expect("close a passthrough writer");
        }
        let fs = self.fs.as_ref().expect("mounted");
        for (_, h) in std::mem::take(&mut self.open) {
            fs.release(h);
        }
    }

    /// The content the name `f` leads to.
    fn model(&mut self, f: usize) -> Option<&mut Vec<u8>> {
        let id = self.names.get(&f)?;
        self.files.get_mut(id)
    }

    /// Name `f` is gone; so is its file if that was its last name.
    fn unname(&mut self, f: usize) {
        if let Some(id) = self.names.remove(&f)
            && !self.names.values().any(|i| *i == id)
        {
            self.files.remove(&id);
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let path = |i: usize| PathBuf::from(NAMES[i]);
        match *op {
            Op::Create(f) => {
                if !self.names.contains_key(&f) {
                    let h = self.fs().create(&path(f), 0o644, None).expect("create");
                    self.open.insert(f, h);
                    self.names.insert(f, self.next_file);
                    self.files.insert(self.next_file, Vec::new());
                    self.next_file += 1;
                }
            }
            Op::Write {
                file,
                offset,
                len,
                seed,
            } => {
                if self.names.contains_key(&file) {
                    let data: Vec<u8> = (0..len)
                        .map(|i| seed.wrapping_add((i % 251) as u8))
                        .collect();
                    let h = self.handle(file);
                    self.fs().write(&h, offset, &data).expect("write");
                    let m = self.model(file).expect("model");
                    let end = (offset + len) as usize;
                    if m.len() < end {
                        m.resize(end, 0);
                    }
                    m[offset as usize..end].copy_from_slice(&data);
                }
            }
            Op::Truncate { file, size } => {
                if let Some(m) = self.model(file) {
                    m.resize(size as usize, 0);
                    self.fs().truncate(&path(file), size).expect("truncate");
                }
            }
            Op::Read { file, offset, len } => {
                if self.names.contains_key(&file) {
                    let h = self.handle(file);
                    let got = self.fs().read(&h, offset, len).expect("read");
                    let m = &self.files[&self.names[&file]];
                    let lo = (offset as usize).min(m.len());
                    let hi = (offset as usize + len as usize).min(m.len());
                    prop_assert!(got == m[lo..hi], "read {} @{offset}+{len}", NAMES[file]);
                }
            }
            Op::Rename { from, to } => {
                if from != to && self.names.contains_key(&from) {
                    self.fs().rename(&path(from), &path(to), 0).expect("rename");
                    // Two names of one file: rename(2) does nothing.
                    if self.names.get(&to) != self.names.get(&from) {
                        if let Some(h) = self.open.remove(&to) {
                            self.fs().release(h);
                        }
                        self.unname(to);
                        let id = self.names.remove(&from).expect("model");
                        self.names.insert(to, id);
                        if let Some(h) = self.open.remove(&from) {
                            self.open.insert(to, h);
                        }
                    }
                    self.pt_close_gone()?;
                }
            }
            Op::Unlink(f) => {
                if self.names.contains_key(&f) {
                    self.unname(f);
                    if let Some(h) = self.open.remove(&f) {
                        self.fs().release(h);
                    }
                    self.fs().unlink(&path(f)).expect("unlink");
                    // Closed after the unlink: a writer open through it.
                    self.pt_close_gone()?;
                }
            }
            Op::Link { from, to } => {
                if let Some(&id) = self.names.get(&from)
                    && !self.names.contains_key(&to)
                {
                    self.fs().link(&path(from), &path(to)).expect("link");
                    self.names.insert(to, id);
                }
            }
            Op::Fsync(f) => {
                if self.names.contains_key(&f) {
                    let h = self.handle(f);
                    self.fs().fsync(&h).expect("fsync");
                }
            }
            Op::Evict(f) => {
                if self.names.contains_key(&f) {
                    self.fs().evict(&path(f), &Caller::root()).expect("evict");
                }
            }
            Op::Writeback(f) => {
                if self.names.contains_key(&f) {
                    self.fs()
                        .writeback(&path(f), &Caller::root())
                        .expect("writeback");
                }
            }
            Op::Remount => {
                self.close_all();
                let fs = self.fs.take().expect("mounted");
                fs.shutdown(false, &mut |_| {}).expect("shutdown");
                self.mount();
            }
            Op::Crash => {
                // Everything fsync'ed survives a crash; the journal must carry it.
                for f in self.names.keys().copied().collect::<Vec<_>>() {
                    let h = self.handle(f);
                    self.fs().fsync(&h).expect("fsync");
                }
                // Passthrough writers stay open through the crash: what they wrote and fsync'ed
                // must come back from the whole cache file, a write the daemon has not looked
                // at before the fsync included (an append by "the kernel" just before it).
                for (id, (h, cache)) in &self.pt {
                    let m = self.files.get_mut(id).expect("model");
                    let tail: Vec<u8> = (0..100u8).map(|i| i.wrapping_add(m.len() as u8)).collect();
                    cache
                        .write_all_at(&tail, m.len() as u64)
                        .expect("kernel write");
                    m.extend_from_slice(&tail);
                    self.fs
                        .as_ref()
                        .expect("mounted")
                        .fsync(h)
                        .expect("fsync of a passthrough writer");
                }
                self.pt.clear();
                self.open.clear();
                self.fs.take().expect("mounted").crash();
                self.mount();
            }
            Op::PtOpen(f) => {
                if let Some(&id) = self.names.get(&f)
                    && !self.pt.contains_key(&id)
                {
                    self.fs()
                        .preload(&path(f), &Caller::root())
                        .expect("preload");
                    let h = self.fs().open(&path(f)).expect("open");
                    match self.fs().passthrough_write_file(&h).expect("passthrough") {
                        Some(file) => {
                            PT_OPENS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            self.pt.insert(id, (h, file));
                        }
                        None => self.fs().release(h),
                    }
                }
            }
            Op::PtWrite {
                file,
                offset,
                len,
                seed,
            } => {
                if let Some(&id) = self.names.get(&file)
                    && let Some((_, cache)) = self.pt.get(&id)
                {
                    let data: Vec<u8> = (0..len)
                        .map(|i| seed.wrapping_add((i % 251) as u8))
                        .collect();
                    // What the kernel asks before each write it passes through: the write-out
                    // it starts must change no byte.
                    self.fs().passthrough_write_coming(&path(file));
                    cache.write_all_at(&data, offset).expect("kernel write");
                    let m = self.files.get_mut(&id).expect("model");
                    let end = (offset + len) as usize;
                    if m.len() < end {
                        m.resize(end, 0);
                    }
                    m[offset as usize..end].copy_from_slice(&data);
                }
            }
            Op::PtClose(f) => {
                if let Some(&id) = self.names.get(&f) {
                    self.pt_close(id)?;
                }
            }
        }
        if let Err(e) = self.fs().check_invariants() {
            return Err(TestCaseError::fail(format!("after {op:?}: {e}")));
        }
        for (f, id) in &self.names {
            let m = &self.files[id];
            let a = self.fs().getattr(&path(*f)).expect("getattr");
            let links = self.names.values().filter(|i| *i == id).count();
            prop_assert_eq!(
                a.nlink as usize,
                links,
                "links of {} after {:?}",
                NAMES[*f],
                op
            );
            let size = a.size;
            prop_assert_eq!(
                size,
                m.len() as u64,
                "size of {} after {:?}: {}",
                NAMES[*f],
                op,
                self.fs().debug_entry(&path(*f))
            );
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), TestCaseError> {
        self.close_all();
        let fs = self.fs.take().expect("mounted");
        fs.shutdown(false, &mut |_| {}).expect("shutdown");
        for (i, name) in NAMES.iter().enumerate() {
            let on_disk = std::fs::read(self.backing.path().join(name)).ok();
            let model = self.names.get(&i).map(|id| &self.files[id]);
            prop_assert_eq!(on_disk.as_ref(), model, "backing {}", name);
        }
        Ok(())
    }
}

fn run(eviction: EvictionUnit, cases: u32, ops: usize, seed: u64) {
    let cfg = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(cfg);
    runner
        .run(&proptest::collection::vec(op(), ops), |ops| {
            let mut w = World::new(eviction);
            for (n, op) in ops.iter().enumerate() {
                w.apply(op).map_err(|e| {
                    // The failing operation and the few before it are what a reader needs; the
                    // whole sequence is thousands of lines.
                    let recent: Vec<String> = ops[n.saturating_sub(12)..=n]
                        .iter()
                        .zip(n.saturating_sub(12)..)
                        .map(|(o, i)| format!("  #{i}: {o:?}"))
                        .collect();
                    TestCaseError::fail(format!("{e}\nat operation #{n}:\n{}", recent.join("\n")))
                })?;
            }
            w.finish()
        })
        .map_err(|e| match e {
            proptest::test_runner::TestError::Fail(reason, ops) => {
                format!("{reason} (sequence of {} operations)", ops.len())
            }
            other => other.to_string(),
        })
        .expect("the core matches the model");
    let pt = PT_OPENS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{pt} opens for writing in passthrough");
    assert!(pt >= u64::from(cases), "only {pt} opens in passthrough");
}

/// 50 sequences of 1,000 operations with file-level eviction, and as many with extent-level:
/// 100,000 operations in all.
#[test]
fn random_operations_match_the_model_file_eviction() {
    run(EvictionUnit::File, 50, 1000, 13);
}

#[test]
fn random_operations_match_the_model_extent_eviction() {
    run(EvictionUnit::Extent, 50, 1000, 31);
}
