//! Trace-reading options shared by every command that reads a trace, and size parsing.

use anyhow::{Result, bail};
use pliant_cache::Capacity;
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

/// Parses `128MiB`, `1GB`, `4096`, `1000keys`, `unlimited`.
pub fn parse_capacity(s: &str) -> Result<Capacity> {
    let t = s.trim().to_ascii_lowercase();
    if t == "unlimited" || t == "inf" {
        return Ok(Capacity::Keys(u64::MAX));
    }
    if let Some(n) = t.strip_suffix("keys").or_else(|| t.strip_suffix("key")) {
        let n = parse_number(n).ok_or_else(|| bad_size(s))?;
        return Ok(Capacity::Keys(n as u64));
    }
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: f64 = match unit {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1024.0 * 1024.0,
        "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
        "tib" | "t" => 1024f64.powi(4),
        _ => return Err(bad_size(s)),
    };
    let n = parse_number(num).ok_or_else(|| bad_size(s))?;
    Ok(Capacity::Bytes((n * mult).round() as u64))
}

fn parse_number(s: &str) -> Option<f64> {
    let v: f64 = s.trim().replace('_', "").parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

fn bad_size(s: &str) -> anyhow::Error {
    anyhow::anyhow!("size {s:?}: expected bytes (4096, 128MiB, 1GB), keys (1000keys) or unlimited")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_every_unit() {
        assert_eq!(
            parse_capacity("128MiB").ok(),
            Some(Capacity::Bytes(128 << 20))
        );
        assert_eq!(
            parse_capacity("1GB").ok(),
            Some(Capacity::Bytes(1_000_000_000))
        );
        assert_eq!(parse_capacity("4096").ok(), Some(Capacity::Bytes(4096)));
        assert_eq!(parse_capacity("1000keys").ok(), Some(Capacity::Keys(1000)));
        assert_eq!(
            parse_capacity("1e5keys").ok(),
            Some(Capacity::Keys(100_000))
        );
        assert_eq!(
            parse_capacity("unlimited").ok(),
            Some(Capacity::Keys(u64::MAX))
        );
        for bad in ["", "12parsecs", "-5", "keys", "0"] {
            assert!(parse_capacity(bad).is_err(), "{bad}");
        }
    }
}
