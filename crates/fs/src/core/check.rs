//! The bookkeeping checker for tests (`check_invariants`: extents, per-file and total counts,
//! the dirty queue, the path map, clean files against their backing files) and `debug_entry`
//! for their diagnostics.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use super::{Attr, FsCache, lock};

impl FsCache {
    /// Checks the bookkeeping (for tests): every extent's bytes follow from the file's size,
    /// per-file and global byte counts add up, every dirty extent is queued or in flight.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let inner = &self.inner;
        {
            let mut s = lock(&inner.state);
            s.paused = true;
            while s.busy > 0 {
                s = inner.progress.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
        // Eviction runs on the policy thread too: hold it off for the check.
        let evicting = lock(&inner.evicting);
        let result = self.check_paused();
        drop(evicting);
        lock(&inner.state).paused = false;
        inner.work.notify_all();
        result
    }

    fn check_paused(&self) -> Result<(), String> {
        let inner = &self.inner;
        let ext = inner.cfg.extent;
        let (files, queued, by_path) = {
            let s = lock(&inner.state);
            (
                s.files.values().cloned().collect::<Vec<_>>(),
                s.dirty_queue
                    .values()
                    .copied()
                    .collect::<std::collections::HashSet<_>>(),
                s.by_path.clone(),
            )
        };
        let mut named = 0;
        let (mut used, mut dirty) = (0, 0);
        for e in files {
            let d = lock(&e.data);
            let name = format!("file {} ({:?})", e.id, d.path);
            if let Some(p) = &d.path {
                named += 1;
                if by_path.get(p) != Some(&e.id) {
                    return Err(format!("{name}: the path maps to {:?}", by_path.get(p)));
                }
            } else if !d.links.is_empty() {
                return Err(format!("{name}: no path, but links {:?}", d.links));
            }
            for l in &d.links {
                named += 1;
                if by_path.get(l) != Some(&e.id) {
                    return Err(format!("{name}: link {l:?} maps to {:?}", by_path.get(l)));
                }
            }
            if d.pt_writers > 0 {
                // Written by the kernel in passthrough: dirty as a whole, and pinned.
                if let Some(i) = inner
                    .extent_range(0, d.size)
                    .find(|i| !d.extents.get(i).is_some_and(|x| x.dirty))
                {
                    return Err(format!(
                        "{name}: open for writing in passthrough, but extent {i} is not dirty"
                    ));
                }
                if d.pinned < d.pt_writers {
                    return Err(format!(
                        "{name}: {} passthrough writers, {} pins",
                        d.pt_writers, d.pinned
                    ));
                }
            }
            let (mut c, mut dd) = (0, 0);
            for (i, x) in &d.extents {
                let want = d.size.saturating_sub(i * ext).min(ext);
                if x.bytes != want {
                    return Err(format!(
                        "{name}: extent {i} has {} bytes, size {} says {want}",
                        x.bytes, d.size
                    ));
                }
                c += x.bytes;
                if x.dirty {
                    dd += x.bytes;
                    // A passthrough-written file's are queued when its last writer closes.
                    if !x.in_flight && d.pt_writers == 0 && !queued.contains(&(e.id, *i)) {
                        return Err(format!("{name}: dirty extent {i} is not queued"));
                    }
                }
            }
            if dd == 0
                && let Some(p) = &d.path
                && let Ok(m) = inner.tree.metadata(p)
            {
                let backing = (m.size(), Attr::from_meta(&m).mtime);
                if backing != d.seen || m.size() != d.size {
                    return Err(format!(
                        "{name}: clean, size {}, but the backing file is {backing:?} and the cache saw {:?}",
                        d.size, d.seen
                    ));
                }
            }
            if c != d.cached_bytes || dd != d.dirty_bytes {
                return Err(format!(
                    "{name}: counts cached {} dirty {}, extents add to {c} and {dd}",
                    d.cached_bytes, d.dirty_bytes
                ));
            }
            used += c;
            dirty += dd;
        }
        if named != by_path.len() {
            return Err(format!("{} paths name {named} files", by_path.len()));
        }
        let (u, dr) = (inner.used.load(Relaxed), inner.dirty.load(Relaxed));
        if (u, dr) != (used, dirty) {
            return Err(format!(
                "totals used {u} dirty {dr}, files add to {used} and {dirty}"
            ));
        }
        Ok(())
    }

    /// What the cache holds of a path (for test diagnostics).
    #[doc(hidden)]
    pub fn debug_entry(&self, rel: &Path) -> String {
        match self.inner.entry(rel) {
            None => "no entry".into(),
            Some(e) => {
                let d = lock(&e.data);
                let fd_ino = d
                    .backing
                    .as_ref()
                    .and_then(|f| f.metadata().ok())
                    .map(|m| (m.ino(), m.size(), m.nlink()));
                let path_ino = self.tree().metadata(rel).ok().map(|m| (m.ino(), m.size()));
                format!(
                    "fd {fd_ino:?} path {path_ino:?} id {} size {} backing_size {} seen {:?} dirty {} open {} extents {:?}",
                    e.id,
                    d.size,
                    d.backing_size,
                    d.seen,
                    d.dirty_bytes,
                    d.open_count,
                    d.extents
                        .iter()
                        .map(|(i, x)| (*i, x.bytes, x.dirty))
                        .collect::<Vec<_>>()
                )
            }
        }
    }
}
