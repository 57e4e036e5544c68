//! Write-back: dirty extents to the backing file, one extent at a time with the file's lock
//! released during the write and the extent marked in flight; `fsync` (the journal's `Dirty`
//! records in cache mode); the write-back workers that follow the dirty watermarks and the
//! write-back policy's target; and flushing everything (on request, in the background, at
//! unmount).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, SystemTime};

use super::extents::read_at_zero_filled;
use super::{Attr, FileData, FileEntry, Inner, lock};
use crate::journal::{self, Record};
use crate::stats::Counters;

impl Inner {
    pub(super) fn fsync_cache(&self, entry: &FileEntry) -> io::Result<()> {
        let mut d = lock(&entry.data);
        if d.pt_writers > 0 {
            // Written by the kernel in passthrough: the `Whole` record (synced at the open)
            // makes the whole cache file the data, so its bytes synced are what a crash keeps.
            // A `Dirty` record now would end that while the kernel still writes.
            self.absorb(entry, &mut d)?;
            self.cache_file(entry.id, &mut d)?.sync_data()?;
            return lock(&self.journal).sync();
        }
        let dirty: Vec<u64> = d.dirty_extents();
        if dirty.is_empty() {
            return Ok(());
        }
        let Some(path) = d.path.clone() else {
            // No name the journal could give: durable where the file still has names (links
            // the cache does not know), in the backing file; with none, nothing to keep.
            if still_linked(&d) {
                drop(d);
                return self.writeback_file(entry, true).map(|_| ());
            }
            return Ok(());
        };
        self.cache_file(entry.id, &mut d)?.sync_data()?;
        if !d.journaled {
            // The cache file's name must survive a crash too.
            File::open(&self.data_dir)?.sync_all()?;
        }
        self.journal_dirty(entry.id, &mut d, &path, dirty)?;
        d.journaled = true;
        Ok(())
    }

    /// A synced `Dirty` record of file `id` (at `path`) naming `dirty` of its extents, which
    /// then count as journaled: what a crash then writes back. The caller synced the cache
    /// file first (the record must not name bytes a crash could lose).
    pub(super) fn journal_dirty(
        &self,
        id: u64,
        d: &mut FileData,
        path: &Path,
        dirty: Vec<u64>,
    ) -> io::Result<()> {
        let mut j = lock(&self.journal);
        j.append(&Record::Dirty {
            id,
            path: journal::path_bytes(path),
            size: d.size,
            extents: dirty.clone(),
        })?;
        j.sync()?;
        drop(j);
        for i in dirty {
            if let Some(x) = d.extents.get_mut(&i) {
                x.journaled = true;
            }
        }
        Ok(())
    }

    /// Writes one extent back if it is dirty; the file's lock is released during the write.
    /// Returns the bytes written.
    pub(super) fn writeback_extent<'a>(
        &self,
        entry: &'a FileEntry,
        mut d: MutexGuard<'a, FileData>,
        i: u64,
    ) -> io::Result<(MutexGuard<'a, FileData>, u64)> {
        loop {
            match d.extents.get(&i) {
                Some(x) if x.in_flight => {
                    d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
                }
                Some(x) if x.dirty => break,
                _ => return Ok((d, 0)),
            }
        }
        if d.path.is_none() && !still_linked(&d) {
            // Unlinked, and no name left anywhere: the data has nowhere to go. No longer dirty,
            // so that flushes and the unmount do not wait for it. (With names the cache does
            // not know, the open descriptor still reaches the file: written back through it.)
            if let Some(x) = d.extents.get_mut(&i)
                && x.dirty
            {
                x.dirty = false;
                let b = x.bytes;
                d.dirty_bytes -= b;
                self.dirty.fetch_sub(b, Relaxed);
            }
            return Ok((d, 0));
        }
        let start = i * self.cfg.extent;
        let (len, generation) = {
            let x = &d.extents[&i];
            (x.bytes, x.generation)
        };
        let buf = read_at_zero_filled(self.cache_file(entry.id, &mut d)?, start, len)?;
        let dst = self.backing_fd(&mut d)?;
        if d.backing_size < d.size {
            // The backing file gets its final length first, so the extents' writes do not
            // extend it: a file system that lets writes inside a file run in parallel
            // (Lustre's stripes, FUSE's parallel direct writes) then runs them in parallel.
            // The bytes not yet written back read as zeros there meanwhile, as a shorter file
            // would have lacked them.
            // Not on a striped cache's server: the other servers extend the file with their own
            // stripes at any moment, and a length this one read could be cut back to between
            // its look and its `set_len` (a bench found files cut at a stripe boundary). Its
            // writes extend the file as far as its own data goes; a length without data is a
            // truncation's, which every server sets.
            if !self.cfg.shared {
                dst.set_len(d.size)?;
            }
            d.backing_size = d.size;
        }
        if let Some(x) = d.extents.get_mut(&i) {
            x.in_flight = true;
        }
        drop(d);
        self.writeback_hold.stop_here(i, || self.stopping());
        let res = dst.write_all_at(&buf, start);
        let mut d = lock(&entry.data);
        if let Some(x) = d.extents.get_mut(&i) {
            x.in_flight = false;
        }
        entry.idle.notify_all();
        res?;
        Counters::add(&self.counters.writeback_bytes, len);
        d.backing_size = d.backing_size.max(start + len);
        // The backing file changed by our own hand: what revalidation compares with moves too,
        // or reopening a half-written-back file would look like a change behind our back.
        if let Ok(m) = dst.metadata() {
            d.seen = (m.size(), Attr::from_meta(&m).mtime);
        }
        let mut clean = false;
        // Open for writing in passthrough: the kernel may have written it since the copy, so
        // it stays dirty (and out of the queue: the last writer's close queues it again).
        let pt = d.pt_writers > 0;
        if !pt
            && let Some(x) = d.extents.get_mut(&i)
            && x.generation == generation
            && x.dirty
        {
            // A journaled extent keeps its mark: the `Clean` record waits until its data is
            // about to leave the cache (`drop_extents_locked`), after one sync of the backing
            // file, not one per extent here.
            x.dirty = false;
            clean = true;
            let b = x.bytes;
            d.dirty_bytes -= b;
            self.dirty.fetch_sub(b, Relaxed);
        }
        if !clean && !pt && d.extents.get(&i).is_some_and(|x| x.dirty) {
            // Written again meanwhile: back in the queue.
            let mut s = lock(&self.state);
            let t = s.next_tick();
            s.dirty_queue.insert(t, (entry.id, i));
        }
        if d.dirty_bytes == 0 && !pt {
            self.settle_backing(&mut d, &dst);
        }
        Ok((d, len))
    }

    /// Once nothing of a file is dirty: the backing file gets the cache's modification time,
    /// and the cache remembers the backing file's state for revalidation.
    pub(super) fn settle_backing(&self, d: &mut FileData, dst: &File) {
        let m = d
            .mtime
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let ts = nix::sys::time::TimeSpec::new(m.as_secs() as i64, m.subsec_nanos() as i64);
        let _ = nix::sys::stat::futimens(dst, &nix::sys::time::TimeSpec::UTIME_OMIT, &ts);
        if let Ok(meta) = dst.metadata() {
            d.seen = (meta.size(), Attr::from_meta(&meta).mtime);
            d.backing_size = meta.size();
        }
        if d.open_count == 0 {
            d.backing = None;
        }
    }

    /// Writes every dirty extent of a file back (and syncs the backing file if `sync`).
    pub(super) fn writeback_file(&self, entry: &FileEntry, sync: bool) -> io::Result<u64> {
        let mut d = lock(&entry.data);
        self.absorb(entry, &mut d)?;
        let dirty: Vec<u64> = d.dirty_extents();
        let mut bytes = 0;
        for i in dirty {
            let (g, b) = self.writeback_extent(entry, d, i)?;
            d = g;
            bytes += b;
        }
        // An extent written again during its write-back is dirty again: once more, under the
        // lock throughout, so a caller's fsync covers every write before it.
        let again: Vec<u64> = d.dirty_extents();
        for i in again {
            let (g, b) = self.writeback_extent(entry, d, i)?;
            d = g;
            bytes += b;
        }
        if sync {
            // A closed, now clean file has no descriptor left: open one to sync.
            self.backing_fd(&mut d)?.sync_all()?;
            if d.open_count == 0 && d.dirty_bytes == 0 {
                d.backing = None;
            }
        }
        lock(&self.journal).sync()?;
        Ok(bytes)
    }

    pub(super) fn writeback_worker(self: Arc<Self>) {
        let mut s = lock(&self.state);
        loop {
            if self.stop.load(Relaxed) {
                return;
            }
            // The write-back policy's target: write back while more than it is dirty.
            let target = self.writeback_to.load(Relaxed);
            let wanted = target != crate::policy::NONE && self.dirty.load(Relaxed) > target;
            let job = if (wanted || s.flushing > 0) && !s.paused {
                // The oldest dirty extent of a file no other worker is on, among the oldest 64;
                // else the oldest.
                let pick = s
                    .dirty_queue
                    .iter()
                    .take(64)
                    .find(|(_, (id, _))| !s.writing.contains_key(id))
                    .or_else(|| s.dirty_queue.iter().next())
                    .map(|(t, _)| *t);
                pick.and_then(|t| s.dirty_queue.remove(&t))
            } else {
                None
            };
            let Some((id, i)) = job else {
                s = self
                    .work
                    .wait_timeout(s, Duration::from_millis(500))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            };
            let Some(entry) = s.files.get(&id).cloned() else {
                continue;
            };
            s.busy += 1;
            *s.writing.entry(id).or_default() += 1;
            drop(s);
            let d = lock(&entry.data);
            if let Err(e) = self.writeback_extent(&entry, d, i) {
                Counters::add(&self.counters.writeback_errors, 1);
                tracing::error!(error = %e, file = id, extent = i, "write-back failed; retrying");
                // Back in the queue after a pause, so a dead backing store is not spun on.
                std::thread::sleep(Duration::from_millis(200));
                let still = lock(&entry.data).extents.get(&i).is_some_and(|x| x.dirty);
                let mut s = lock(&self.state);
                if still {
                    let t = s.next_tick();
                    s.dirty_queue.insert(t, (id, i));
                }
            }
            s = lock(&self.state);
            s.busy -= 1;
            if let Some(n) = s.writing.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    s.writing.remove(&id);
                }
            }
            self.progress.notify_all();
        }
    }

    pub(super) fn request_flush(self: &Arc<Self>) -> io::Result<u64> {
        let mut running = lock(&self.flusher);
        let asked = self.flush_asked.fetch_add(1, Relaxed) + 1;
        if !*running {
            let inner = self.clone();
            let h = std::thread::Builder::new()
                .name("pliant-fs-flush".into())
                .spawn(move || {
                    // Each round covers every ask made before it began.
                    while !inner.stop.load(Relaxed) {
                        let target = inner.flush_asked.load(Relaxed);
                        inner.flush(&mut |_| {});
                        if inner.stop.load(Relaxed) {
                            break;
                        }
                        inner.flush_done.fetch_max(target, Relaxed);
                        // Under the lock an ask takes: one made after this sees no flusher
                        // and starts one.
                        let mut running = lock(&inner.flusher);
                        if target == inner.flush_asked.load(Relaxed) {
                            *running = false;
                            return;
                        }
                    }
                    *lock(&inner.flusher) = false;
                })?;
            *running = true;
            // Joined with the other threads at the stop, so the cache (and its directory's
            // lock) goes with the mount; threads of earlier rounds that ended are dropped.
            let mut workers = lock(&self.workers);
            workers.retain(|w| !w.is_finished());
            workers.push(h);
        }
        Ok(asked)
    }

    pub(super) fn flush(&self, progress: &mut dyn FnMut(u64)) {
        if let Some(r) = self.remote.get() {
            // A striped mount's dirty data is in its servers: the flush is theirs (every
            // server, for the whole job: a mount cannot tell which of their data is its own).
            if let Err(e) = r.flush() {
                tracing::error!(error = %e, "flushing the cache servers");
            }
        }
        lock(&self.state).flushing += 1;
        self.work.notify_all();
        loop {
            let dirty = self.dirty.load(Relaxed);
            progress(dirty);
            // Stopped: no write-back thread is left to bring it down.
            if dirty == 0 || self.stop.load(Relaxed) {
                break;
            }
            if self.only_pt_writers_dirty() {
                break;
            }
            let s = lock(&self.state);
            let _ = self.progress.wait_timeout(s, Duration::from_millis(200));
        }
        // Written back means durable in the backing file system, not in its page cache: after
        // an unmount the job's data must survive the node. Before the journal's `Clean`
        // records become durable, not after.
        if let Ok(dir) = self.tree.open_dir(Path::new(""))
            && let Err(e) = nix::unistd::syncfs(&dir)
        {
            tracing::error!(error = %e, "syncing the backing file system");
        }
        let _ = lock(&self.journal).sync();
        lock(&self.state).flushing -= 1;
    }
}

impl Inner {
    /// Whether all that is dirty is held by files open for writing in passthrough, which stay
    /// dirty while open: written back as they are now (so the flush covers what was written
    /// before it), they do not hold the flush up. False while the queue or a worker has work.
    fn only_pt_writers_dirty(&self) -> bool {
        let files: Vec<Arc<FileEntry>> = {
            let s = lock(&self.state);
            if !s.dirty_queue.is_empty() || s.busy > 0 {
                return false;
            }
            s.files.values().cloned().collect()
        };
        let open: Vec<Arc<FileEntry>> = files
            .into_iter()
            .filter(|e| lock(&e.data).pt_writers > 0)
            .collect();
        if open.is_empty() {
            return false;
        }
        for e in &open {
            if let Err(err) = self.writeback_file(e, false) {
                Counters::add(&self.counters.writeback_errors, 1);
                tracing::error!(error = %err, file = e.id, "write-back of a file open in passthrough failed");
                return false;
            }
        }
        let held: u64 = open.iter().map(|e| lock(&e.data).dirty_bytes).sum();
        self.dirty.load(Relaxed) <= held
    }
}

/// Whether the file's open backing descriptor still has a name in the backing directory (a
/// hard link the cache does not know), after the names the cache knew went.
pub(super) fn still_linked(d: &FileData) -> bool {
    d.backing
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .is_some_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 0)
}
