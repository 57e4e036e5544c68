//! What metadata operations do to cached files: truncation (journaled, then cut in the backing
//! file and in the cache), an unlinked or replaced path leaving its entry, and renames (the
//! journal's `Rename` records first, then the path map of every cached file at or under the
//! name). The operations themselves go to the backing directory in `FsCache`'s methods.

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
        let ext = self.cfg.extent;
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
        Ok(())
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
        while d.extents.values().any(|x| x.in_flight) {
            d = entry.idle.wait(d).unwrap_or_else(|e| e.into_inner());
        }
        d.path = None;
        for x in d.extents.values_mut() {
            x.dirty = false;
        }
        self.dirty.fetch_sub(d.dirty_bytes, Relaxed);
        d.dirty_bytes = 0;
        if std::mem::take(&mut d.journaled) {
            let mut j = lock(&self.journal);
            let _ = j
                .append(&Record::Drop { id: entry.id })
                .and_then(|_| j.sync());
        }
        if d.open_count == 0 {
            let _ = self.drop_extents_locked(&entry, &mut d, |_, _| true);
            d.cache = None;
            d.backing = None;
            drop(d);
            lock(&self.state).files.remove(&entry.id);
            let _ = std::fs::remove_file(self.data_dir.join(entry.id.to_string()));
        }
    }

    /// Appends (and syncs) `Rename` records for the journaled files at or under `from` as if
    /// moved to `to` (and the reverse too for an exchange).
    pub(super) fn journal_moves(&self, from: &Path, to: &Path, exchange: bool) -> io::Result<()> {
        let moving: Vec<(Arc<FileEntry>, PathBuf)> = {
            let s = lock(&self.state);
            s.by_path
                .iter()
                .filter_map(|(p, id)| {
                    let new = match (p.strip_prefix(from), p.strip_prefix(to)) {
                        (Ok(rest), _) => join_rest(to, rest),
                        (_, Ok(rest)) if exchange => join_rest(from, rest),
                        _ => return None,
                    };
                    s.files.get(id).map(|e| (e.clone(), new))
                })
                .collect()
        };
        let mut any = false;
        for (entry, new) in moving {
            let d = lock(&entry.data);
            if d.journaled {
                lock(&self.journal).append(&Record::Rename {
                    id: entry.id,
                    path: journal::path_bytes(&new),
                })?;
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
        let mut moved: Vec<(Arc<FileEntry>, PathBuf)> = Vec::new();
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
                    moved.push((e, new));
                }
            }
        }
        if let Some(p) = replaced {
            self.detach(&p);
        }
        let mut s_updates = Vec::new();
        for (entry, new) in moved {
            let mut d = lock(&entry.data);
            d.path = Some(new.clone());
            if d.journaled {
                let mut j = lock(&self.journal);
                let _ = j
                    .append(&Record::Rename {
                        id: entry.id,
                        path: journal::path_bytes(&new),
                    })
                    .and_then(|_| j.sync());
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
