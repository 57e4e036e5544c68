//! Running the `pliant` binary from tests.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `pliant args…` in `dir`.
pub fn pliant(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pliant"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run pliant")
}

/// Its stdout.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Its stdout, after checking it succeeded.
pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "failed: {}", stderr(o));
    stdout(o)
}

/// Its stderr, after checking it failed.
pub fn err(o: &Output) -> String {
    assert!(!o.status.success(), "should have failed");
    stderr(o)
}

/// Its stdout as JSON, after checking it succeeded.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(o)).expect("json")
}

/// A fresh directory holding `files` (`(name, contents)`), for a command to run in.
pub fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    for (name, contents) in files {
        std::fs::write(d.path().join(name), contents).expect("write");
    }
    d
}
