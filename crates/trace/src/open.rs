//! Opening trace files, decompressing by extension: `.gz` (flate2) and `.zst` (ruzstd, a pure-Rust
//! decoder, so no C toolchain is needed).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::TraceError;

/// Reading buffer: large enough that a 20-million-record replay makes few system calls.
pub(crate) const BUF: usize = 1 << 20;

/// Opens `path`, transparently decompressing `.gz` and `.zst`.
pub fn open(path: &Path) -> Result<Box<dyn Read + Send>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = File::open(path).map_err(io)?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    Ok(match ext {
        "gz" => Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(
            BUF, f,
        ))),
        "zst" => Box::new(
            ruzstd::decoding::StreamingDecoder::new(BufReader::with_capacity(BUF, f)).map_err(
                |e| {
                    io(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        e.to_string(),
                    ))
                },
            )?,
        ),
        _ => Box::new(f),
    })
}
