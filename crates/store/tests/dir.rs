//! The store directory: data survives a reopen, the format version is checked, the lock keeps a
//! second opener out (in this process and in another), and foreign directories are refused.

use std::error::Error as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use pliant_store::{
    ALL, Batch, FORMAT_FILE, FORMAT_VERSION, FjallStore, LOCK_FILE, Store, StoreError,
};

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    (tmp, dir)
}

#[test]
fn data_survives_a_reopen_after_sync() {
    let (_tmp, dir) = scratch();
    {
        let s = FjallStore::open(&dir).expect("create");
        assert_eq!(s.dir(), dir);
        s.put(b"a", b"1").expect("put");
        s.put(b"gone", b"x").expect("put");
        let mut b = Batch::new();
        b.put(b"b", b"2").delete(b"gone");
        s.batch(&b).expect("batch");
        s.sync().expect("sync");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join(FORMAT_FILE)).expect("format file"),
        format!("pliant-store format {FORMAT_VERSION}\n")
    );
    let s = FjallStore::open(&dir).expect("reopen");
    assert_eq!(
        s.range(ALL).collect::<Result<Vec<_>, _>>().expect("scan"),
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec())
        ]
    );
}

#[test]
fn a_second_open_in_this_process_is_locked_until_the_first_closes() {
    let (_tmp, dir) = scratch();
    let first = FjallStore::open(&dir).expect("open");
    let err = FjallStore::open(&dir).expect_err("second open");
    assert!(matches!(&err, StoreError::Locked { dir: d } if d == &dir));
    let msg = err.to_string();
    assert!(msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains(LOCK_FILE), "{msg}");
    drop(first);
    FjallStore::open(&dir).expect("free again");
}

#[test]
fn another_format_version_is_refused_by_name() {
    let (_tmp, dir) = scratch();
    drop(FjallStore::open(&dir).expect("create"));
    let future = FORMAT_VERSION + 1;
    std::fs::write(
        dir.join(FORMAT_FILE),
        format!("pliant-store format {future}\n"),
    )
    .expect("write");
    let err = FjallStore::open(&dir).expect_err("newer format");
    assert!(matches!(
        &err,
        StoreError::FormatVersion { dir: d, found, expected }
            if d == &dir && *found == future && *expected == FORMAT_VERSION
    ));
    let msg = err.to_string();
    assert!(msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains(&future.to_string()), "{msg}");

    std::fs::write(dir.join(FORMAT_FILE), "something else\n").expect("write");
    assert!(matches!(
        FjallStore::open(&dir),
        Err(StoreError::NotAStore { dir: d, .. }) if d == dir
    ));
}

#[test]
fn a_foreign_directory_is_refused_and_left_alone() {
    let (_tmp, dir) = scratch();
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("notes.txt"), "mine").expect("write");
    let err = FjallStore::open(&dir).expect_err("not a store");
    assert!(matches!(&err, StoreError::NotAStore { dir: d, .. } if d == &dir));
    assert!(err.to_string().contains("notes.txt"), "{err}");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec!["notes.txt"], "no lock file was left behind");
}

#[test]
fn an_empty_existing_directory_becomes_a_store() {
    let (_tmp, dir) = scratch();
    std::fs::create_dir(&dir).expect("mkdir");
    let s = FjallStore::open(&dir).expect("create in an empty directory");
    s.put(b"k", b"v").expect("put");
}

#[test]
fn directory_io_errors_keep_their_source() {
    let (tmp, _) = scratch();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").expect("write");
    let dir = file.join("store");
    let err = FjallStore::open(&dir).expect_err("a store under a file");
    assert!(matches!(&err, StoreError::Io { dir: d, .. } if d == &dir));
    assert!(
        err.source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some(),
        "the io::Error is the source: {err:?}"
    );
}

/// The bug: `StoreError::{Io, Backend}` printed their source in their own text as well as
/// returning it from `source()`, so a chain of causes told it twice.
#[test]
fn store_io_and_backend_errors_tell_their_source_once() {
    let (tmp, _) = scratch();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").expect("write");
    let dir = file.join("store");
    let io = FjallStore::open(&dir).expect_err("a store under a file");
    let backend = StoreError::Backend {
        dir: dir.clone(),
        action: "opening the keyspace",
        source: Box::new(std::io::Error::other("checksum mismatch in segment 7")),
    };
    for err in [&io, &backend] {
        assert!(
            matches!(err, StoreError::Io { dir: d, .. } | StoreError::Backend { dir: d, .. } if d == &dir),
            "{err:?}"
        );
        let source = err.source().expect("the cause is the source").to_string();
        let text = err.to_string();
        assert!(
            !text.contains(&source),
            "{text:?} repeats its source {source:?}"
        );
        assert!(text.contains(&dir.display().to_string()), "{text}");
    }
}

#[test]
fn a_temporary_store_removes_its_directory() {
    let s = FjallStore::temporary().expect("store");
    let dir = s.dir().to_path_buf();
    s.put(b"k", b"v").expect("put");
    assert!(dir.join(FORMAT_FILE).exists());
    drop(s);
    assert!(!dir.exists());
}

/// Set in the child process that holds a store for [`a_second_process_is_locked_out`].
const HOLD_ENV: &str = "PLIANT_STORE_TEST_HOLD";
const HOLDING: &str = "pliant-store-test: holding";
/// Only a bound for a broken child; the test does not depend on it.
const LIMIT: Duration = Duration::from_secs(120);

/// Kills the child when the test ends, however it ends.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child's part: open the store, write and sync, say so, then hold the store until the
/// parent kills this process (or exits, closing our stdin).
fn hold(dir: &Path) {
    let s = FjallStore::open(dir).expect("child: open");
    s.put(b"from the child", b"synced").expect("child: put");
    s.sync().expect("child: sync");
    println!("{HOLDING}");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// The test binary runs this same test in a child process (with `HOLD_ENV` set), which holds
/// the store; this process must then get `Locked`, and the store must be free, with the child's
/// synced write, once the child is killed.
#[test]
fn a_second_process_is_locked_out() {
    if let Some(dir) = std::env::var_os(HOLD_ENV) {
        hold(Path::new(&dir));
        return;
    }
    let (_tmp, dir) = scratch();
    let exe = std::env::current_exe().expect("test binary");
    // This test's name as libtest knows it: its module path without the crate's name.
    let (_, module) = module_path!().split_once("::").expect("a module");
    let name = format!("{module}::a_second_process_is_locked_out");
    let mut child = Command::new(exe)
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env(HOLD_ENV, &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("child stdout");
    let child = Reap(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains(HOLDING) {
                let _ = tx.send(());
                break;
            }
        }
    });
    rx.recv_timeout(LIMIT)
        .expect("the child opened the store and said so");

    let err = FjallStore::open(&dir).expect_err("held by the child");
    assert!(
        matches!(&err, StoreError::Locked { dir: d } if d == &dir),
        "{err:?}"
    );

    // The kernel drops the lock with the process: no stale lock after a crash.
    drop(child);
    let s = FjallStore::open(&dir).expect("free once the child is gone");
    assert_eq!(
        s.get(b"from the child").expect("get").as_deref(),
        Some(&b"synced"[..])
    );
}
