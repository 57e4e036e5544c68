//! Where tests find the measured data that lives beside the repository, in `../shared` (real
//! ParSplice traces, measured policy runs), and the one rule for when it is absent: in CI
//! (`CI` set) a missing file fails the test loudly, since a green run that skipped the real data
//! would claim what it did not check; elsewhere the test says it skipped and passes, so a user
//! without the data can still run the suite.
//!
//! The test harness hides what a passing test prints, so a skip is also recorded: when
//! [`SKIP_LOG`] names a file, [`skip`] appends one line to it, which `tools/test.sh` counts and
//! prints after `cargo test`.
//!
//! It also holds what the tests of a node share that is not data: [`wire`], a raw connection read
//! until the node closes it (the service's tests in pliant-kv and the binary's in pliant both
//! check what a node says before it hangs up), and [`alloc::Counting`], a global allocator
//! that counts the bytes held (the memory-per-object tests and examples).
//!
//! A dev-dependency only. No dependencies.

use std::io::Write;
use std::path::{Path, PathBuf};

#[allow(unsafe_code)]
pub mod alloc;
pub mod wire;

/// The environment variable naming the file a skipped test appends its line to
/// (`tools/test.sh` sets it to a fresh temporary file).
pub const SKIP_LOG: &str = "PLIANT_SKIP_LOG";

/// `../shared/<relative>` beside the repository, if it exists.
///
/// # Panics
/// In CI (`CI` set in the environment), if it does not exist.
pub fn shared(relative: &str) -> Option<PathBuf> {
    // The running test's crate directory (cargo sets it for every test process), not this
    // crate's as compiled: a build reused from another checkout would otherwise look beside that
    // checkout. Every crate sits at the same depth, `crates/<name>`.
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let p = crate_dir.join("../../../shared").join(relative);
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI: {} is missing; the shared data must be beside the repository",
        p.display()
    );
    skip(&format!("{} not found", p.display()));
    None
}

/// Says that the running test skipped its checks and why: on stderr, and as one line
/// `<crate> <test>: <reason>` appended to the file [`SKIP_LOG`] names, if it is set. A test
/// calls it before returning early without having checked anything.
pub fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
    if let Some(log) = std::env::var_os(SKIP_LOG) {
        let krate = std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| "?".into());
        // libtest runs each test on a thread named after it (the main thread with one test
        // thread, when the name is not known here).
        let thread = std::thread::current();
        let test = thread.name().filter(|n| *n != "main").unwrap_or("?");
        if let Err(e) = record(&PathBuf::from(log), &krate, test, reason) {
            eprintln!("could not record the skip in ${SKIP_LOG}: {e}");
        }
    }
}

/// Appends `<krate> <test>: <reason>` (on one line) to `log`, in one write: appends of a line
/// this short do not interleave between the test processes cargo runs.
fn record(log: &Path, krate: &str, test: &str, reason: &str) -> std::io::Result<()> {
    let line = format!("{krate} {test}: {}\n", reason.replace('\n', " "));
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)?
        .write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_append_one_line_each() {
        let dir = std::env::temp_dir().join(format!("pliant-skip-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("skips");
        record(&log, "pliant-sim", "parsplice::a", "no trace").expect("first");
        record(&log, "pliant-sim", "parsplice::b", "two\nlines").expect("second");
        let text = std::fs::read_to_string(&log).expect("log written");
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(
            text,
            "pliant-sim parsplice::a: no trace\npliant-sim parsplice::b: two lines\n"
        );
    }
}
