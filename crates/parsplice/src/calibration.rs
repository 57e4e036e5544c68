//! The model against the real traces (`pliant parsplice calibrate`), and the model's own trace
//! (`pliant parsplice gen`).

use std::io::Write;
use std::path::Path;

use pliant_trace::{Format, Profile, ReadOptions};

use crate::ParspliceError;
use crate::hierarchy::{RunSpec, Segments, run};
use crate::model::{StoreParams, WorkloadParams};
use crate::policy::PolicyKind;
use crate::store::FjallStore;

/// The traced runs: the directory of each under the traces directory, and its growth delay.
pub const TRACES: [(&str, f64); 2] = [("d100K", 100_000.0), ("d1M", 1_000_000.0)];

/// Seconds per bucket of the profiles compared.
pub const BUCKET_SECONDS: u64 = 100;

/// The traced runs' span, seconds (both end after about 15,000 s).
const SPAN_SECONDS: f64 = 15_000.0;

/// Writes [`model_trace`] to `path`, gzipped if the name ends in `.gz` (as the real traces are).
pub fn write_model_trace(path: &Path, workload: WorkloadParams) -> Result<(), ParspliceError> {
    let bytes = model_trace(workload)?;
    let io = |source| ParspliceError::Write {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::create(path).map_err(io)?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::default());
        enc.write_all(&bytes).map_err(io)?;
        enc.finish().map_err(io)?.sync_all().map_err(io)
    } else {
        let mut f = f;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)
    }
}

/// The ParSplice keyspace CSV of WorkManager 0 of a model run with an unlimited cache: the same
/// format as the real traces.
pub fn model_trace(workload: WorkloadParams) -> Result<Vec<u8>, ParspliceError> {
    let mut out = Vec::new();
    let spec = RunSpec {
        policy: PolicyKind::Unlimited,
        workload,
        store: StoreParams::default(),
        interval: 10.0,
    };
    run(
        &spec,
        Segments::Model,
        &FjallStore::temporary()?,
        Some(&mut out),
        &|_| {},
    )?;
    Ok(out)
}

/// One traced run beside the model's run of the same growth delay.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// The run's directory name (`d100K`).
    pub trace: &'static str,
    /// Its growth delay, ps.
    pub growth_delay: f64,
    /// The real WorkManager trace's profile.
    pub real: Profile,
    /// The model's (one WorkManager, 27 workers, the traces' span).
    pub model: Profile,
}

/// Profiles `traces/d100K/rank4.csv.gz` and `traces/d1M/rank4.csv.gz` and the model's trace of
/// each run, in [`BUCKET_SECONDS`] buckets.
pub fn calibrate(traces: &Path) -> Result<Vec<Calibration>, ParspliceError> {
    let scratch = tempfile::tempdir().map_err(ParspliceError::Io)?;
    TRACES
        .iter()
        .map(|&(name, growth)| {
            let real = traces.join(name).join("rank4.csv.gz");
            if !real.exists() {
                return Err(ParspliceError::Input {
                    path: real,
                    message: "not found; the traces directory must hold d100K/ and d1M/".into(),
                });
            }
            let model = scratch.path().join(format!("model-{name}.csv"));
            let bytes = model_trace(WorkloadParams {
                growth_delay: growth,
                nodes: 1,
                workers: crate::model::TRACED_WORKERS,
                hours: SPAN_SECONDS / 3600.0,
                ..WorkloadParams::default()
            })?;
            std::fs::write(&model, bytes).map_err(ParspliceError::Io)?;
            Ok(Calibration {
                trace: name,
                growth_delay: growth,
                real: profile(&real)?,
                model: profile(&model)?,
            })
        })
        .collect()
}

fn profile(path: &Path) -> Result<Profile, ParspliceError> {
    let opts = ReadOptions {
        format: Some(Format::ParSplice),
        ..ReadOptions::default()
    };
    Ok(pliant_trace::profile(
        pliant_trace::reader(path, &opts)?,
        BUCKET_SECONDS,
        false,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(seed: u64) -> WorkloadParams {
        WorkloadParams {
            nodes: 1,
            hours: 0.25,
            seed,
            ..WorkloadParams::default()
        }
    }

    /// The model's trace reads back as a real ParSplice trace does, the same for a seed.
    #[test]
    fn the_model_trace_is_a_parsplice_trace() {
        let bytes = model_trace(short(1)).expect("model");
        assert_eq!(
            bytes,
            model_trace(short(1)).expect("again"),
            "deterministic"
        );
        assert_ne!(bytes, model_trace(short(2)).expect("seed 2"));
        let d = tempfile::tempdir().expect("tempdir");
        // Written gzipped, as the real traces are, it reads back to the same bytes.
        let path = d.path().join("model.csv.gz");
        write_model_trace(&path, short(1)).expect("write");
        let mut back = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("open")),
            &mut back,
        )
        .expect("gunzip");
        assert_eq!(back, bytes);
        let p = profile(&path).expect("profile");
        assert!(
            p.reads > p.writes && p.writes > 0,
            "{} / {}",
            p.reads,
            p.writes
        );
        assert_eq!(p.reads_per_bucket.len(), 9, "15 minutes in 100-s buckets");
        assert_eq!(p.bucket_seconds, BUCKET_SECONDS);
    }

    #[test]
    fn a_missing_real_trace_is_named() {
        let d = tempfile::tempdir().expect("tempdir");
        let e = calibrate(d.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("d100K/rank4.csv.gz") && e.contains("not found"),
            "{e}"
        );
    }
}
