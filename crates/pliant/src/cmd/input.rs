//! Trace-reading options shared by every command that reads a trace.

use anyhow::{Result, bail};
use pliant_trace::{CsvOptions, Format, Ops, ReadOptions};

/// How to read a trace.
#[derive(clap::Args, Clone)]
pub struct TraceArgs {
    /// Trace format: parsplice, oracle-general, csv, twitter (default: guessed from the file
    /// name or first line). `.gz` and `.zst` files are decompressed.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Skip malformed lines (and report how many) instead of stopping at the first.
    #[arg(long)]
    pub lenient: bool,
    /// Object size for traces without sizes (ParSplice; CSV without a size column).
    #[arg(long, default_value_t = 1, value_name = "BYTES")]
    pub default_size: u32,
    /// Which logical operations to read: reads, writes or all.
    #[arg(long, default_value = "all", value_name = "OPS")]
    pub ops: String,
    /// Generic CSV: 1-based columns as time,id,size,op (0 = absent), e.g. 1,2,3,0.
    #[arg(long, default_value = "1,2,3,0", value_name = "COLS")]
    pub csv_columns: String,
    /// Generic CSV: the first line is a header.
    #[arg(long)]
    pub csv_header: bool,
    /// Generic CSV: field delimiter (a single character; `tab` for a tab).
    #[arg(long, default_value = ",")]
    pub csv_delimiter: String,
}

impl TraceArgs {
    /// The reader options these arguments describe.
    pub fn options(&self) -> Result<ReadOptions> {
        let format = self
            .format
            .as_deref()
            .map(str::parse::<Format>)
            .transpose()?;
        let ops = match self.ops.as_str() {
            "all" => Ops::default(),
            "reads" => Ops {
                reads: true,
                writes: false,
            },
            "writes" => Ops {
                reads: false,
                writes: true,
            },
            other => bail!("--ops {other:?}: expected reads, writes or all"),
        };
        let cols: Vec<usize> = self
            .csv_columns
            .split(',')
            .map(|c| c.trim().parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                anyhow::anyhow!(
                    "--csv-columns {:?}: expected four numbers",
                    self.csv_columns
                )
            })?;
        let [time, key, size, op] = cols[..] else {
            bail!(
                "--csv-columns {:?}: expected time,id,size,op",
                self.csv_columns
            );
        };
        if key == 0 {
            bail!("--csv-columns: the id column is required");
        }
        let delimiter = match self.csv_delimiter.as_str() {
            "tab" | "\\t" => '\t',
            d if d.chars().count() == 1 => d.chars().next().unwrap_or(','),
            d => bail!("--csv-delimiter {d:?}: expected one character"),
        };
        let opt = |c: usize| (c > 0).then_some(c);
        Ok(ReadOptions {
            format,
            lenient: self.lenient,
            default_size: self.default_size,
            ops,
            csv: CsvOptions {
                time_col: opt(time),
                key_col: key,
                size_col: opt(size),
                op_col: opt(op),
                header: self.csv_header,
                delimiter,
            },
            ..ReadOptions::default()
        })
    }
}
