//! What a user meets when something goes wrong outside a command's own logic: an error told once,
//! a pipe closed early, a file cut short.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{dir_with, pliant, stderr, stdout};

/// `pliant … | head -1`: the reader goes, the next write gets EPIPE. `println!` panicked there
/// ("failed printing to stdout: Broken pipe"); a Unix tool just ends.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let dir = dir_with(&[]);
    let trace = dir.path().join("t.oracleGeneral");
    let o = pliant(
        &[
            "trace",
            "gen",
            "--keys",
            "1000",
            "--requests",
            "20000",
            "t.oracleGeneral",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for args in [
        vec!["trace", "stats", trace.to_str().expect("utf-8")],
        vec!["policy", "list"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start");
        drop(child.stdout.take());
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{args:?} still running"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
            .expect("stderr");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
        // Ended by SIGPIPE, as `cat` is, or by itself.
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.signal() == Some(13) || status.success(),
            "{args:?}: {status:?}"
        );
    }
}

/// A library error that shows its cause and returns it too printed "store st: store st: in use
/// … (lock on st/LOCK held)", and wrappers repeated causes ("invalid gzip header: invalid gzip
/// header"): the chain is printed once, where errors are displayed.
#[test]
fn an_error_is_told_once() {
    let dir = dir_with(&[("bad.csv.gz", "not gzip at all, not at all")]);
    let o = pliant(&["trace", "stats", "bad.csv.gz"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.matches("invalid gzip header").count(), 1, "{err}");
    assert!(err.starts_with("error: bad.csv.gz"), "{err}");

    std::fs::create_dir(dir.path().join("st")).expect("mkdir");
    let serve = || {
        Command::new(env!("CARGO_BIN_EXE_pliant"))
            .args(["serve", "--bind", "127.0.0.1:0", "--store", "st"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start")
    };
    let mut first = serve();
    // Holding the store once it says where it listens.
    let lines = std::io::BufRead::lines(std::io::BufReader::new(
        first.stderr.take().expect("stderr"),
    ));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let listening = rx
        .recv_timeout(Duration::from_secs(30))
        .is_ok_and(|l| l.contains("listening on"));
    let mut second = serve();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = second.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for child in [&mut first, &mut second] {
        let _ = child.kill();
        child.wait().expect("reap");
    }
    assert!(listening, "the first node did not start");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{err}");
    assert_eq!(err.matches("store st").count(), 1, "{err}");
    assert_eq!(err.matches("in use").count(), 1, "{err}");
}

/// `zcat t.csv.gz | head -c 20000 | gzip > cut.csv.gz`: rc 0 and a record with its key cut in half
/// counted as whole, without a word.
#[test]
fn a_trace_cut_short_is_named_on_stderr_and_in_json() {
    let dir = dir_with(&[]);
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(dir.path().join("cut.csv.gz")).expect("create"),
        flate2::Compression::fast(),
    );
    gz.write_all(b"1504318819,DBMemoryGet,0,5\n1504318819,DBMemoryGet,0,1404528")
        .expect("write");
    gz.finish().expect("finish");
    let o = pliant(&["trace", "stats", "cut.csv.gz", "--json"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cut.csv.gz line 2: the last record has no line end"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let w = v["warnings"].as_array().expect("warnings");
    assert_eq!(w.len(), 1, "{v}");
    assert!(w[0].as_str().expect("text").contains("line 2"), "{v}");
}

/// The same trace as CSV and as converted oracleGeneral gave 1,034,063 and 1,091,758 reads: the
/// format has no operation, so the writes became reads, and nothing said so.
#[test]
fn converting_writes_to_oracle_general_says_they_become_reads() {
    let dir = dir_with(&[(
        "t.csv",
        "1,DBMemoryGet,0,5\n2,DBMemoryPut,0,6\n3,DBMemoryGet,0,6\n",
    )]);
    let o = pliant(
        &[
            "trace",
            "convert",
            "t.csv",
            "--format",
            "parsplice",
            "--to",
            "oracle-general",
            "t.oracleGeneral",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 of them were writes or deletes"),
        "{}",
        stderr(&o)
    );
    let o = pliant(&["trace", "stats", "t.oracleGeneral"], dir.path());
    assert!(
        stdout(&o).contains("3 / 0 (0 deletes) (oracleGeneral has no operation field"),
        "{}",
        stdout(&o)
    );
}
