//! Where `WRstate` values live between decisions and across restarts.
//!
//! A store is a trait so that the live service persists to disk while the simulator and tests keep
//! state in memory, and so that tests can inject write failures.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// A persisted policy state: `WRstate` accepts a number or a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StateValue {
    /// A number.
    Num(f64),
    /// A string.
    Str(String),
}

/// Persists one state value per policy name.
pub trait StateStore {
    /// The last value saved for `policy`, or `None` if it never saved one.
    fn load(&self, policy: &str) -> Result<Option<StateValue>, PolicyError>;
    /// Saves `value` for `policy`. When this returns `Ok`, the value survives a crash.
    fn save(&self, policy: &str, value: &StateValue) -> Result<(), PolicyError>;
}

/// State in memory, shared between clones: for simulations, dry runs and tests.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore(Rc<RefCell<HashMap<String, StateValue>>>);

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl StateStore for MemoryStore {
    fn load(&self, policy: &str) -> Result<Option<StateValue>, PolicyError> {
        Ok(self.0.borrow().get(policy).cloned())
    }
    fn save(&self, policy: &str, value: &StateValue) -> Result<(), PolicyError> {
        self.0
            .borrow_mut()
            .insert(policy.to_string(), value.clone());
        Ok(())
    }
}

/// State in a directory, one `NAME.state.json` file per policy, written atomically.
///
/// Each save writes a temporary file in the same directory, fsyncs it, renames it over the old
/// file and fsyncs the directory, so a crash leaves either the old or the new value, never a
/// torn one.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// A store in `dir`, created if missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, PolicyError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|source| PolicyError::State {
            path: dir.clone(),
            source,
        })?;
        Ok(Self { dir })
    }

    /// The file that holds `policy`'s state.
    pub fn path_of(&self, policy: &str) -> PathBuf {
        // Policy names come from file names; keep only characters that are safe in one.
        let safe: String = policy
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{safe}.state.json"))
    }
}

fn state_err(path: &Path) -> impl FnOnce(std::io::Error) -> PolicyError + '_ {
    move |source| PolicyError::State {
        path: path.to_path_buf(),
        source,
    }
}

impl StateStore for FileStore {
    fn load(&self, policy: &str) -> Result<Option<StateValue>, PolicyError> {
        let path = self.path_of(policy);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(state_err(&path)(e)),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            state_err(&path)(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a number or string: {e}"),
            ))
        })
    }

    fn save(&self, policy: &str, value: &StateValue) -> Result<(), PolicyError> {
        let path = self.path_of(policy);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string(value).map_err(|e| {
            state_err(&path)(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })?;
        (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            File::open(&self.dir)?.sync_all()
        })()
        .map_err(state_err(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_store_round_trips_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        assert_eq!(store.load("p").expect("load"), None);
        store.save("p", &StateValue::Num(3.5)).expect("save");
        store
            .save("p", &StateValue::Str("absorbed".into()))
            .expect("save");
        let again = FileStore::open(dir.path()).expect("reopen");
        assert_eq!(
            again.load("p").expect("load"),
            Some(StateValue::Str("absorbed".into()))
        );
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["p.state.json"]);
    }

    #[test]
    fn file_store_rejects_corrupt_state_with_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        fs::write(store.path_of("p"), "{not json").expect("write");
        let e = store.load("p").expect_err("corrupt");
        assert!(e.to_string().contains("p.state.json"), "{e}");
    }
}
