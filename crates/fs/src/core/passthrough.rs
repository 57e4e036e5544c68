//! Kernel passthrough for writes: a file the cache holds whole (or one just created) opened for
//! writing on a root mount is opened by the kernel on its cache file, and the kernel writes it
//! without the daemon. The daemon then knows nothing of what is written, so:
//!
//! - the file is dirty as a whole from the open until its last such writer closes: before the
//!   open is answered the cache file is synced and a `Whole` journal record is synced, so a
//!   crash meanwhile writes the whole cache file back at the next mount (fsync'ed bytes
//!   included: `fsync` syncs the cache file); when the last writer closes, a `Dirty` record
//!   naming every extent takes over and write-back proceeds as for any dirty file;
//! - its size and modification time are the cache file's, taken ([`Inner::absorb`]) at every
//!   point the daemon answers for the file (`getattr`, `fsync`, `flush`, `release`, reads and
//!   writes through the daemon, truncation, a passthrough reader's open), each of which also
//!   marks every extent present and dirty;
//! - write-back may copy the file out while it is open but never marks it clean (the kernel
//!   may have written it since), and a flush waiting for the cache to be clean writes such a
//!   file back as it is and does not wait for its writers;
//! - its extents are pinned (no eviction, no invalidation) while a writer is open;
//! - the limits, which the daemon cannot check at the write: when it next looks, what the
//!   file grew is charged to the write window, and what lies past `--max-file-size`, or past
//!   where the window ran out, is cut off the cache file, and the next `fsync` or `close` returns
//!   EFBIG or EDQUOT (the cut bytes are in neither the cache nor the backing directory, as
//!   under the kernel's write cache). Rewrites inside the file are not charged, nor counted in
//!   `written_bytes`: the daemon does not see them. A file at the limit, with less than an extent of room left in the
//!   window, or with set-ID bits is opened through the daemon as before, where the write that
//!   crosses a limit fails.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use super::{Attr, FileData, FileEntry, Inner, errno, lock};
use crate::journal::{self, Record};
use crate::stats::Counters;

impl Inner {
    /// Takes what passthrough writers did into the bookkeeping (nothing if none is open):
    /// the size and modification time from the cache file, every extent present and dirty,
    /// the growth charged to the write window. Bytes past `--max-file-size` or past what the
    /// window takes are cut off, for the next `fsync` or `close` to report.
    pub(super) fn absorb(&self, entry: &FileEntry, d: &mut FileData) -> io::Result<()> {
        if d.pt_writers == 0 {
            return Ok(());
        }
        let f = self.cache_file_arc(entry.id, d)?;
        let mut m = f.metadata()?;
        if m.len() > self.cfg.max_file_size {
            f.set_len(self.cfg.max_file_size)?;
            m = f.metadata()?;
            Counters::add(&self.counters.efbig, 1);
            d.pt_refused = Some(nix::errno::Errno::EFBIG);
        }
        if m.len() > d.pt_charged {
            let grew = m.len() - d.pt_charged;
            let charged = {
                let mut s = lock(&self.state);
                let now = self.clock.now();
                s.window.charge(grew, now).map_err(|over| {
                    // As much as the window has left is kept, as a write through the daemon
                    // would have been accepted up to there.
                    let room = over.limit.saturating_sub(over.used);
                    let kept = if room > 0 && s.window.charge(room, now).is_ok() {
                        room
                    } else {
                        0
                    };
                    (over, kept)
                })
            };
            // What the file grew is what the daemon can count of the kernel's writes.
            match charged {
                Ok(()) => {
                    d.pt_charged = m.len();
                    Counters::add(&self.counters.written_bytes, grew);
                }
                Err((over, kept)) => {
                    d.pt_charged += kept;
                    Counters::add(&self.counters.written_bytes, kept);
                    f.set_len(d.pt_charged)?;
                    m = f.metadata()?;
                    self.window_refused(
                        &over,
                        "a file written in passthrough is cut where the window ended, and fsync or close fails with EDQUOT",
                    );
                    d.pt_refused = Some(nix::errno::Errno::EDQUOT);
                }
            }
        }
        let mtime = Attr::from_meta(&m).mtime;
        if mtime != d.pt_mtime {
            d.mtime = mtime;
            d.pt_mtime = mtime;
        }
        let (old, new) = (d.size, m.len());
        if new != old {
            d.size = new;
            self.resize_extents(d, old, new);
        }
        for i in self.extent_range(0, new) {
            if !d.extents.contains_key(&i) {
                self.insert_extent(d, i);
            }
            // Whatever write-back is under way copied what may be older than the kernel's.
            self.mark_dirty(d, i);
        }
        Ok(())
    }

    /// Opens `entry` for writing in passthrough if it may be (see the module doc): the cache
    /// file, pinned and journaled whole, or `None` for the daemon's path.
    pub(super) fn start_pt_write(&self, entry: &FileEntry) -> io::Result<Option<Arc<File>>> {
        let mut d = lock(&entry.data);
        let Some(path) = d.path.clone() else {
            // Unlinked: no name a `Whole` record could give.
            return Ok(None);
        };
        // An extent being copied up is not in the cache yet, so the file is not whole: the
        // daemon takes the writes. (Waiting for the copies instead could last as long as a
        // stream of cold readers keeps them coming.)
        if !d.copying.is_empty() {
            return Ok(None);
        }
        self.absorb(entry, &mut d)?;
        let whole = self
            .extent_range(0, d.size)
            .all(|i| d.extents.contains_key(&i));
        if !whole || d.size >= self.cfg.max_file_size {
            return Ok(None);
        }
        if d.pt_writers == 0 {
            // The kernel would not clear set-user-ID and set-group-ID bits on the backing file
            // for a write it passes through: the daemon's path does.
            if self.backing_fd(&mut d)?.metadata()?.mode() & 0o6000 != 0 {
                return Ok(None);
            }
            // Nearly out of room: the write that crosses fails at once through the daemon,
            // rather than at the next fsync or close.
            let (used, limit, _) = lock(&self.state).window.usage(self.clock.now());
            if limit.saturating_sub(used) < self.cfg.extent {
                return Ok(None);
            }
            self.journal_whole(entry, &mut d, &path)?;
            d.pt_charged = d.size;
            d.pt_refused = None;
            d.pt_mtime = Attr::from_meta(&self.cache_file_arc(entry.id, &mut d)?.metadata()?).mtime;
            // The write-out of passthrough writes (`pt_write_out`) starts from what the file
            // holds now: those bytes are not theirs.
            d.pt_written_out = d.size / self.cfg.extent * self.cfg.extent;
        }
        d.pt_writers += 1;
        d.pinned += 1;
        // Dirty as a whole from now on, clean extents included: nothing may drop them.
        self.absorb(entry, &mut d)?;
        Counters::add(&self.counters.passthrough_write_opens, 1);
        Ok(d.cache.clone())
    }

    /// The cache file at the file's length, synced (the clean extents copied up earlier are
    /// part of what a replay writes back), then a synced `Whole` record.
    fn journal_whole(
        &self,
        entry: &FileEntry,
        d: &mut FileData,
        path: &std::path::Path,
    ) -> io::Result<()> {
        let f = self.cache_file_arc(entry.id, d)?;
        if f.metadata()?.len() != d.size {
            f.set_len(d.size)?;
        }
        f.sync_data()?;
        if !d.journaled {
            // The cache file's name must survive a crash too.
            File::open(&self.data_dir)?.sync_all()?;
        }
        let mut j = lock(&self.journal);
        j.append(&Record::Whole {
            id: entry.id,
            path: journal::path_bytes(path),
        })?;
        j.sync()?;
        d.journaled = true;
        Ok(())
    }

    /// [`FsCache::passthrough_write_coming`] of `entry`.
    pub(super) fn pt_write_out(&self, entry: &FileEntry) -> u64 {
        let (f, from, filled) = {
            let mut d = lock(&entry.data);
            if d.pt_writers == 0 {
                return 0;
            }
            let Ok(f) = self.cache_file_arc(entry.id, &mut d) else {
                return 0;
            };
            let Ok(size) = f.metadata().map(|m| m.len()) else {
                return 0;
            };
            let filled = size / self.cfg.extent * self.cfg.extent;
            let from = d.pt_written_out;
            if filled <= from {
                return 0;
            }
            d.pt_written_out = filled;
            (f, from, filled)
        };
        // Off the file's lock: starting the write-out of a large growth (one `write()` by
        // passthrough is not cut at `max_write`) may wait for the disk's queue.
        super::extents::start_write_out(&f, from, filled - from, self.cfg.extent);
        filled - from
    }

    /// A passthrough writer closes. With the last one the daemon takes the file over: its
    /// extents in a synced `Dirty` record (ending the `Whole` one), queued for write-back.
    pub(super) fn end_pt_write(&self, entry: &FileEntry) -> io::Result<()> {
        let mut d = lock(&entry.data);
        if d.pt_writers == 0 {
            return Ok(());
        }
        let absorbed = self.absorb(entry, &mut d);
        if d.pt_writers > 1 {
            d.pt_writers -= 1;
            d.pinned = d.pinned.saturating_sub(1);
            return absorbed;
        }
        let journaled = absorbed.and_then(|()| {
            let Some(path) = d.path.clone() else {
                return Ok(());
            };
            let dirty = d.dirty_extents();
            self.cache_file_arc(entry.id, &mut d)?.sync_data()?;
            self.journal_dirty(entry.id, &mut d, &path, dirty)
        });
        d.pt_writers = 0;
        if journaled.is_ok() {
            d.pinned = d.pinned.saturating_sub(1);
        } else {
            // The `Whole` record still stands, and a replay would write the whole cache file:
            // no extent of it may become a hole, so the pin stays for the entry's life.
            tracing::error!(
                file = entry.id,
                "could not journal a passthrough-written file's extents; it stays pinned in the cache"
            );
        }
        let dirty = d.dirty_extents();
        let mut s = lock(&self.state);
        for i in dirty {
            let t = s.next_tick();
            s.dirty_queue.insert(t, (entry.id, i));
        }
        drop(s);
        self.work.notify_all();
        journaled
    }

    /// What passthrough writers did that the cache refused since the last report (EFBIG,
    /// EDQUOT), for `fsync` and `close`.
    pub(super) fn pt_refusal(&self, entry: &FileEntry) -> io::Result<()> {
        let mut d = lock(&entry.data);
        self.absorb(entry, &mut d)?;
        match d.pt_refused.take() {
            Some(e) => Err(errno(e)),
            None => Ok(()),
        }
    }
}
