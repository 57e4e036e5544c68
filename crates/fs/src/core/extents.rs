//! The data path: a file's entry and its extents in the sparse cache file. Opening a file
//! (and revalidating a cached one against its backing file), copy-up of missing extents, reads,
//! writes (read-modify-write of a partial extent, the write window and the size limit), the
//! extent bookkeeping around a size change, the LRU order, and `preload`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};

use super::{Attr, CopyUp, Extent, FileData, FileEntry, Inner, errno, lock};
use crate::backing;
use crate::config::EvictionUnit;
use crate::stats::Counters;

/// Extents waiting for the read-ahead thread, at most (beyond, reads copy their own).
const READ_AHEAD_QUEUE: usize = 64;

impl Inner {
    pub(super) fn extent_range(&self, offset: u64, len: u64) -> std::ops::Range<u64> {
        let e = self.cfg.extent;
        if len == 0 {
            return 0..0;
        }
        offset / e..(offset + len).div_ceil(e)
    }

    pub(super) fn open_entry(
        &self,
        rel: &Path,
        created: Option<File>,
    ) -> io::Result<Arc<FileEntry>> {
        // (Another name of a file the cache holds is found by the file's identity once the
        // backing file is open, below, and then opened as this existing entry is.)
        let existing = self.entry(rel);
        let open_backing = || -> io::Result<(File, bool)> {
            match self.tree.open(rel, backing::Open::READ_WRITE) {
                Ok(f) => Ok((f, true)),
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EACCES as i32) => {
                    Ok((self.tree.open(rel, backing::Open::READ)?, false))
                }
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EROFS as i32) => {
                    Ok((self.tree.open(rel, backing::Open::READ)?, false))
                }
                Err(e) => Err(e),
            }
        };
        if let Some(entry) = existing {
            // The backing file is looked at under the file's lock: a write-back completing
            // between the two would otherwise look like a change behind the cache's back.
            let mut d = lock(&entry.data);
            if d.forgotten {
                drop(d);
                return self.open_entry(rel, created);
            }
            let meta = self.tree.metadata(rel)?;
            if self.cfg.shared && (meta.dev(), meta.ino()) != entry.ident {
                // A striped cache's server: the name leads to another file now (unlinked and
                // made again, or renamed over, by a mount that died before it told this server,
                // or outside the mounts): the entry is not this file's, and what is written now
                // must reach the new one. (A mount's own cache keeps its revalidation by size
                // and time: its names follow its own renames and links.)
                tracing::warn!(
                    path = %self.cfg.backing.join(rel).display(),
                    "the name leads to another file than the cache held under it: the old one's entry lets go of the name"
                );
                drop(d);
                self.detach(rel);
                return self.open_entry(rel, created);
            }
            let now_seen = (meta.size(), Attr::from_meta(&meta).mtime);
            // A striped cache's servers change each other's files (their own stripes): that is
            // no change behind this server's back to the stripes it holds. Nor is a write-back
            // under way (it writes off the file's lock, and takes the file's new state as seen
            // when it is done): a change found then is likely its own.
            // (The walk of the extents only when the file looks changed: every open comes here.)
            if now_seen != d.seen && !self.cfg.shared && !d.extents.values().any(|x| x.in_flight) {
                if d.pinned > 0 {
                    // `seen` stays as it was, so the next open after the last passthrough
                    // close still finds the change.
                    tracing::warn!(
                        path = %self.cfg.backing.join(rel).display(),
                        "changed in the backing directory while open in passthrough; the cached copy stays until it is closed"
                    );
                } else if d.dirty_bytes == 0 {
                    self.drop_extents_locked(&entry, &mut d, |_, _| true)?;
                    Counters::add(&self.counters.revalidated_files, 1);
                    d.size = now_seen.0;
                    d.backing_size = now_seen.0;
                    d.mtime = now_seen.1;
                } else {
                    Counters::add(&self.counters.conflicting_files, 1);
                    tracing::warn!(
                        path = %self.cfg.backing.join(rel).display(),
                        "changed in the backing directory while the cache holds unwritten data; the cache's data wins"
                    );
                }
                if d.pinned == 0 {
                    d.seen = now_seen;
                }
            }
            if d.backing.is_none() {
                let (f, w) = match created {
                    Some(f) => (f, true),
                    None => open_backing()?,
                };
                d.backing = Some(Arc::new(f));
                d.backing_writable = w;
            }
            d.open_count += 1;
            drop(d);
            return Ok(entry);
        }
        let (f, writable) = match created {
            Some(f) => (f, true),
            None => open_backing()?,
        };
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Err(errno(nix::errno::Errno::EISDIR));
        }
        let ident = (meta.dev(), meta.ino());
        let mtime = Attr::from_meta(&meta).mtime;
        let mut s = lock(&self.state);
        if meta.nlink() > 1
            && s.by_ident
                .get(&ident)
                .is_some_and(|id| s.files.contains_key(id))
        {
            // Another name of a file the cache holds: one entry for both, this name joining
            // it, then opened as an existing entry is (revalidated).
            drop(s);
            if self.adopt(rel, ident).is_some() {
                return self.open_entry(rel, None);
            }
            s = lock(&self.state);
        }
        // Another thread may have opened it meanwhile.
        if let Some(entry) = s.by_path.get(rel).and_then(|id| s.files.get(id)).cloned() {
            drop(s);
            let mut d = lock(&entry.data);
            if d.forgotten {
                drop(d);
                return self.open_entry(rel, None);
            }
            d.open_count += 1;
            if d.backing.is_none() {
                d.backing = Some(Arc::new(f));
                d.backing_writable = writable;
            }
            drop(d);
            return Ok(entry);
        }
        let id = s.next_id;
        s.next_id += 1;
        let tick = s.next_tick();
        let entry = Arc::new(FileEntry {
            id,
            ident,
            data: Mutex::new(FileData {
                path: Some(rel.to_path_buf()),
                links: Vec::new(),
                cache: None,
                backing: Some(Arc::new(f)),
                backing_writable: writable,
                size: meta.size(),
                backing_size: meta.size(),
                mtime,
                seen: (meta.size(), mtime),
                extents: BTreeMap::new(),
                cached_bytes: 0,
                dirty_bytes: 0,
                open_count: 1,
                tick,
                journaled: false,
                pinned: 0,
                copying: Default::default(),
                epoch: 0,
                last_read: None,
                ahead: 0,
                last_write: 0..0,
                pt_writers: 0,
                pt_charged: 0,
                pt_written_out: 0,
                pt_mtime: std::time::UNIX_EPOCH,
                pt_refused: None,
                forgotten: false,
            }),
            idle: Condvar::new(),
        });
        s.files.insert(id, entry.clone());
        s.by_path.insert(rel.to_path_buf(), id);
        s.by_ident.insert(ident, id);
        Ok(entry)
    }

    /// The entry of the file `rel` is another name of (a hard link made behind the cache's
    /// back, or before this mount), with `rel` added to its names; `None` if the cache holds no
    /// entry of the file whose identity is `ident`. An entry whose name no longer leads to the
    /// same file (it was removed behind the cache's back, and its inode number went to this
    /// file) is not it.
    pub(super) fn adopt(&self, rel: &Path, ident: (u64, u64)) -> Option<Arc<FileEntry>> {
        let candidate = {
            let s = lock(&self.state);
            s.by_ident
                .get(&ident)
                .and_then(|id| s.files.get(id))
                .cloned()
        }?;
        let mut d = lock(&candidate.data);
        let same = !d.forgotten
            && d.path
                .as_ref()
                .and_then(|p| self.tree.symlink_metadata(p).ok())
                .is_some_and(|m| (m.dev(), m.ino()) == ident);
        if !same {
            return None;
        }
        // The file's lock, then the state's: the documented order.
        let mut s = lock(&self.state);
        match s.by_path.get(rel) {
            Some(id) if *id == candidate.id => return Some(candidate.clone()),
            // Another file's entry has the name: the caller's look at the backing directory
            // is older than it.
            Some(_) => return None,
            None => {}
        }
        s.by_path.insert(rel.to_path_buf(), candidate.id);
        drop(s);
        d.links.push(rel.to_path_buf());
        drop(d);
        Some(candidate)
    }

    /// The entry of `rel`, by its name or, for a file with several names, by its identity.
    pub(super) fn entry_or_link(&self, rel: &Path) -> Option<Arc<FileEntry>> {
        self.entry(rel).or_else(|| {
            let m = self.tree.symlink_metadata(rel).ok()?;
            (m.is_file() && m.nlink() > 1)
                .then(|| self.adopt(rel, (m.dev(), m.ino())))
                .flatten()
        })
    }

    /// Forgets an entry nothing refers to any more: its identity, if it is still its.
    pub(super) fn forget_entry(&self, entry: &FileEntry) {
        let mut s = lock(&self.state);
        s.files.remove(&entry.id);
        if s.by_ident.get(&entry.ident) == Some(&entry.id) {
            s.by_ident.remove(&entry.ident);
        }
    }

    /// Forgets an entry no handle holds any more, under all its names (a striped mount's: it
    /// holds nothing else).
    pub(super) fn forget_closed(&self, entry: &Arc<FileEntry>) {
        // The file's lock held throughout (then the state's, the documented order): an open
        // that finds the entry counts itself in before this looks, or sees it forgotten.
        let mut d = lock(&entry.data);
        if d.open_count > 0 || d.forgotten {
            return;
        }
        d.forgotten = true;
        let mut s = lock(&self.state);
        for p in d.path.iter().chain(d.links.iter()) {
            if s.by_path.get(p) == Some(&entry.id) {
                s.by_path.remove(p);
            }
        }
        s.files.remove(&entry.id);
        if s.by_ident.get(&entry.ident) == Some(&entry.id) {
            s.by_ident.remove(&entry.ident);
        }
    }

    pub(super) fn release(&self, entry: &Arc<FileEntry>) {
        let mut d = lock(&entry.data);
        d.open_count = d.open_count.saturating_sub(1);
        if d.open_count > 0 {
            return;
        }
        if d.path.is_none() {
            // Unlinked while open: nothing refers to it any more here. What it holds for names
            // of the file the cache does not know goes to them first.
            if d.dirty_bytes > 0 && super::writeback::still_linked(&d) {
                drop(d);
                if let Err(e) = self.writeback_file(entry, true) {
                    tracing::warn!(error = %e, "writing back a file unlinked under the names the cache knew");
                }
                d = lock(&entry.data);
                if d.open_count > 0 {
                    return;
                }
            }
            let _ = self.drop_extents_locked(entry, &mut d, |_, _| true);
            d.cache = None;
            drop(d);
            self.forget_entry(entry);
            let _ = std::fs::remove_file(self.data_dir.join(entry.id.to_string()));
            return;
        }
        if d.dirty_bytes == 0 {
            // Keeps descriptors to those of the many cached files that still need one.
            d.backing = None;
        }
    }

    pub(super) fn cache_file<'a>(&self, id: u64, d: &'a mut FileData) -> io::Result<&'a File> {
        if d.cache.is_none() {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(self.data_dir.join(id.to_string()))?;
            d.cache = Some(Arc::new(f));
        }
        d.cache
            .as_deref()
            .ok_or_else(|| io::Error::other("cache file"))
    }

    /// [`cache_file`](Self::cache_file), shared: for whoever uses it without the file's lock
    /// (reads, read-ahead's copies) or hands it to the kernel (passthrough).
    pub(super) fn cache_file_arc(&self, id: u64, d: &mut FileData) -> io::Result<Arc<File>> {
        self.cache_file(id, d)?;
        d.cache
            .clone()
            .ok_or_else(|| io::Error::other("cache file"))
    }

    pub(super) fn backing_fd(&self, d: &mut FileData) -> io::Result<Arc<File>> {
        if let Some(f) = &d.backing {
            return Ok(f.clone());
        }
        let path = d.path.as_ref().ok_or(errno(nix::errno::Errno::ENOENT))?;
        let f = match self.tree.open(path, backing::Open::READ_WRITE) {
            // Written back after its owner made it read-only: the writes were allowed.
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EACCES as i32) => {
                self.tree.open_writable_as_owner(path)?
            }
            r => r?,
        };
        let f = Arc::new(f);
        d.backing = Some(f.clone());
        d.backing_writable = true;
        Ok(f)
    }

    /// Copies extent `i` up from the backing file unless the cache has it, counting the copy
    /// under `why`; true if it had.
    /// Queues the extents after `range` for the read-ahead thread when reads of the file go on
    /// in order: one extent after the second read in order, doubling with each further one up
    /// to `read_ahead` (8 by default: a window only has to cover the time one copy-up takes
    /// while the reader goes on; its sensitivity is in docs/benchmarks.md, `fs-read-ahead`);
    /// none after a read elsewhere. Extents already cached, or being copied, are skipped.
    fn read_ahead(&self, entry: &Arc<FileEntry>, d: &mut FileData, range: std::ops::Range<u64>) {
        let (first, last) = (range.start, range.end.saturating_sub(1));
        let in_order = d.last_read.is_some_and(|l| first == l || first == l + 1);
        d.ahead = if in_order {
            (d.ahead * 2).clamp(1, self.cfg.read_ahead.max(1))
        } else {
            0
        };
        d.last_read = Some(last);
        if d.ahead == 0 || self.cfg.read_ahead == 0 {
            return;
        }
        let ext = self.cfg.extent;
        let end = d.backing_size.min(d.size).div_ceil(ext);
        let wanted: Vec<u64> = (last + 1..(last + 1 + d.ahead).min(end))
            .filter(|i| !d.extents.contains_key(i) && !d.copying.contains(i))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let mut q = lock(&self.ahead);
        for i in wanted {
            if q.len() >= READ_AHEAD_QUEUE {
                break;
            }
            d.copying.insert(i);
            q.push_back((Arc::downgrade(entry), i, false));
        }
        self.ahead_cv.notify_one();
    }

    /// Queues the extents of `range` that are neither cached nor being copied for the
    /// read-ahead thread: a cold read answered from the backing file leaves them to it. None
    /// past the backing file's end (there is nothing to copy), and none once the queue is full
    /// (a later read of the extent tries again).
    fn copy_behind(&self, entry: &Arc<FileEntry>, d: &mut FileData, range: std::ops::Range<u64>) {
        let end = d.backing_size.min(d.size).div_ceil(self.cfg.extent);
        let mut q = lock(&self.ahead);
        for i in range.filter(|i| *i < end) {
            if d.extents.contains_key(&i) || d.copying.contains(&i) {
                continue;
            }
            if q.len() >= READ_AHEAD_QUEUE {
                break;
            }
            d.copying.insert(i);
            // First: the reader is already past it.
            q.push_front((Arc::downgrade(entry), i, true));
        }
        self.ahead_cv.notify_one();
    }

    /// The read-ahead thread: copies up the extents [`read_ahead`](Self::read_ahead) queued,
    /// each straight from the backing file into the cache file without the file's lock (a read
    /// of the extents before it goes on meanwhile; reads, writes and preloads of the extent
    /// itself wait for the copy), and kept only if nothing changed the file's extents meanwhile
    /// (else the copied range is made a hole again and the cache file no longer than the file).
    pub(super) fn readahead_worker(self: Arc<Self>) {
        loop {
            self.ahead_busy.store(false, Relaxed);
            let next = {
                let mut q = lock(&self.ahead);
                loop {
                    if self.stopping() {
                        return;
                    }
                    if let Some(n) = q.pop_front() {
                        self.ahead_busy.store(true, Relaxed);
                        break n;
                    }
                    q = self.ahead_cv.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            let (weak, i, read) = next;
            let Some(entry) = weak.upgrade() else {
                continue;
            };
            {
                // Held off, as the write-back workers are, while the bookkeeping is checked.
                let mut s = lock(&self.state);
                while s.paused && !self.stopping() {
                    s = self
                        .work
                        .wait_timeout(s, std::time::Duration::from_millis(50))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                s.busy += 1;
            }
            if let Err(e) = self.copy_ahead(&entry, i, read) {
                tracing::debug!(error = %e, extent = i, "read-ahead");
            }
            let mut d = lock(&entry.data);
            d.copying.remove(&i);
            drop(d);
            entry.idle.notify_all();
            lock(&self.state).busy -= 1;
            self.progress.notify_all();
            self.nudge();
            self.maybe_evict();
        }
    }

    /// Copies extent `i` up for the read-ahead thread: `read` if a read of it was answered from
    /// the backing file (see [`copy_behind`](Self::copy_behind)), else read-ahead.
    fn copy_ahead(&self, entry: &FileEntry, i: u64, read: bool) -> io::Result<()> {
        let ext = self.cfg.extent;
        let start = i * ext;
        let (src, dst, have, epoch) = {
            let mut d = lock(&entry.data);
            // A reader that has closed the file will not read on; what it read stays cached.
            if d.path.is_none() || (d.open_count == 0 && !read) || d.extents.contains_key(&i) {
                return Ok(());
            }
            let have = d.backing_size.min(d.size).saturating_sub(start).min(ext);
            if have == 0 {
                return Ok(());
            }
            let dst = self.cache_file_arc(entry.id, &mut d)?;
            // A file closed since its read keeps no descriptor to its backing file (its close
            // let go of it), nor is it opened for writing to be read.
            let src = match (&d.backing, &d.path) {
                (Some(f), _) => f.clone(),
                (None, Some(p)) => Arc::new(self.tree.open(p, backing::Open::READ)?),
                (None, None) => return Ok(()),
            };
            (src, dst, have, d.epoch)
        };
        // Straight into the cache file, without the file's lock: nothing else writes this
        // extent meanwhile (reads, writes and preloads of an extent being copied wait for it).
        self.ahead_hold.stop_here(i, || self.stopping());
        let copied = if self.ahead_fail.load(Relaxed) {
            copy_range(&src, &dst, start, have / 2)
                .and_then(|()| Err(io::Error::other("a read-ahead copy failed halfway (test)")))
        } else {
            copy_range(&src, &dst, start, have)
        };
        let mut d = lock(&entry.data);
        // Dropped extents (a truncation, a change behind the cache, an unlink) meanwhile: what
        // was copied may be stale. It must not stay in the cache file either, where a later
        // copy-up of a shorter backing file would leave some of it (and a truncation's length,
        // which passthrough reads end at, must stand). Nor what a failed copy wrote: space no
        // extent accounts for, and past the file's end if it was cut meanwhile.
        if copied.is_err() || d.epoch != epoch || d.path.is_none() {
            punch(&dst, start, have)?;
            if dst.metadata()?.len() > d.size {
                dst.set_len(d.size)?;
            }
            return copied;
        }
        Counters::add(&self.counters.copy_up_bytes, have);
        Counters::add(&self.counters.copy_up_read_bytes, have);
        if !read {
            Counters::add(&self.counters.read_ahead_bytes, have);
        }
        self.insert_extent(&mut d, i);
        // In the eviction order like any other: no read may come to touch it (a cold read's
        // was answered already), and an extent outside that order is never evicted.
        self.touch(entry, &mut d, i..i + 1);
        Ok(())
    }

    fn ensure_extent(
        &self,
        entry: &FileEntry,
        d: &mut FileData,
        i: u64,
        why: CopyUp,
    ) -> io::Result<bool> {
        if d.extents.contains_key(&i) {
            return Ok(true);
        }
        let ext = self.cfg.extent;
        let start = i * ext;
        let have = d.backing_size.min(d.size).saturating_sub(start).min(ext);
        if have > 0 {
            let src = self.backing_fd(d)?;
            copy_range(&src, self.cache_file(entry.id, d)?, start, have)?;
            Counters::add(&self.counters.copy_up_bytes, have);
            match why {
                CopyUp::Read => Counters::add(&self.counters.copy_up_read_bytes, have),
                CopyUp::Preload => Counters::add(&self.counters.copy_up_preload_bytes, have),
                CopyUp::Write => {}
            }
        }
        self.insert_extent(d, i);
        Ok(false)
    }

    pub(super) fn insert_extent(&self, d: &mut FileData, i: u64) {
        let bytes = d
            .size
            .saturating_sub(i * self.cfg.extent)
            .min(self.cfg.extent);
        d.extents.insert(
            i,
            Extent {
                bytes,
                dirty: false,
                generation: 0,
                in_flight: false,
                journaled: false,
                tick: 0,
            },
        );
        d.cached_bytes += bytes;
        self.used.fetch_add(bytes, Relaxed);
    }

    /// Marks extent `i` written: a new generation (a write-back under way copied older bytes)
    /// and dirty, its bytes counted as such; `true` if it was clean. Nothing if it is absent.
    pub(super) fn mark_dirty(&self, d: &mut FileData, i: u64) -> bool {
        let Some(x) = d.extents.get_mut(&i) else {
            return false;
        };
        x.generation += 1;
        if x.dirty {
            return false;
        }
        x.dirty = true;
        let b = x.bytes;
        d.dirty_bytes += b;
        self.dirty.fetch_add(b, Relaxed);
        true
    }

    /// Recomputes the bytes of the extents around a size change.
    pub(super) fn resize_extents(&self, d: &mut FileData, old: u64, new: u64) {
        let ext = self.cfg.extent;
        let (lo, hi) = (old.min(new) / ext, old.max(new).div_ceil(ext));
        let keys: Vec<u64> = d.extents.range(lo..=hi).map(|(k, _)| *k).collect();
        for i in keys {
            let bytes = new.saturating_sub(i * ext).min(ext);
            let Some(x) = d.extents.get_mut(&i) else {
                continue;
            };
            let (old_b, dirty) = (x.bytes, x.dirty);
            x.bytes = bytes;
            d.cached_bytes = d.cached_bytes + bytes - old_b;
            if bytes >= old_b {
                self.used.fetch_add(bytes - old_b, Relaxed);
            } else {
                self.used.fetch_sub(old_b - bytes, Relaxed);
            }
            if dirty {
                d.dirty_bytes = d.dirty_bytes + bytes - old_b;
                if bytes >= old_b {
                    self.dirty.fetch_add(bytes - old_b, Relaxed);
                } else {
                    self.dirty.fetch_sub(old_b - bytes, Relaxed);
                }
            }
        }
    }

    pub(super) fn touch(&self, entry: &FileEntry, d: &mut FileData, extents: std::ops::Range<u64>) {
        let mut s = lock(&self.state);
        match self.cfg.eviction {
            EvictionUnit::File => {
                s.lru.remove(&d.tick);
                d.tick = s.next_tick();
                let t = d.tick;
                s.lru.insert(t, (entry.id, None));
            }
            EvictionUnit::Extent => {
                for i in extents {
                    let t = s.next_tick();
                    if let Some(x) = d.extents.get_mut(&i) {
                        s.lru.remove(&x.tick);
                        x.tick = t;
                        s.lru.insert(t, (entry.id, Some(i)));
                    }
                }
            }
        }
    }

    pub(super) fn read(
        &self,
        entry: &Arc<FileEntry>,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        self.read_as(entry, offset, len, buf, false)
    }

    /// [`read`](Self::read); `again` for a read whose cache-file bytes changed under it: done
    /// under the file's lock this time, neither counted nor told to read-ahead a second time.
    fn read_as(
        &self,
        entry: &Arc<FileEntry>,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
        again: bool,
    ) -> io::Result<()> {
        let mut d = lock(&entry.data);
        self.absorb(entry, &mut d)?;
        let len = len.min(d.size.saturating_sub(offset));
        if len == 0 {
            buf.clear();
            return Ok(());
        }
        let ext = self.cfg.extent;
        let range = self.extent_range(offset, len);
        if !again && range.clone().all(|i| !d.extents.contains_key(&i)) && self.cfg.read_ahead > 0 {
            // A cold read streams: answered from the backing file as soon as its own bytes are
            // in, while its extents copy up behind it on the read-ahead thread (with those the
            // access pattern asks for after them), rather than after its whole extent's
            // copy-up: `fs-cold-32f` in docs/benchmarks.md.
            // An extent that is not present holds the backing file's bytes: dirty bytes, and
            // whatever passthrough writers wrote (`absorb`), are always in extents present.
            // With read-ahead off (`--read-ahead 0`, a striped mount's servers) the extents
            // are copied up first, as below.
            self.read_ahead(entry, &mut d, range.clone());
            self.copy_behind(entry, &mut d, range);
            let end = d.backing_size.min(d.size);
            let src = self.backing_fd(&mut d)?;
            // Off the file's lock, so that the kernel's other requests of the file (its
            // read-ahead sends several at once) read the disk beside this one. What may change
            // meanwhile is what may change under a local file system's reader: a write of these
            // bytes (it waits for their copy-up, then lands in the cache) or a truncation, which
            // ends the reply where the file now ends.
            drop(d);
            read_at_into(&src, offset, end.saturating_sub(offset).min(len), buf)?;
            let size = lock(&entry.data).size;
            buf.resize(len.min(size.saturating_sub(offset)) as usize, 0);
            Counters::add(&self.counters.read_miss_bytes, len);
            return Ok(());
        }
        // An extent read-ahead is copying: its copy, not a second one.
        while range.clone().any(|i| d.copying.contains(&i)) {
            d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        if !again {
            self.read_ahead(entry, &mut d, range.clone());
        }
        for i in range.clone() {
            let part = (offset + len).min((i + 1) * ext) - offset.max(i * ext);
            let hit = self.ensure_extent(entry, &mut d, i, CopyUp::Read)?;
            if !again {
                let c = &self.counters;
                Counters::add(
                    if hit {
                        &c.read_hit_bytes
                    } else {
                        &c.read_miss_bytes
                    },
                    part,
                );
            }
        }
        if again {
            read_at_into(self.cache_file(entry.id, &mut d)?, offset, len, buf)?;
            self.touch(entry, &mut d, range);
            return Ok(());
        }
        let f = self.cache_file_arc(entry.id, &mut d)?;
        self.touch(entry, &mut d, range);
        // Off the file's lock too, as a cold read: the kernel sends several requests of a file
        // at once (its read-ahead), which under the lock would read the disk one at a time
        // (`fs-warm-32g` in docs/benchmarks.md: the slow rounds went).
        // Whatever drops extents or cuts the file meanwhile (eviction, truncation, a change
        // behind the cache, unlink) bumps `epoch`: then the read is done again, under the lock.
        // A write meanwhile is a write beside a reader, as on a local file system.
        let epoch = d.epoch;
        drop(d);
        read_at_into(&f, offset, len, buf)?;
        if lock(&entry.data).epoch != epoch {
            return self.read_as(entry, offset, len, buf, true);
        }
        Ok(())
    }

    /// Counts a write the window refused (EDQUOT) and, the first time in a window, logs it with
    /// `consequence` (what the writer sees).
    pub(super) fn window_refused(&self, over: &crate::window::OverQuota, consequence: &str) {
        Counters::add(&self.counters.edquot, 1);
        if over.first {
            tracing::error!(
                used = over.used,
                limit = over.limit,
                window_secs = self.cfg.write_window.as_secs(),
                "write window exhausted: {consequence} (--write-window-multiplier, --write-window-length)"
            );
        }
    }

    pub(super) fn write(&self, entry: &FileEntry, offset: u64, data: &[u8]) -> io::Result<()> {
        let len = data.len() as u64;
        if len == 0 {
            return Ok(());
        }
        if offset.saturating_add(len) > self.cfg.max_file_size {
            Counters::add(&self.counters.efbig, 1);
            return Err(errno(nix::errno::Errno::EFBIG));
        }
        {
            let now = self.clock.now();
            let mut s = lock(&self.state);
            if let Err(over) = s.window.charge(len, now) {
                self.window_refused(&over, "writes fail with EDQUOT until it rolls over");
                return Err(errno(nix::errno::Errno::EDQUOT));
            }
        }
        let mut d = lock(&entry.data);
        self.absorb(entry, &mut d)?;
        if !d.backing_writable
            && let Some(rel) = d.path.clone()
        {
            // The caller's right to write was checked where it opened the file (the kernel,
            // or a server's check of the request): the file's mode changed since, or its
            // owner created it read-only, and the cache opened it read-only for that. As the
            // owner, it can still be written; as anyone else, not.
            let w = self.tree.open_writable_as_owner(&rel)?;
            d.backing = Some(Arc::new(w));
            d.backing_writable = true;
        }
        let ext = self.cfg.extent;
        let range = self.extent_range(offset, len);
        // Wait out write-backs of the whole range first, and hold the lock from then on: a
        // wait in the middle would let an eviction drop an extent this write had already
        // added clean, and the write would land unmarked.
        // Copies read-ahead has under way too: they write the cache file without the lock.
        while range
            .clone()
            .any(|i| d.extents.get(&i).is_some_and(|x| x.in_flight) || d.copying.contains(&i))
        {
            d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        let in_order = goes_on_in_order(offset, len, d.last_write.clone(), ext);
        let mut fresh = Vec::new();
        let mut filled = || -> io::Result<()> {
            for i in range.clone() {
                if !d.extents.contains_key(&i) {
                    let start = i * ext;
                    let backing_end = (start + ext).min(d.backing_size.min(d.size));
                    let covers = offset <= start && offset + len >= backing_end;
                    if covers || backing_end <= start {
                        self.insert_extent(&mut d, i);
                        fresh.push(i);
                    } else {
                        self.ensure_extent(entry, &mut d, i, CopyUp::Write)?;
                    }
                }
            }
            let f = self.cache_file(entry.id, &mut d)?;
            f.write_all_at(data, offset)?;
            if in_order {
                start_write_out(f, offset, len, ext);
            }
            Ok(())
        };
        if let Err(e) = filled() {
            // Extents added without their backing bytes must not stay: they would read as holes.
            let _ = self.drop_extents_locked(entry, &mut d, |i, x| !x.dirty && fresh.contains(&i));
            return Err(e);
        }
        d.last_write = offset..offset + len;
        let old = d.size;
        if offset + len > old {
            d.size = offset + len;
            self.resize_extents(&mut d, old, offset + len);
        }
        d.mtime = self.clock.now();
        let mut newly_dirty = Vec::new();
        for i in range.clone() {
            if self.mark_dirty(&mut d, i) {
                newly_dirty.push(i);
            }
        }
        if !newly_dirty.is_empty() {
            let mut s = lock(&self.state);
            for i in newly_dirty {
                let t = s.next_tick();
                s.dirty_queue.insert(t, (entry.id, i));
            }
        }
        Counters::add(&self.counters.written_bytes, len);
        self.touch(entry, &mut d, range);
        // Charged above, not again as passthrough growth.
        d.pt_charged = d.pt_charged.max(d.size);
        // Beside passthrough writers: the extents a write past the end skipped are the file's
        // too, dirty as the rest.
        self.absorb(entry, &mut d)
    }

    pub(super) fn preload_entry(&self, entry: &FileEntry) -> io::Result<u64> {
        let mut d = lock(&entry.data);
        let mut copied = 0;
        let mut i = 0;
        // The file's end is looked at again after each wait (the lock is let go meanwhile).
        while i < self.extent_range(0, d.size).end {
            // Read-ahead's copies write the cache file without the lock: not over one of them.
            // Only this extent's: a stream of cold readers keeps other copies coming, and a
            // wait for none at all could last as long as they do.
            if d.copying.contains(&i) {
                d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if !self.ensure_extent(entry, &mut d, i, CopyUp::Preload)? {
                copied += d.extents.get(&i).map_or(0, |x| x.bytes);
            }
            i += 1;
        }
        let range = self.extent_range(0, d.size);
        self.touch(entry, &mut d, range);
        Ok(copied)
    }
}

/// How far from where the last write ended a write may begin and still go on in order (for
/// [`start_write_out`]): the kernel has at most `max_background` write requests of a mount out
/// at once (12, the kernel's `FUSE_DEFAULT_MAX_BACKGROUND`, which the daemon leaves as it is),
/// each of at most `max_write` (1 MiB), and the request threads take them in any order. Its
/// write-back of a file that a job wrote in order comes in pieces that need not begin on an
/// extent (a first one of 512 KiB shifts every later one), so with 4 request threads "exactly
/// where the last ended" held for 40% of them, and the `fsync` after 1 GiB of 1 MiB writes
/// waited 0.18–0.21 s for the rest, where 1 thread's took 0.01 s.
const REORDERED: u64 = 12 << 20;

/// The least write that [`REORDERED`] applies to. The kernel writes back a file written in
/// order in pieces of `max_write`, but a file written at random too in order of offset, in runs
/// of the pages dirtied next to each other; those runs are short (a run of 64 pages, when 63%
/// of a file's pages are dirty, is a chance of 0.63^64) and are left to the exact rule: with
/// every write near the last counted, 4 KiB random writes + fsync lost 8–14%.
const STREAMED: u64 = 256 << 10;

/// Whether a write of `len` bytes at `offset` goes on in order, the last write having written
/// `last`: from exactly where it ended, from an extent's start, or a piece of a stream near
/// there ([`REORDERED`], [`STREAMED`]) that is not over the last one (pieces of a stream are
/// each written once; a write over the last is a rewrite, which would start the write-out of
/// the same extent again and again).
fn goes_on_in_order(offset: u64, len: u64, last: std::ops::Range<u64>, ext: u64) -> bool {
    offset == last.end
        || offset.is_multiple_of(ext)
        || (len >= STREAMED
            && offset.abs_diff(last.end) <= REORDERED
            && (offset.saturating_add(len) <= last.start || offset >= last.end))
}

/// The extents a write of `len` bytes at `offset` took to their end: from the start of its first
/// extent to its last extent boundary, as (offset, length); `None` if it ended inside the extent
/// it began in.
fn filled_extents(offset: u64, len: u64, ext: u64) -> Option<(u64, u64)> {
    let start = offset / ext * ext;
    let end = (offset + len) / ext * ext;
    (end > start).then(|| (start, end - start))
}

/// Starts the disk's write-out of the cache file's extents a write took to their end, without
/// waiting for it.
///
/// Why: the cache file's pages are otherwise written out only when the kernel's dirty limits
/// or the `fsync` that makes a write durable ask, so a job that writes and then syncs waits,
/// at the sync, for the whole file to reach the disk after every byte has already crossed the
/// kernel and the daemon: the two happen one after the other, where a direct write and its
/// disk overlap. Started as each extent fills, the disk writes the file while the next extents
/// arrive. 1 MiB writes + fsync of 1 GiB through a mount without passthrough went from 0.49 to
/// 0.77 of direct (`fs-write-32i` in docs/benchmarks.md; the `fsync` from 0.33 s to 0.01 s).
/// Only for writes that go on in order (the caller's check: near where the last one ended,
/// [`REORDERED`], or from an extent's start): an extent a write leaves unfinished waits for the
/// write that finishes it, and the range starts one extent before the write's own, so that the
/// piece of an extent that a request thread wrote after the piece finishing it (the kernel's
/// requests taken out of order) goes with the next one (the fsync after 1 GiB of 1 MiB writes
/// 0.06 → 0.04 s with 4 threads); scattered writes, which would write each extent out again
/// and again as they dirty it anew (4 KiB random writes lost 8% when any write that finished
/// an extent started it), leave the write-out to the kernel as before.
///
/// `posix_fadvise(DONTNEED)` is the safe interface here that starts write-out of a range
/// (`sync_file_range` has no safe wrapper). Its other effect, dropping the range's clean pages,
/// drops only pages already on the disk (this write's are dirty or being written), which a
/// read through the daemon then takes from the disk; a mount with the kernel's write cache
/// keeps its own copy of the file's pages anyway. Advice: a failure changes nothing but the
/// speed, so it is not reported.
pub(super) fn start_write_out(f: &File, offset: u64, len: u64, ext: u64) {
    if let Some((start, n)) = filled_extents(offset, len, ext) {
        let from = start.saturating_sub(ext);
        let _ = nix::fcntl::posix_fadvise(
            f,
            from as i64,
            (start + n - from) as i64,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
    }
}

/// Copies `len` bytes at `offset` of `src` to the same offset of `dst`; what `src` lacks (it
/// shrank meanwhile) is written as zeros, as [`read_at_zero_filled`] reads it.
///
/// Why `copy_file_range`: within one file system the kernel moves the pages itself, without the
/// two copies through the daemon's memory a read and a write cost (`fs-copy-range` in
/// docs/benchmarks.md). Where the kernel cannot (a backing directory on another file system:
/// EXDEV; no support: EOPNOTSUPP, ENOSYS, EINVAL), what is left goes by a read and a write.
pub(super) fn copy_range(src: &File, dst: &File, offset: u64, len: u64) -> io::Result<()> {
    use nix::errno::Errno;
    let mut done = 0;
    while done < len {
        let (mut from, mut to) = ((offset + done) as i64, (offset + done) as i64);
        let want = usize::try_from(len - done).unwrap_or(usize::MAX);
        match nix::fcntl::copy_file_range(src, Some(&mut from), dst, Some(&mut to), want) {
            Ok(0) => break,
            Ok(n) => done += n as u64,
            Err(Errno::EINTR) => {}
            Err(Errno::EXDEV | Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL) => {
                let buf = read_at_zero_filled(src, offset + done, len - done)?;
                return dst.write_all_at(&buf, offset + done);
            }
            Err(e) => return Err(e.into()),
        }
    }
    if done < len {
        dst.write_all_at(&vec![0; (len - done) as usize], offset + done)?;
    }
    Ok(())
}

/// Makes `len` bytes at `offset` of a cache file a hole again, its length unchanged; where the
/// file system cannot punch (or the punch fails for any reason), writes zeros there instead:
/// what was there must not stay.
fn punch(f: &File, offset: u64, len: u64) -> io::Result<()> {
    let flags = nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
        | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
    if nix::fcntl::fallocate(f, flags, offset as i64, len as i64).is_ok() {
        return Ok(());
    }
    let end = f.metadata()?.len().min(offset + len);
    if end > offset {
        f.write_all_at(&vec![0; (end - offset) as usize], offset)?;
    }
    Ok(())
}

/// Reads `len` bytes at `offset`; what lies past the end of the file reads as zeros, as it does
/// in a sparse file.
pub(super) fn read_at_zero_filled(f: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    read_at_into(f, offset, len, &mut buf)?;
    Ok(buf)
}

/// [`read_at_zero_filled`] into `buf`, which keeps its bytes between calls: only what the file
/// does not fill is zeroed, not the whole buffer first (a read of the cache file runs for every
/// read request through the daemon).
pub(super) fn read_at_into(f: &File, offset: u64, len: u64, buf: &mut Vec<u8>) -> io::Result<()> {
    let len = len as usize;
    if buf.len() < len {
        buf.resize(len, 0);
    }
    buf.truncate(len);
    let mut done = 0;
    while done < len {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[done..].fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_buffer_gets_the_file_s_bytes_and_zeros_past_its_end_never_old_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"abcdef").expect("write");
        let f = File::open(&path).expect("open");
        let mut buf = vec![b'x'; 16];
        read_at_into(&f, 2, 10, &mut buf).expect("read");
        assert_eq!(buf, b"cdef\0\0\0\0\0\0");
        read_at_into(&f, 0, 3, &mut buf).expect("read");
        assert_eq!(buf, b"abc");
        read_at_into(&f, 4, 8, &mut buf).expect("read");
        assert_eq!(buf, b"ef\0\0\0\0\0\0");
        assert_eq!(read_at_zero_filled(&f, 5, 3).expect("read"), b"f\0\0");
    }

    /// Write-out starts for the extents a write took to their end, from each one's start (its
    /// earlier bytes came with earlier writes), and not for one a write leaves unfinished.
    #[test]
    fn write_out_covers_the_extents_a_write_finished_and_no_other() {
        let m = 1 << 20;
        assert_eq!(filled_extents(0, m, m), Some((0, m)));
        assert_eq!(filled_extents(3 * m, m, m), Some((3 * m, m)));
        // The last 4 KiB of a sequential run of small writes finishes the extent.
        assert_eq!(filled_extents(m - 4096, 4096, m), Some((0, m)));
        assert_eq!(filled_extents(m - 8192, 4096, m), None);
        // Unaligned 1 MiB writes finish the extent they end past, not the one they end in.
        assert_eq!(filled_extents(m / 2, m, m), Some((0, m)));
        assert_eq!(filled_extents(m / 2, 3 * m, m), Some((0, 3 * m)));
        assert_eq!(filled_extents(5, 10, m), None);
    }

    /// The kernel's write-back of a file written in order, its pieces taken out of order by the
    /// request threads, still goes on in order; a write near the last that is short (the runs a
    /// file written at random is written back in) only from exactly where the last ended.
    #[test]
    fn pieces_of_a_stream_taken_out_of_order_go_on_in_order_and_short_scattered_runs_do_not() {
        let (m, k) = (1u64 << 20, 1u64 << 10);
        let half = m / 2;
        let after = |start: u64, len: u64| start..start + len;
        // Exactly on, or from an extent's start, whatever its size.
        assert!(goes_on_in_order(5 * m + 3, 4 * k, after(5 * m - 1, 4), m));
        assert!(goes_on_in_order(7 * m, 4 * k, after(0, 4 * k), m));
        // Pieces of 1 MiB half an extent off (after a first one of 512 KiB), one thread ahead of
        // another: behind the last, and past it.
        assert!(goes_on_in_order(
            34 * m + half,
            m,
            after(38 * m + half, m),
            m
        ));
        assert!(goes_on_in_order(
            38 * m + half,
            m,
            after(34 * m + half, m),
            m
        ));
        // Not from farther than the kernel can have out at once.
        assert!(!goes_on_in_order(
            60 * m + half,
            m,
            after(34 * m + half, m),
            m
        ));
        // A short run near the last: not.
        assert!(!goes_on_in_order(
            34 * m + 8 * k,
            12 * k,
            after(34 * m, half),
            m
        ));
        // A large rewrite of (part of) the last write's bytes: not.
        assert!(!goes_on_in_order(
            34 * m + half,
            m,
            after(34 * m + half, m),
            m
        ));
        assert!(!goes_on_in_order(
            34 * m + half + 4 * k,
            half,
            after(34 * m + half, m),
            m
        ));
    }

    /// A copy-up overwrites what the cache file held in the range, and writes zeros where the
    /// backing file ended early; within one file system (the kernel's copy) and across two
    /// (tmpfs to the test's directory: the kernel's copy or the read-and-write fallback).
    #[test]
    fn a_copied_range_is_the_source_s_bytes_then_zeros_over_what_was_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shm = std::path::Path::new("/dev/shm");
        let other = shm
            .is_dir()
            .then(|| tempfile::tempdir_in(shm).expect("tempdir in /dev/shm"));
        for src_dir in std::iter::once(dir.path()).chain(other.as_ref().map(|d| d.path())) {
            let src_path = src_dir.join("src");
            std::fs::write(&src_path, (0..100u8).collect::<Vec<_>>()).expect("write src");
            let dst_path = dir.path().join("dst");
            std::fs::write(&dst_path, vec![0xAA; 200]).expect("write dst");
            let src = File::open(&src_path).expect("open src");
            let dst = OpenOptions::new()
                .write(true)
                .open(&dst_path)
                .expect("open dst");
            // Bytes 40..100 exist in the source, 100..140 do not.
            copy_range(&src, &dst, 40, 100).expect("copy");
            let got = std::fs::read(&dst_path).expect("read dst");
            assert_eq!(&got[..40], &[0xAA; 40][..], "before the range: untouched");
            assert_eq!(
                &got[40..100],
                &(40..100u8).collect::<Vec<_>>()[..],
                "the source's bytes"
            );
            assert_eq!(&got[100..140], &[0; 40][..], "past the source's end: zeros");
            assert_eq!(&got[140..], &[0xAA; 60][..], "after the range: untouched");
        }
    }
}
