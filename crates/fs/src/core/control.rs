//! The control verbs `pliant fs` reaches a mount through: extended attribute names under
//! `pliant.`, which never reach the backing directory and are not listed. No one needs a socket
//! or a pid file. Each verb has a rule by whom it affects (docs/security.md):
//!
//! - [`Controls::get`] (`getxattr(PATH, "pliant.<verb>")`, a read), for verbs that touch only
//!   what the caller may touch: `stats` (the mount's [`FsStats`](crate::FsStats)), `preload`
//!   and `invalidate` (of clean copies) on the files at or under PATH that the caller may read,
//!   `evict` and `writeback` on those it may write (a [`HintReport`](super::HintReport); the
//!   kernel checks PATH itself, the core each file under it), and `result`.
//! - [`Controls::set`] (`setxattr(MOUNT, "pliant.<verb>", VALUE)`), for verbs that change the
//!   mount for every user, its owner's or root's only: `flush` (start writing everything back,
//!   in the background: a FUSE request thread is not held for it), `discard` (drop dirty data at
//!   the unmount), `policy.*` (swap or roll back a policy). The answer waits for the same
//!   process under `result`.
//!
//! A `getxattr` asking only for the size runs the verb and keeps the answer for the same
//! process's next call (a bounded number of them), so the usual two-call pattern runs a verb
//! once.

use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;

use super::{Caller, FsCache, lock};
use crate::policy::Trigger;

/// The attribute names `pliant fs` uses.
pub const CONTROL_PREFIX: &str = "pliant.";

/// Answers kept for a later call of the same process (size probes, `set` results). Any user who
/// may read a file can ask, so they are bounded: past this, the oldest go (a process that lost
/// its answer asks again).
const KEPT_ANSWERS: usize = 256;

/// Keeps `v` under `k` in `map`, dropping the oldest answers past [`KEPT_ANSWERS`].
fn keep<K: std::hash::Hash + Eq, V>(map: &mut IndexMap<K, V>, k: K, v: V) {
    map.insert(k, v);
    while map.len() > KEPT_ANSWERS {
        map.shift_remove_index(0);
    }
}

/// Who asks: a process and its user. Answers are kept for both: a pid alone may be another
/// user's process by the time it asks again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Asker {
    /// The process.
    pub pid: u32,
    /// Its user.
    pub uid: u32,
}

/// Why a verb was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    /// A verb that changes the mount for every user, asked by someone other than its owner or
    /// root (`EPERM`).
    #[error("only the mount's owner or root may change the mount")]
    NotOwner,
    /// The verb was refused; why is kept for the caller's `result` (`EINVAL`).
    #[error("{0}")]
    Refused(String),
    /// No verb of that name (`ENODATA`, as for any attribute that is not there).
    #[error("{CONTROL_PREFIX}{0}: no such control")]
    NoSuchVerb(String),
    /// The verb failed on the file system (its errno).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// One mount's verbs and the answers they keep (see the module doc).
#[derive(Debug)]
pub struct Controls {
    core: Arc<FsCache>,
    /// Answers of verbs asked for their size first, by (asker, inode, name).
    pending: Mutex<IndexMap<(Asker, u64, OsString), Vec<u8>>>,
    /// Answers of the owner's `set` verbs, by the asking process.
    results: Mutex<IndexMap<Asker, (bool, String)>>,
    /// Set by the owner's `discard` verb: the unmount drops dirty data.
    discard: Arc<AtomicBool>,
    /// Where the Prometheus endpoint listens (`stats` reports it: `--metrics …:0` picks a port).
    metrics: Option<String>,
}

impl Controls {
    /// The verbs of the mount of `core`.
    pub fn new(core: Arc<FsCache>) -> Self {
        Self {
            core,
            pending: Mutex::default(),
            results: Mutex::default(),
            discard: Arc::default(),
            metrics: None,
        }
    }

    /// `stats` reports that the mount's Prometheus endpoint listens on `addr`.
    pub fn with_metrics(mut self, addr: Option<String>) -> Self {
        self.metrics = addr;
        self
    }

    /// The flag the `discard` verb sets: the unmount reads it.
    pub fn discard(&self) -> Arc<AtomicBool> {
        self.discard.clone()
    }

    /// Runs verb `verb` of `getxattr` on `path` (inode `ino`) for `asker`. A `probe` asks
    /// only for the size: the answer is kept for the process's next call of the same name, which
    /// gets it without running the verb again.
    pub fn get(
        &self,
        path: &Path,
        ino: u64,
        verb: &str,
        probe: bool,
        asker: Asker,
        caller: impl FnOnce() -> Caller,
    ) -> Result<Vec<u8>, VerbError> {
        let key = (
            asker,
            ino,
            OsString::from(format!("{CONTROL_PREFIX}{verb}")),
        );
        if !probe && let Some(v) = lock(&self.pending).shift_remove(&key) {
            return Ok(v);
        }
        let v = self.run_get(path, verb, asker, caller)?;
        if probe {
            keep(&mut lock(&self.pending), key, v.clone());
        }
        Ok(v)
    }

    fn run_get(
        &self,
        path: &Path,
        verb: &str,
        asker: Asker,
        caller: impl FnOnce() -> Caller,
    ) -> Result<Vec<u8>, VerbError> {
        let json = |v: serde_json::Result<Vec<u8>>| v.map_err(|e| VerbError::Io(e.into()));
        let core = &self.core;
        match verb {
            "stats" => {
                let mut s = core.stats();
                s.metrics_addr.clone_from(&self.metrics);
                json(serde_json::to_vec(&s))
            }
            "preload" => json(serde_json::to_vec(&core.preload(path, &caller())?)),
            "evict" => json(serde_json::to_vec(&core.evict(path, &caller())?)),
            "writeback" => json(serde_json::to_vec(&core.writeback(path, &caller())?)),
            "invalidate" => json(serde_json::to_vec(&core.invalidate(path, &caller())?)),
            "result" => {
                let (ok, message) = lock(&self.results)
                    .shift_remove(&asker)
                    .unwrap_or((false, "nothing was asked by this process".into()));
                json(serde_json::to_vec(
                    &serde_json::json!({"ok": ok, "message": message}),
                ))
            }
            _ => Err(VerbError::NoSuchVerb(verb.into())),
        }
    }

    /// Runs verb `verb` of `setxattr` with `value` for `asker`, whose user `owner` says
    /// whether it is the mount's owner or root; the answer (or why it was refused) is kept for
    /// the process's `result`.
    pub fn set(
        &self,
        verb: &str,
        value: &[u8],
        asker: Asker,
        owner: bool,
    ) -> Result<(), VerbError> {
        if !owner {
            return Err(VerbError::NotOwner);
        }
        let result = self.run_set(verb, value);
        let answer = match &result {
            Ok(m) | Err(m) => m.clone(),
        };
        keep(&mut lock(&self.results), asker, (result.is_ok(), answer));
        result.map(drop).map_err(VerbError::Refused)
    }

    /// `policy.evict` or `policy.writeback` with `{"name", "code", "params": ["k=v", …]}`
    /// swaps a policy; `policy.rollback` with `evict` or `writeback` rolls one back; `flush`
    /// starts a flush (the answer names its number, done once `stats` shows `flush_done`
    /// there); `discard` has the unmount drop dirty data.
    fn run_set(&self, verb: &str, value: &[u8]) -> Result<String, String> {
        let core = &self.core;
        match verb {
            "flush" => {
                return core
                    .request_flush()
                    .map(|n| format!("flush {n} started"))
                    .map_err(|e| format!("starting a flush: {e}"));
            }
            "discard" => {
                self.discard.store(true, Relaxed);
                return Ok("dirty data is dropped at the unmount".into());
            }
            _ => {}
        }
        if verb == "policy.rollback" {
            let which: Trigger = String::from_utf8_lossy(value)
                .trim()
                .parse()
                .map_err(|e: crate::policy::UnknownTrigger| e.to_string())?;
            return core.rollback_policy(which).map_err(|e| chain(&e));
        }
        match verb.strip_prefix("policy.").map(str::parse::<Trigger>) {
            Some(Ok(which)) => {
                #[derive(serde::Deserialize)]
                struct Load {
                    name: String,
                    code: String,
                    params: Option<Vec<String>>,
                }
                let l: Load = serde_json::from_slice(value).map_err(|e| format!("{verb}: {e}"))?;
                let params = l.params.map(|ps| {
                    ps.iter()
                        .filter_map(|p| p.split_once('='))
                        .map(|(k, v)| (k.to_string(), pliant_policy::ParamValue::parse(v)))
                        .collect()
                });
                let source = pliant_policy::PolicySource::functions(l.name, l.code);
                core.load_policy(which, source, params)
                    .map_err(|e| chain(&e))
            }
            _ => Err(format!("{CONTROL_PREFIX}{verb}: no such control")),
        }
    }
}

/// `e` and its sources, as one line for the caller's `result`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text = format!("{text}: {s}");
        next = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_answers_are_bounded_and_the_oldest_go_first() {
        let mut m = IndexMap::new();
        for i in 0..KEPT_ANSWERS as u32 + 10 {
            keep(&mut m, i, i * 10);
        }
        assert_eq!(m.len(), KEPT_ANSWERS);
        assert_eq!(m.get(&9), None);
        assert_eq!(m.get(&10), Some(&100));
        keep(&mut m, 10, 1);
        keep(&mut m, 1_000_000, 0);
        assert_eq!(m.len(), KEPT_ANSWERS);
        assert_eq!(
            m.get(&10),
            None,
            "a key set again keeps its place, the oldest"
        );
    }
}
