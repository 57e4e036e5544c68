//! Writing oracleGeneral traces, with next-access times (which Belady's MIN needs).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::open::BUF;
use crate::record::Record;
use crate::{ReadOptions, TraceError, reader};

/// What a conversion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Converted {
    /// Records written.
    pub records: u64,
    /// Malformed lines skipped (lenient reading only).
    pub skipped: u64,
    /// Writes and deletes among the records: oracleGeneral has no operation field, so they are
    /// written as plain requests, which every reader of the format (libCacheSim, `pliant sim`)
    /// replays as reads.
    pub writes: u64,
}

/// Converts the trace at `input` (read with `opts`) to oracleGeneral at `output`, with
/// next-access times. The whole trace is held in memory (the next-access pass runs backward);
/// `progress` is called with the records read so far, every 65,536.
pub fn convert_to_oracle_general(
    input: &Path,
    opts: &ReadOptions,
    output: &Path,
    progress: &dyn Fn(u64),
) -> Result<Converted, TraceError> {
    let mut rd = reader(input, opts)?;
    let mut recs = Vec::new();
    for r in rd.by_ref() {
        recs.push(r?);
        if recs.len() % 65_536 == 0 {
            progress(recs.len() as u64);
        }
    }
    fill_next_access(&mut recs);
    write_oracle_general(output, &recs)?;
    Ok(Converted {
        records: recs.len() as u64,
        skipped: rd.skipped(),
        writes: recs.iter().filter(|r| r.op != crate::Op::Get).count() as u64,
    })
}

/// Fills in each record's `next_access`: the index of the next record with the same key, −1 if
/// none. Works backward over the whole trace in memory (16 bytes per distinct key).
pub fn fill_next_access(records: &mut [Record]) {
    let mut next: HashMap<u64, i64, foldhash::fast::FixedState> =
        HashMap::with_hasher(foldhash::fast::FixedState::with_seed(1));
    for (i, r) in records.iter_mut().enumerate().rev() {
        r.next_access = next.insert(r.key, i as i64).unwrap_or(-1);
    }
}

/// Writes records as oracleGeneral to `path` (gzipped if it ends in `.gz`). Timestamps beyond
/// `u32` (year 2106) are an error rather than silently wrapped.
pub fn write_oracle_general(path: &Path, records: &[Record]) -> Result<(), TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = BufWriter::with_capacity(BUF, File::create(path).map_err(io)?);
    if path.extension().is_some_and(|e| e == "gz") {
        let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::default());
        write_records(path, &mut enc, records)?;
        enc.finish().map_err(io)?.flush().map_err(io)
    } else {
        let mut f = f;
        write_records(path, &mut f, records)?;
        f.flush().map_err(io)
    }
}

fn write_records(path: &Path, out: &mut impl Write, records: &[Record]) -> Result<(), TraceError> {
    for (i, r) in records.iter().enumerate() {
        let time = u32::try_from(r.time).map_err(|_| {
            TraceError::Options(format!(
                "{}: record {i} has timestamp {} which does not fit oracleGeneral's 32-bit time",
                path.display(),
                r.time
            ))
        })?;
        let mut rec = [0u8; 24];
        rec[0..4].copy_from_slice(&time.to_le_bytes());
        rec[4..12].copy_from_slice(&r.key.to_le_bytes());
        rec[12..16].copy_from_slice(&r.size.to_le_bytes());
        rec[16..24].copy_from_slice(&r.next_access.to_le_bytes());
        out.write_all(&rec).map_err(|source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}
