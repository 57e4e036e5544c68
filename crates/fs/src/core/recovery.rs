//! Recovery at mount: writing back what the journal of an earlier mount that did not finish
//! names as dirty, before the cache directory starts afresh.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::extents::read_at_zero_filled;
use super::{OpenError, Recovery, at};
use crate::backing::{self, BackingDir};
use crate::config::FsConfig;
use crate::journal::{self, Journal};

/// Writes back what the journal of an unfinished mount names; then the caller starts afresh.
pub(super) fn recover(
    cfg: &FsConfig,
    tree: &BackingDir,
    data_dir: &Path,
    journal_path: &Path,
) -> Result<Recovery, OpenError> {
    let Some(replay) = Journal::replay(journal_path).map_err(at(journal_path))? else {
        return Ok(Recovery::default());
    };
    let mut rec = Recovery {
        torn_tail: replay.torn_tail,
        ..Recovery::default()
    };
    if replay.files.is_empty() {
        return Ok(rec);
    }
    let jb = journal::bytes_path(&replay.header.backing);
    if jb != cfg.backing {
        return Err(OpenError::OtherBacking {
            cache_dir: cfg.cache_dir.clone(),
            journal_backing: jb,
            backing: cfg.backing.clone(),
        });
    }
    let ext = replay.header.extent;
    for (id, p) in &replay.files {
        let src_path = data_dir.join(id.to_string());
        let src = match File::open(&src_path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Nothing to write back from: refusing every mount for it would only lose the
                // other files' data too.
                tracing::error!(
                    path = %cfg.backing.join(&p.path).display(),
                    cache_file = %src_path.display(),
                    "the journal names dirty extents whose cache file is gone; skipped"
                );
                continue;
            }
            Err(e) => {
                return Err(OpenError::Io {
                    path: src_path,
                    source: e,
                });
            }
        };
        let dst_path = cfg.backing.join(&p.path);
        // The file may have been removed behind the cache's back; what fsync acknowledged is
        // written anyway. Beneath the tree's root only: a directory on the way that became a
        // symbolic link since fails the mount (naming the path) rather than writing elsewhere.
        let dst = tree
            .open(
                &p.path,
                backing::Open {
                    create: Some(false),
                    mode: 0o600,
                    ..backing::Open::WRITE
                },
            )
            .map_err(at(&dst_path))?;
        // Open for writing in kernel passthrough when the mount stopped: the kernel wrote the
        // cache file without the daemon, so all of it, at its own length, is the file.
        let (size, extents): (u64, Vec<u64>) = if p.whole {
            // What the kernel wrote past `--max-file-size` was never acknowledged: every fsync
            // cut it off first.
            let size = src
                .metadata()
                .map_err(at(&src_path))?
                .len()
                .min(cfg.max_file_size);
            (size, (0..size.div_ceil(ext.max(1))).collect())
        } else {
            (p.size, p.extents.iter().copied().collect())
        };
        for i in extents {
            let start = i * ext;
            if start >= size {
                continue;
            }
            let len = ext.min(size - start);
            let buf = read_at_zero_filled(&src, start, len).map_err(at(&src_path))?;
            dst.write_all_at(&buf, start).map_err(at(&dst_path))?;
            rec.extents += 1;
            rec.bytes += len;
        }
        let dst_len = dst.metadata().map_err(at(&dst_path))?.len();
        if p.whole && dst_len != size {
            // Shorter too: a truncation through the mount cut the backing file as well.
            dst.set_len(size).map_err(at(&dst_path))?;
        } else if !cfg.shared && dst_len < size {
            // A striped cache's server recovers while the other servers may be extending the
            // file (see `writeback_extent`): its writes extend it as far as its own data goes.
            dst.set_len(size).map_err(at(&dst_path))?;
        }
        dst.sync_all().map_err(at(&dst_path))?;
        rec.files += 1;
        tracing::warn!(
            path = %dst_path.display(),
            whole = p.whole,
            "recovered dirty data an earlier mount had not written back"
        );
    }
    Ok(rec)
}
