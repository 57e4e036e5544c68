//! `pliant-fs`: a transparent write-back cache in front of a slow directory, after DataWarp's
//! transparent cache mode: a job reads and writes a parallel-file-system path through fast
//! local storage without changing its code.
//!
//! - [`core`]: the file system as a library ([`FsCache`]): extents in sparse files of a cache
//!   directory, copy-up on read, read-modify-write on partial writes, LRU eviction between
//!   watermarks, write-back threads between dirty watermarks, the write window (EDQUOT) and file
//!   size limit (EFBIG), revalidation against changes behind the cache's back, hints
//!   (preload/evict/writeback/invalidate), counters. Testable without mounting.
//! - [`journal`]: the dirty-extent journal that makes `fsync` in cache mode survive `kill -9`.
//! - [`config`]: the settings and their checks.
//!
//! Dependencies: `fuser` (the FUSE protocol in pure Rust: no libfuse or pkg-config at build
//! time, `fuse3`'s `fusermount3` at run time only for unprivileged mounts), `nix` (the system
//! calls std lacks: `openat2`, the `*at` calls, `renameat2`, `utimensat`, `flock`, `statvfs`),
//! `xattr` (extended attributes, passed to the backing directory), `crc` (journal records),
//! `indexmap` (the answers kept for callers, bounded by dropping the oldest),
//! `pliant-policy` (the Lua policies that decide when to evict and write back), `pliant-cache`
//! (sizes as users write them).

mod backing;
pub mod clock;
pub mod config;
pub mod core;
pub mod directives;
pub mod fuse;
pub mod job;
pub mod journal;
pub mod mount;
pub mod policy;
mod stats;
pub mod striped;
mod window;

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::config::{EvictionUnit, FsConfig, FsyncMode, UnknownSetting};
pub use crate::core::{Attr, Caller, DirEntry, FsCache, Handle, HintReport, OpenError, Recovery};
pub use crate::mount::{Hint, MountOptions, MountReport, UnmountReport};
pub use crate::policy::{Policies, PolicyError, Trigger, UnknownTrigger};
pub use crate::stats::FsStats;
