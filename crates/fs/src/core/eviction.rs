//! Eviction: dropping clean extents from the cache (their journal records first), writing back
//! the dirty ones of a file being evicted or invalidated, and the LRU walk down to the eviction
//! policy's target (never above capacity, whatever the policy says).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering::Relaxed;

use super::{Attr, Extent, FileData, FileEntry, Inner, lock};
use crate::journal::Record;
use crate::stats::Counters;

/// Whether a hole punch of an evicted extent has failed in this process (the warning's once).
static PUNCH_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Inner {
    /// Drops extents `keep` rejects (`keep(i, extent)` true drops); dirty ones must have been
    /// dealt with by the caller. Returns the bytes dropped.
    pub(super) fn drop_extents_locked(
        &self,
        entry: &FileEntry,
        d: &mut FileData,
        select: impl Fn(u64, &Extent) -> bool,
    ) -> io::Result<u64> {
        d.epoch += 1;
        let victims: Vec<u64> = d
            .extents
            .iter()
            .filter(|(i, x)| select(**i, x))
            .map(|(i, _)| *i)
            .collect();
        if victims.is_empty() {
            return Ok(0);
        }
        // No `Dirty` record may outlive the data it names: clean journaled extents get their
        // `Clean` records, after their backing copy is made durable, and the journal is synced
        // before any data goes. (Dirty ones leave only by truncation or unlink, which journal
        // `Size` or `Drop` themselves.)
        let journaled: Vec<u64> = victims
            .iter()
            .copied()
            .filter(|i| d.extents.get(i).is_some_and(|x| x.journaled && !x.dirty))
            .collect();
        if !journaled.is_empty() && d.path.is_some() {
            self.backing_fd(d)?.sync_data()?;
            lock(&self.journal).append(&Record::Clean {
                id: entry.id,
                extents: journaled,
            })?;
            if d.open_count == 0 && d.dirty_bytes == 0 {
                d.backing = None;
            }
        }
        lock(&self.journal).sync()?;
        let ext = self.cfg.extent;
        let mut dropped = 0;
        let mut ticks = Vec::new();
        for i in victims {
            let Some(x) = d.extents.remove(&i) else {
                continue;
            };
            if let Some(f) = &d.cache
                && let Err(e) = nix::fcntl::fallocate(
                    f,
                    nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
                        | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
                    (i * ext) as i64,
                    ext as i64,
                )
                && !PUNCH_FAILED.swap(true, Relaxed)
            {
                // Nothing reads a dropped extent's bytes (a read of it copies it up again over
                // them), so the cache stays right; what it costs is the disk space, which the
                // capacity no longer counts. Said once: every later drop would say it again.
                tracing::warn!(
                    error = %e,
                    cache_dir = %self.cfg.cache_dir.display(),
                    "the cache directory's file system cannot punch holes: evicted extents keep their disk space, which the capacity no longer counts"
                );
            }
            d.cached_bytes -= x.bytes;
            self.used.fetch_sub(x.bytes, Relaxed);
            if x.dirty {
                d.dirty_bytes -= x.bytes;
                self.dirty.fetch_sub(x.bytes, Relaxed);
            }
            dropped += x.bytes;
            ticks.push(x.tick);
        }
        let mut s = lock(&self.state);
        for t in ticks {
            if let Some(&(id, Some(_))) = s.lru.get(&t)
                && id == entry.id
            {
                s.lru.remove(&t);
            }
        }
        if d.extents.is_empty() {
            s.lru.remove(&d.tick);
        }
        Ok(dropped)
    }

    /// Writes back and drops a file's extents (all of them, or only `only`).
    pub(super) fn evict_extents(&self, entry: &FileEntry, only: Option<u64>) -> io::Result<u64> {
        let mut d = lock(&entry.data);
        if d.pinned > 0 {
            // A passthrough reader reads the cache file directly: a hole would read as zeros.
            return Ok(0);
        }
        if d.path.is_none() {
            // Unlinked while open: what was written is in the cache alone (clean only in that
            // nothing is to be written back), and the backing file its extents would be copied
            // up from again holds older bytes. It leaves with its last handle.
            return Ok(0);
        }
        let targets: Vec<u64> = match only {
            Some(i) => vec![i],
            None => d.extents.keys().copied().collect(),
        };
        for &i in &targets {
            let (g, _) = self.writeback_extent(entry, d, i)?;
            d = g;
        }
        // Wait out write-backs other threads have in flight, then drop what is clean.
        while targets
            .iter()
            .any(|i| d.extents.get(i).is_some_and(|x| x.in_flight))
        {
            d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        let dropped =
            self.drop_extents_locked(entry, &mut d, |i, x| !x.dirty && targets.contains(&i))?;
        Counters::add(&self.counters.evicted_bytes, dropped);
        if dropped > 0 {
            Counters::add(&self.counters.evicted_extents, targets.len() as u64);
        }
        if d.extents.is_empty() {
            d.cache = None;
            let _ = std::fs::remove_file(self.data_dir.join(entry.id.to_string()));
            // Its `Clean` records were synced before the drop: a new cache file starts afresh,
            // and its first fsync syncs the directory entry again.
            d.journaled = false;
        }
        Ok(dropped)
    }

    pub(super) fn invalidate_entry(&self, entry: &FileEntry) -> io::Result<u64> {
        let mut d = lock(&entry.data);
        if d.pinned > 0 {
            return Ok(0);
        }
        while d.extents.values().any(|x| x.in_flight) {
            d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        let dropped = self.drop_extents_locked(entry, &mut d, |_, x| !x.dirty)?;
        if let Some(p) = d.path.clone() {
            let meta = self.tree.metadata(&p)?;
            d.backing_size = meta.size();
            d.seen = (meta.size(), Attr::from_meta(&meta).mtime);
            if d.dirty_bytes == 0 {
                d.size = meta.size();
                d.mtime = d.seen.1;
            }
        }
        Ok(dropped)
    }

    /// Evicts down to the eviction policy's target, if it set one; and, whatever the policy,
    /// down to the low watermark when the cache would hold more than its capacity.
    pub(crate) fn maybe_evict(&self) {
        let target = self.evict_to.load(Relaxed);
        let used = self.used.load(Relaxed);
        let goal = if used > self.cfg.capacity {
            target.min(self.cfg.low_bytes())
        } else {
            target
        };
        if goal == crate::policy::NONE || used <= goal {
            return;
        }
        let _one = lock(&self.evicting);
        // Pinned files go to the back of the queue: one pass over it at most.
        let mut budget = lock(&self.state).lru.len();
        while self.used.load(Relaxed) > goal && budget > 0 {
            budget -= 1;
            let victim = {
                let mut s = lock(&self.state);
                let Some((&t, &(id, ext))) = s.lru.iter().next() else {
                    break;
                };
                s.lru.remove(&t);
                s.files.get(&id).cloned().map(|e| (e, ext))
            };
            let Some((entry, ext)) = victim else { continue };
            {
                let mut d = lock(&entry.data);
                if d.pinned > 0 || d.path.is_none() {
                    // Back of the order: an extent's own entry, or it would leave the order.
                    let range = ext.map_or(0..0, |i| i..i + 1);
                    self.touch(&entry, &mut d, range);
                    continue;
                }
            }
            if let Err(e) = self.evict_extents(&entry, ext) {
                // Back in the LRU order, or it would never be picked again until touched.
                let mut d = lock(&entry.data);
                let range = match ext {
                    Some(i) => i..i + 1,
                    None => 0..0,
                };
                self.touch(&entry, &mut d, range);
                drop(d);
                Counters::add(&self.counters.writeback_errors, 1);
                tracing::error!(error = %e, "eviction could not write a dirty extent back; retrying later");
                break;
            }
        }
        if self.used.load(Relaxed) <= goal {
            // Done: the policy sets a new target when it wants more.
            let _ = self
                .evict_to
                .compare_exchange(target, crate::policy::NONE, Relaxed, Relaxed);
        }
    }
}
