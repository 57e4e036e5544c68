//! What metadata operations do to cached files: truncation (journaled, then cut in the backing
//! file and in the cache), an unlinked or replaced path leaving its entry, renames (the
//! journal's `Rename` records first, then the path map of every cached file at or under the
//! name), and hard links (every name of one file is one entry: `FileData::path`, the name the
//! journal records, and `links`, the others; a file leaves the cache with its last name). The
//! operations themselves go to the backing directory in `FsCache`'s methods.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::{Attr, FileEntry, Inner, lock};
use crate::journal::{self, Record};

impl Inner {
    pub(super) fn truncate_entry(&self, entry: &FileEntry, size: u64) -> io::Result<()> {
        let mut d = lock(&entry.data);
        while d.extents.values().any(|x| x.in_flight) {
            d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        // The size the kernel's passthrough writes made is the one cut from.
        self.absorb(entry, &mut d)?;
        // Bytes written again past a cut are charged again; an extension is no write.
        d.pt_charged = size;
        let ext = self.cfg.extent;
        // A cut below what was written out: the write-out starts again from there as the
        // passthrough writers fill it anew.
        d.pt_written_out = d.pt_written_out.min(size / ext * ext);
        // A read-ahead copy under way read the old length's bytes.
        d.epoch += 1;
        if d.journaled {
            // Before anything is cut: a crash after the cut must not replay the old length.
            let mut j = lock(&self.journal);
            j.append(&Record::Size { id: entry.id, size })?;
            j.sync()?;
        }
        let backing = self.backing_fd(&mut d)?;
        backing.set_len(size)?;
        // Extents wholly past the new end go; the one the end falls in keeps its head.
        let first_gone = size.div_ceil(ext);
        let gone: Vec<u64> = d.extents.range(first_gone..).map(|(i, _)| *i).collect();
        if !gone.is_empty() {
            // Dirty or not, their bytes no longer exist.
            for i in &gone {
                if let Some(x) = d.extents.get_mut(i)
                    && x.dirty
                {
                    x.dirty = false;
                    let b = x.bytes;
                    d.dirty_bytes -= b;
                    self.dirty.fetch_sub(b, Relaxed);
                }
            }
            self.drop_extents_locked(entry, &mut d, |i, _| i >= first_gone)?;
        }
        if let Some(f) = &d.cache {
            f.set_len(size)?;
        }
        let old = d.size;
        d.size = size;
        d.backing_size = size;
        self.resize_extents(&mut d, old, size);
        d.mtime = self.clock.now();
        if let Ok(meta) = backing.metadata() {
            d.seen = (meta.size(), Attr::from_meta(&meta).mtime);
        }
        if d.dirty_bytes == 0 {
            self.settle_backing(&mut d, &backing);
        }
        // Extended beside passthrough writers: the new bytes are the file's, dirty as the rest.
        self.absorb(entry, &mut d)
    }

    pub(super) fn detach(&self, rel: &Path) {
        let entry = {
            let mut s = lock(&self.state);
            let Some(id) = s.by_path.remove(rel) else {
                return;
            };
            s.files.get(&id).cloned()
        };
        let Some(entry) = entry else { return };
        let mut d = lock(&entry.data);
        // One name of several: the file, its data and its other names stay.
        if let Some(i) = d.links.iter().position(|p| p == rel) {
            d.links.remove(i);
            return;
        }
        if d.path.as_deref() == Some(rel) && !d.links.is_empty() {
            let next = d.links.remove(0);
            if d.journaled {
                // A crash must not have the next mount write back to the name that went (an
                // unlink journaled this before it; a rename over `rel` did not).
                let _ = self.journal_now(&rename(entry.id, &next));
            }
            d.path = Some(next);
            return;
        }
        while d.extents.values().any(|x| x.in_flight) {
            d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        // The last name the cache knows, but the backing file has others (hard links made
        // behind its back): its data is not gone. Still open, it stays dirty, and the
        // write-back workers write it through the open descriptor (as they do later writes);
        // closed, what only the cache holds is written back now, before the entry goes.
        if d.dirty_bytes > 0 && super::writeback::still_linked(&d) {
            if d.open_count > 0 {
                d.path = None;
                if std::mem::take(&mut d.journaled) {
                    // The journal can name no path of it now; a later fsync writes it back.
                    let _ = self.journal_now(&Record::Drop { id: entry.id });
                }
                return;
            }
            drop(d);
            if let Err(e) = self.writeback_file(&entry, true) {
                tracing::warn!(error = %e, path = %rel.display(), "writing back a file unlinked under one of its names");
            }
            d = lock(&entry.data);
        }
        d.path = None;
        for x in d.extents.values_mut() {
            x.dirty = false;
        }
        self.dirty.fetch_sub(d.dirty_bytes, Relaxed);
        d.dirty_bytes = 0;
        if std::mem::take(&mut d.journaled) {
            let _ = self.journal_now(&Record::Drop { id: entry.id });
        }
        if d.open_count == 0 {
            let _ = self.drop_extents_locked(&entry, &mut d, |_, _| true);
            d.cache = None;
            d.backing = None;
            drop(d);
            self.forget_entry(&entry);
            let _ = std::fs::remove_file(self.data_dir.join(entry.id.to_string()));
        }
    }

    /// Before `rel` is unlinked: if the journal names a file by `rel` and the file has another
    /// name, the journal names that one from now on (synced), so that a crash after the unlink
    /// never writes the file's data back under the name that went. Returns the file's id if it
    /// did (for [`journal_rename_back`](Self::journal_rename_back) if the unlink fails).
    pub(super) fn journal_unlink(&self, rel: &Path) -> io::Result<Option<u64>> {
        let Some(entry) = self.entry(rel) else {
            return Ok(None);
        };
        let d = lock(&entry.data);
        let Some(next) = d.links.first() else {
            return Ok(None);
        };
        if !d.journaled || d.path.as_deref() != Some(rel) {
            return Ok(None);
        }
        self.journal_now(&rename(entry.id, next))?;
        Ok(Some(entry.id))
    }

    /// The unlink [`journal_unlink`](Self::journal_unlink) prepared failed: the journal names
    /// file `id` by `rel` again.
    pub(super) fn journal_rename_back(&self, id: u64, rel: &Path) -> io::Result<()> {
        self.journal_now(&rename(id, rel))
    }

    /// Appends `record` to the journal and syncs it.
    fn journal_now(&self, record: &Record) -> io::Result<()> {
        let mut j = lock(&self.journal);
        j.append(record)?;
        j.sync()
    }

    /// `new` was made another name of `existing`: if the cache holds the file, the name joins
    /// its entry.
    pub(super) fn linked(&self, existing: &Path, new: &Path) {
        let Some(entry) = self.entry(existing) else {
            return;
        };
        let mut d = lock(&entry.data);
        // The file's lock, then the state's: the documented order.
        let mut s = lock(&self.state);
        if s.by_path.contains_key(new) {
            // link(2) refuses a name that exists: the cache's map had a stale one.
            return;
        }
        s.by_path.insert(new.to_path_buf(), entry.id);
        drop(s);
        d.links.push(new.to_path_buf());
    }

    /// Appends (and syncs) `Rename` records for the journaled files at or under `from` as if
    /// moved to `to` (and the reverse too for an exchange).
    pub(super) fn journal_moves(&self, from: &Path, to: &Path, exchange: bool) -> io::Result<()> {
        let moving: Vec<(Arc<FileEntry>, PathBuf, PathBuf)> = {
            let s = lock(&self.state);
            s.by_path
                .iter()
                .filter_map(|(p, id)| {
                    let new = match (p.strip_prefix(from), p.strip_prefix(to)) {
                        (Ok(rest), _) => join_rest(to, rest),
                        (_, Ok(rest)) if exchange => join_rest(from, rest),
                        _ => return None,
                    };
                    s.files.get(id).map(|e| (e.clone(), p.clone(), new))
                })
                .collect()
        };
        let mut any = false;
        for (entry, old, new) in moving {
            let d = lock(&entry.data);
            // The journal names a file by its `path` alone; its other names may move freely.
            if d.journaled && d.path.as_ref() == Some(&old) {
                lock(&self.journal).append(&rename(entry.id, &new))?;
                any = true;
            }
        }
        if any {
            lock(&self.journal).sync()?;
        }
        Ok(())
    }

    pub(super) fn renamed(&self, from: &Path, to: &Path, exchange: bool) {
        if from == to {
            return;
        }
        let mut moved: Vec<(Arc<FileEntry>, PathBuf, PathBuf)> = Vec::new();
        let mut replaced = None;
        {
            let mut s = lock(&self.state);
            let affected: Vec<(PathBuf, u64)> = s
                .by_path
                .iter()
                .filter(|(p, _)| p.starts_with(from) || (exchange && p.starts_with(to)))
                .map(|(p, id)| (p.clone(), *id))
                .collect();
            if !exchange && s.by_path.contains_key(to) {
                replaced = Some(to.to_path_buf());
            }
            for (p, _) in &affected {
                s.by_path.remove(p);
            }
            for (p, id) in affected {
                let new = if let Ok(rest) = p.strip_prefix(from) {
                    join_rest(to, rest)
                } else if let Ok(rest) = p.strip_prefix(to) {
                    join_rest(from, rest)
                } else {
                    continue;
                };
                if let Some(e) = s.files.get(&id).cloned() {
                    moved.push((e, p, new));
                }
            }
        }
        if let Some(p) = replaced {
            self.detach(&p);
        }
        let mut s_updates = Vec::new();
        for (entry, old, new) in moved {
            let mut d = lock(&entry.data);
            if d.path.as_ref() != Some(&old) {
                // One of its other names.
                if let Some(l) = d.links.iter_mut().find(|l| **l == old) {
                    *l = new.clone();
                }
                s_updates.push((new, entry.id));
                continue;
            }
            d.path = Some(new.clone());
            if d.journaled {
                let _ = self.journal_now(&rename(entry.id, &new));
            }
            s_updates.push((new, entry.id));
        }
        let mut s = lock(&self.state);
        for (p, id) in s_updates {
            s.by_path.insert(p, id);
        }
    }
}

/// `base` joined with `rest`, without the trailing slash `join("")` would add.
fn join_rest(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rest)
    }
}

/// The journal record that file `id` is now at `path`.
fn rename(id: u64, path: &Path) -> Record {
    Record::Rename {
        id,
        path: journal::path_bytes(path),
    }
}
