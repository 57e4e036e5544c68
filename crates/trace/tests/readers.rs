//! Readers: every format, compression, and every kind of bad input.

use std::io::Write;
use std::path::{Path, PathBuf};

use pliant_trace::{
    CsvOptions, Format, Op, Ops, ReadOptions, Record, TraceError, fill_next_access, reader,
    write_oracle_general,
};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

fn read_all(path: &Path, opts: &ReadOptions) -> Result<Vec<Record>, TraceError> {
    reader(path, opts)?.collect()
}

const PARSPLICE: &str = "\
1504318813,DBMemoryPut,0,7
1504318813,DBMemoryPutUnique,0,7
1504318813,DBMemoryMRUPut,0,7
1504318813,DBMemoryGet,0,7
1504318813,DBMemoryMRUGet,0,7
1504318814,DBMemoryGet,0,18446744073709551615
1504318814,DBMemoryMRUGet,0,18446744073709551615
1504318814,DBMemoryGet,1,9
1504318814,DBMemoryMRUGet,1,9
";

#[test]
fn parsplice_counts_each_logical_operation_once() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(d.path(), "rank4.csv", PARSPLICE);
    let recs = read_all(&p, &ReadOptions::default()).expect("read");
    let ops: Vec<(Op, u64)> = recs.iter().map(|r| (r.op, r.key)).collect();
    // db 1 is skipped by default; u64::MAX keys parse.
    assert_eq!(ops, [(Op::Put, 7), (Op::Get, 7), (Op::Get, u64::MAX)]);
    assert_eq!(recs[2].time, 1504318814);
    let reads_only = ReadOptions {
        ops: Ops {
            reads: true,
            writes: false,
        },
        parsplice_db: None,
        ..ReadOptions::default()
    };
    let recs = read_all(&p, &reads_only).expect("read");
    assert_eq!(
        recs.iter().map(|r| r.key).collect::<Vec<_>>(),
        [7, u64::MAX, 9]
    );
}

/// Regression: the LevelDB rank's trace (`rank2`) opens with three-field `LDBCreate` lines, which
/// the reader rejected as "expected 4 fields", so the whole file could not be read or guessed.
#[test]
fn parsplice_leveldb_create_lines_have_no_key_and_are_skipped() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(
        d.path(),
        "rank2.csv",
        "1504334606,LDBCreate,0\n1504334606,LDBCreate,1\n1504334612,LDBPut,0,14\n1504334613,LDBGet,0,14\n",
    );
    let recs = read_all(&p, &ReadOptions::default()).expect("format guessed and read");
    let ops: Vec<(Op, u64)> = recs.iter().map(|r| (r.op, r.key)).collect();
    assert_eq!(ops, [(Op::Put, 14), (Op::Get, 14)]);
    // A three-field line of any other operation is still an error.
    let bad = write(
        d.path(),
        "bad.csv",
        "1504334612,LDBPut,0,14\n1504334613,LDBGet,0\n",
    );
    let msg = read_all(&bad, &ReadOptions::default())
        .expect_err("missing key")
        .to_string();
    assert!(
        msg.contains("bad.csv:2:") && msg.contains("expected 4 fields"),
        "{msg}"
    );
}

#[test]
fn malformed_line_is_an_error_with_its_line_number_unless_lenient() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(
        d.path(),
        "rank4.csv",
        "1,DBMemoryGet,0,5\n2,DBMemoryGet,0,not-a-key\n3,DBMemoryGet,0,6\n4,Bogus,0,1\n",
    );
    let e = read_all(&p, &ReadOptions::default()).expect_err("bad key");
    let msg = e.to_string();
    assert!(
        msg.contains("rank4.csv:2:") && msg.contains("not-a-key"),
        "{msg}"
    );

    let opts = ReadOptions {
        lenient: true,
        ..ReadOptions::default()
    };
    let mut r = reader(&p, &opts).expect("open");
    let keys: Vec<u64> = r.by_ref().map(|x| x.expect("lenient").key).collect();
    assert_eq!(keys, [5, 6]);
    assert_eq!(r.skipped(), 2);
}

/// `zcat t.csv.gz | head -c 20000 | gzip`: the text ends mid-record, the compressed stream is
/// whole, and the last record (its key cut in half) was counted as if the file were complete.
#[test]
fn a_text_trace_cut_short_warns_naming_its_file_and_line() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(
        d.path(),
        "cut.csv",
        "1,DBMemoryGet,0,5\n2,DBMemoryGet,0,140452876315\n3,DBMemoryGet,0,14045",
    );
    let mut r = reader(&p, &ReadOptions::default()).expect("open");
    assert_eq!(r.by_ref().count(), 3, "read as it stands");
    let w = r.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("cut.csv line 3") && w[0].contains("no line end"),
        "{w:?}"
    );

    let whole = write(d.path(), "whole.csv", "1,DBMemoryGet,0,5\n");
    let mut r = reader(&whole, &ReadOptions::default()).expect("open");
    assert_eq!(r.by_ref().count(), 1);
    assert!(r.warnings().is_empty());
}

#[test]
fn oracle_general_round_trips_with_next_access() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut recs: Vec<Record> = [1u64, 2, 1, 3, 1]
        .iter()
        .enumerate()
        .map(|(i, &k)| Record::get(i as u64, k, 10 * k as u32))
        .collect();
    fill_next_access(&mut recs);
    assert_eq!(
        recs.iter().map(|r| r.next_access).collect::<Vec<_>>(),
        [2, -1, 4, -1, -1]
    );
    for name in ["t.oracleGeneral", "t.oracleGeneral.gz"] {
        let p = d.path().join(name);
        write_oracle_general(&p, &recs).expect("write");
        let back = read_all(&p, &ReadOptions::default()).expect("read");
        assert_eq!(back, recs, "{name}");
    }
}

#[test]
fn truncated_binary_is_an_error_with_offset() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("t.oracleGeneral");
    write_oracle_general(&p, &[Record::get(0, 1, 1), Record::get(0, 2, 1)]).expect("write");
    let mut bytes = std::fs::read(&p).expect("read");
    bytes.truncate(24 + 10);
    std::fs::write(&p, &bytes).expect("truncate");
    let mut r = reader(&p, &ReadOptions::default()).expect("open");
    assert_eq!(r.next().expect("first").expect("ok").key, 1);
    let e = r.next().expect("second").expect_err("truncated");
    let expected = matches!(
        e,
        TraceError::Truncated {
            offset: 24,
            bytes: 10,
            ..
        }
    );
    assert!(expected, "{e}");
    assert!(r.next().is_none());
}

#[test]
fn zstd_and_gzip_decompress_by_extension() {
    let d = tempfile::tempdir().expect("tempdir");
    let zst = d.path().join("rank4.csv.zst");
    let packed = ruzstd::encoding::compress_to_vec(
        PARSPLICE.as_bytes(),
        ruzstd::encoding::CompressionLevel::Fastest,
    );
    std::fs::write(&zst, packed).expect("write");
    let gz = d.path().join("rank4.csv.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).expect("create"),
        flate2::Compression::fast(),
    );
    enc.write_all(PARSPLICE.as_bytes()).expect("gzip");
    enc.finish().expect("finish");
    let plain = read_all(
        &write(d.path(), "rank4.csv", PARSPLICE),
        &ReadOptions::default(),
    )
    .expect("plain");
    assert_eq!(read_all(&zst, &ReadOptions::default()).expect("zst"), plain);
    assert_eq!(read_all(&gz, &ReadOptions::default()).expect("gz"), plain);
}

#[test]
fn unknown_or_unguessable_format_lists_known_ones() {
    let e = "weird".parse::<Format>().expect_err("unknown");
    assert!(
        e.to_string()
            .contains("parsplice, oracle-general, csv, twitter"),
        "{e}"
    );
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(d.path(), "mystery.txt", "hello world\n");
    let e = read_all(&p, &ReadOptions::default()).expect_err("cannot guess");
    assert!(e.to_string().contains("pass --format"), "{e}");
}

#[test]
fn twitter_trace_hashes_keys_and_sums_sizes() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(
        d.path(),
        "cluster.csv",
        "0,abc,10,90,1,get,0\n1,abc,10,90,1,set,0\n2,xyz,5,5,2,delete,0\n",
    );
    let recs = read_all(&p, &ReadOptions::default()).expect("read");
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0].key, recs[1].key);
    assert_ne!(recs[0].key, recs[2].key);
    assert_eq!(
        recs.iter().map(|r| (r.op, r.size)).collect::<Vec<_>>(),
        [(Op::Get, 100), (Op::Put, 100), (Op::Delete, 10)]
    );
    let bad = write(d.path(), "bad.csv", "0,abc,10,90,1,frobnicate,0\n");
    let opts = ReadOptions {
        format: Some(Format::Twitter),
        ..ReadOptions::default()
    };
    let e = read_all(&bad, &opts).expect_err("bad op");
    assert!(e.to_string().contains("bad.csv:1:") && e.to_string().contains("frobnicate"));
}

#[test]
fn generic_csv_follows_column_options() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = write(
        d.path(),
        "t.tsv",
        "size\tid\top\ttime\n100\tk1\tread\t5.7\n200\t42\twrite\t6\n",
    );
    let opts = ReadOptions {
        format: Some(Format::Csv),
        csv: CsvOptions {
            time_col: Some(4),
            key_col: 2,
            size_col: Some(1),
            op_col: Some(3),
            header: true,
            delimiter: '\t',
        },
        ..ReadOptions::default()
    };
    let recs = read_all(&p, &opts).expect("read");
    assert_eq!(recs.len(), 2);
    assert_eq!((recs[0].time, recs[0].size, recs[0].op), (5, 100, Op::Get));
    assert_eq!((recs[1].key, recs[1].op), (42, Op::Put));
    let zero = ReadOptions {
        csv: CsvOptions {
            key_col: 0,
            ..CsvOptions::default()
        },
        ..opts.clone()
    };
    assert!(
        read_all(&p, &zero)
            .expect_err("col 0")
            .to_string()
            .contains("from 1")
    );
    let short = ReadOptions {
        csv: CsvOptions {
            key_col: 9,
            ..opts.csv.clone()
        },
        ..opts
    };
    let e = read_all(&p, &short).expect_err("missing column");
    assert!(e.to_string().contains("t.tsv:2: missing field 9"), "{e}");
}
