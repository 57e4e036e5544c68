//! Streaming readers for every supported format.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::open::{BUF, open};
use crate::record::{Op, Record, hash_id};
use crate::{Format, ReadOptions, TraceError};

/// A stream of records. Lenient readers skip malformed lines and count them.
pub trait TraceReader: Iterator<Item = Result<Record, TraceError>> + Send {
    /// Malformed lines skipped so far (lenient mode only).
    fn skipped(&self) -> u64 {
        0
    }

    /// What the reader noticed that the caller should tell the user but that did not stop it
    /// (a last record with no line end: a text file cut short), each naming the file and line.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The format `reader` reads `path` in: `opts.format`, or guessed from the name (`*.oracleGeneral*`,
/// `*.bin`) or the first line.
pub fn format_of(path: &Path, opts: &ReadOptions) -> Result<Format, TraceError> {
    match opts.format {
        Some(f) => Ok(f),
        None => guess(path),
    }
}

/// Opens `path` with `opts`, guessing the format when `opts.format` is `None`.
pub fn reader(path: &Path, opts: &ReadOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    let format = format_of(path, opts)?;
    let input = open(path)?;
    Ok(match format {
        Format::OracleGeneral => Box::new(OracleReader::new(path, input)),
        Format::ParSplice => Box::new(LineReader::new(path, input, opts, Parser::ParSplice)),
        Format::Twitter => Box::new(LineReader::new(path, input, opts, Parser::Twitter)),
        Format::Csv => {
            opts.csv.validate()?;
            Box::new(LineReader::new(path, input, opts, Parser::Csv))
        }
    })
}

/// Guesses a format from the file name, then from the first line.
fn guess(path: &Path) -> Result<Format, TraceError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if name.contains("oraclegeneral") || name.ends_with(".bin") {
        return Ok(Format::OracleGeneral);
    }
    let mut first = String::new();
    BufReader::new(open(path)?)
        .read_line(&mut first)
        .map_err(|source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    let fields: Vec<&str> = first.trim().split(',').collect();
    let parsplice_op = fields
        .get(1)
        .is_some_and(|op| op.starts_with("DBMemory") || op.starts_with("LDB"));
    // LevelDB ranks open with `unix_ts,LDBCreate,db`: a three-field line.
    if parsplice_op && (fields.len() == 4 || (fields.len() == 3 && fields[1] == "LDBCreate")) {
        return Ok(Format::ParSplice);
    }
    if fields.len() == 7 && fields[5].chars().all(|c| c.is_ascii_alphabetic()) {
        return Ok(Format::Twitter);
    }
    Err(TraceError::Format {
        message: format!(
            "cannot tell the format of {}; pass --format",
            path.display()
        ),
    })
}

/// libCacheSim's oracleGeneral: packed little-endian `u32 time, u64 id, u32 size,
/// i64 next_access_vtime` (−1 = none).
pub struct OracleReader {
    path: PathBuf,
    input: Box<dyn Read + Send>,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    offset: u64,
    done: bool,
}

/// Bytes per oracleGeneral record.
pub const ORACLE_RECORD: usize = 24;

impl OracleReader {
    fn new(path: &Path, input: Box<dyn Read + Send>) -> Self {
        Self {
            path: path.to_path_buf(),
            input,
            buf: vec![0; BUF],
            pos: 0,
            len: 0,
            offset: 0,
            done: false,
        }
    }

    fn refill(&mut self) -> Result<(), TraceError> {
        self.buf.copy_within(self.pos..self.len, 0);
        self.len -= self.pos;
        self.pos = 0;
        while self.len < ORACLE_RECORD {
            let n = self
                .input
                .read(&mut self.buf[self.len..])
                .map_err(|source| TraceError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            self.len += n;
        }
        Ok(())
    }
}

impl Iterator for OracleReader {
    type Item = Result<Record, TraceError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.len - self.pos < ORACLE_RECORD {
            if let Err(e) = self.refill() {
                self.done = true;
                return Some(Err(e));
            }
            let left = self.len - self.pos;
            if left == 0 {
                self.done = true;
                return None;
            }
            if left < ORACLE_RECORD {
                self.done = true;
                return Some(Err(TraceError::Truncated {
                    path: self.path.clone(),
                    offset: self.offset,
                    bytes: left,
                    record: ORACLE_RECORD,
                }));
            }
        }
        let r = &self.buf[self.pos..self.pos + ORACLE_RECORD];
        let le4 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let le8 = |b: &[u8]| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let rec = Record {
            time: u64::from(le4(&r[0..4])),
            key: le8(&r[4..12]),
            size: le4(&r[12..16]),
            op: Op::Get,
            next_access: le8(&r[16..24]) as i64,
        };
        self.pos += ORACLE_RECORD;
        self.offset += ORACLE_RECORD as u64;
        Some(Ok(rec))
    }
}

impl TraceReader for OracleReader {}

#[derive(Debug, Clone, Copy)]
enum Parser {
    ParSplice,
    Twitter,
    Csv,
}

/// Text formats: one record per line.
pub struct LineReader {
    path: PathBuf,
    input: BufReader<Box<dyn Read + Send>>,
    line: Vec<u8>,
    line_no: u64,
    opts: ReadOptions,
    parser: Parser,
    skipped: u64,
    done: bool,
    /// The line number of a last line without its line end.
    cut: Option<u64>,
}

impl LineReader {
    fn new(path: &Path, input: Box<dyn Read + Send>, opts: &ReadOptions, parser: Parser) -> Self {
        Self {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(BUF, input),
            line: Vec::with_capacity(256),
            line_no: 0,
            opts: opts.clone(),
            parser,
            skipped: 0,
            done: false,
            cut: None,
        }
    }
}

/// What one line turned out to be.
enum Parsed {
    Record(Record),
    /// A line that carries no logical operation (the MRU half of a ParSplice pair, a header).
    Skip,
}

fn field<'a>(fields: &[&'a str], i: usize, name: &str) -> Result<&'a str, String> {
    fields
        .get(i)
        .map(|s| s.trim())
        .ok_or_else(|| format!("missing field {} ({name})", i + 1))
}

fn num<T: std::str::FromStr>(s: &str, name: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{name} {s:?} is not a valid number"))
}

/// Whether `opts` asks for operations like `op`.
fn wanted(op: Op, opts: &ReadOptions) -> bool {
    match op {
        Op::Get => opts.ops.reads,
        Op::Put | Op::Delete => opts.ops.writes,
    }
}

fn parse_parsplice(line: &str, opts: &ReadOptions) -> Result<Parsed, String> {
    let f: Vec<&str> = line.split(',').collect();
    // LevelDB's database creation names no key: `unix_ts,LDBCreate,db`.
    if f.len() == 3 && f[1].trim() == "LDBCreate" {
        num::<u64>(f[0].trim(), "timestamp")?;
        num::<u32>(f[2].trim(), "db")?;
        return Ok(Parsed::Skip);
    }
    if f.len() != 4 {
        return Err(format!(
            "expected 4 fields `unix_ts,op,db,key`, got {}: {line:?}",
            f.len()
        ));
    }
    let time: u64 = num(f[0].trim(), "timestamp")?;
    let db: u32 = num(f[2].trim(), "db")?;
    let key: u64 = num(f[3].trim(), "key")?;
    // One logical read per Get/MRUGet pair and one write per Put/PutUnique/MRUPut triple: count
    // the first line of each.
    let op = match f[1].trim() {
        "DBMemoryGet" | "LDBGet" => Op::Get,
        "DBMemoryPut" | "LDBPut" => Op::Put,
        "DBMemoryMRUGet" | "DBMemoryPutUnique" | "DBMemoryMRUPut" | "LDBCreate" => {
            return Ok(Parsed::Skip);
        }
        other => return Err(format!("unknown ParSplice operation {other:?}")),
    };
    if opts.parsplice_db.is_some_and(|d| d != db) {
        return Ok(Parsed::Skip);
    }
    if !wanted(op, opts) {
        return Ok(Parsed::Skip);
    }
    Ok(Parsed::Record(Record {
        time,
        key,
        size: opts.default_size,
        op,
        next_access: -1,
    }))
}

fn parse_twitter(line: &str, opts: &ReadOptions) -> Result<Parsed, String> {
    let f: Vec<&str> = line.split(',').collect();
    if f.len() != 7 {
        return Err(format!(
            "expected 7 fields `timestamp,key,key_size,value_size,client_id,op,ttl`, got {}",
            f.len()
        ));
    }
    let time: u64 = num(f[0].trim(), "timestamp")?;
    let key_size: u32 = num(f[2].trim(), "key_size")?;
    let value_size: u32 = num(f[3].trim(), "value_size")?;
    let op = match f[5].trim() {
        "get" | "gets" => Op::Get,
        "set" | "add" | "replace" | "cas" | "append" | "prepend" | "incr" | "decr" => Op::Put,
        "delete" => Op::Delete,
        other => return Err(format!("unknown Twitter operation {other:?}")),
    };
    if !wanted(op, opts) {
        return Ok(Parsed::Skip);
    }
    Ok(Parsed::Record(Record {
        time,
        key: hash_id(f[1].trim().as_bytes()),
        size: key_size.saturating_add(value_size),
        op,
        next_access: -1,
    }))
}

fn parse_csv(line: &str, line_no: u64, opts: &ReadOptions) -> Result<Parsed, String> {
    let c = &opts.csv;
    if c.header && line_no == 1 {
        return Ok(Parsed::Skip);
    }
    let f: Vec<&str> = line.split(c.delimiter).collect();
    let key_s = field(&f, c.key_col - 1, "id")?;
    let key = key_s
        .parse::<u64>()
        .unwrap_or_else(|_| hash_id(key_s.as_bytes()));
    let time = match c.time_col {
        Some(i) => {
            let t: f64 = num(field(&f, i - 1, "time")?, "time")?;
            if t.is_nan() || t < 0.0 {
                return Err(format!("time {t} is not a non-negative number"));
            }
            t as u64
        }
        None => 0,
    };
    let size = match c.size_col {
        Some(i) => num(field(&f, i - 1, "size")?, "size")?,
        None => opts.default_size,
    };
    let op = match c.op_col {
        Some(i) => match field(&f, i - 1, "op")?.to_ascii_lowercase().as_str() {
            "get" | "read" | "r" | "gets" => Op::Get,
            "put" | "set" | "write" | "w" | "add" | "update" => Op::Put,
            "delete" | "del" | "remove" => Op::Delete,
            other => return Err(format!("unknown operation {other:?}")),
        },
        None => Op::Get,
    };
    if !wanted(op, opts) {
        return Ok(Parsed::Skip);
    }
    Ok(Parsed::Record(Record {
        time,
        key,
        size,
        op,
        next_access: -1,
    }))
}

impl Iterator for LineReader {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.line.clear();
            match self.input.read_until(b'\n', &mut self.line) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    self.line_no += 1;
                    // Only the last line can lack its line end, and a text file cut short
                    // (`head -c`) ends so; a compressed stream cut short fails in the decoder.
                    if self.line.last() != Some(&b'\n') && self.cut.is_none() {
                        self.cut = Some(self.line_no);
                        tracing::warn!("{}", self.warnings().join("; "));
                    }
                    let text = match std::str::from_utf8(&self.line) {
                        Ok(t) => t.trim_end_matches(['\n', '\r']),
                        Err(_) => "\u{fffd}",
                    };
                    if text.trim().is_empty() {
                        continue;
                    }
                    let parsed = match self.parser {
                        Parser::ParSplice => parse_parsplice(text, &self.opts),
                        Parser::Twitter => parse_twitter(text, &self.opts),
                        Parser::Csv => parse_csv(text, self.line_no, &self.opts),
                    };
                    match parsed {
                        Ok(Parsed::Record(r)) => return Some(Ok(r)),
                        Ok(Parsed::Skip) => {}
                        Err(_) if self.opts.lenient => self.skipped += 1,
                        Err(message) => {
                            self.done = true;
                            return Some(Err(TraceError::Parse {
                                path: self.path.clone(),
                                line: self.line_no,
                                message,
                            }));
                        }
                    }
                }
                Err(source) => {
                    self.done = true;
                    return Some(Err(TraceError::Io {
                        path: self.path.clone(),
                        source,
                    }));
                }
            }
        }
        None
    }
}

impl TraceReader for LineReader {
    fn skipped(&self) -> u64 {
        self.skipped
    }

    fn warnings(&self) -> Vec<String> {
        self.cut
            .map(|line| {
                format!(
                    "{} line {line}: the last record has no line end, as a file cut short \
                     ends; it was read as it stands",
                    self.path.display()
                )
            })
            .into_iter()
            .collect()
    }
}
