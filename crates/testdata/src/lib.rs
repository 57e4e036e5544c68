//! Where tests find the measured data that lives beside the repository, in `../shared` (real
//! ParSplice traces, measured policy runs), and the one rule for when it is absent: in CI
//! (`CI` set) a missing file fails the test loudly, since a green run that skipped the real data
//! would claim what it did not check; elsewhere the test says it skipped and passes, so a user
//! without the data can still run the suite.
//!
//! A dev-dependency only. No dependencies.

use std::path::PathBuf;

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
    eprintln!("skipped: {} not found", p.display());
    None
}
