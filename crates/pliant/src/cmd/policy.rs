//! `pliant policy`: check, run and list policies offline, the way an administrator tests one
//! before installing it on a live service.

use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::{Context, Result, bail};
use pliant_policy::{
    Decision, Engine, EngineConfig, FileStore, Limits, MemoryStore, Metrics, Params, PolicySource,
    ServerId, StateStore, TimeSeries, shipped,
};

use super::args::{Json, PolicyParams};

/// Policy subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Compile each policy and dry-run a decision against a sample environment.
    ///
    /// The environment is what a service gives its policies: `tier` a cluster of four caches
    /// (what `pliant serve`, `sim` and `parsplice` give: keys, bytes, hits, rates, a time series of
    /// reads), `fs` one file cache (what `pliant fs` gives: capacity, used, dirty, the
    /// watermarks, rates). By default a policy passes if it runs cleanly in either, and the line
    /// says which. `where` and `howmuch` run only when `when` says yes, as in a decision.
    ///
    /// Each FILE is a function-style policy (`name.lua`), a directory of Mantle-style chunks, or
    /// chunk files (`load.lua`, `when.lua`, `where.lua`, `howmuch.lua`, grouped by directory). The
    /// name of a shipped policy (see `pliant policy list`) checks the built-in copy.
    /// Exits 0 when all pass, 1 otherwise.
    ///
    /// Example: pliant policy check policies/*.lua policies/cephfs-greedy-spill
    #[command(verbatim_doc_comment)]
    Check(CheckArgs),
    /// Run one policy once over given metrics and print its decision.
    ///
    /// METRICS.json is {"whoami": ID, "servers": {ID: {METRIC: NUMBER}}}; ids that read as
    /// integers are Lua integers. TS.csv has lines `ts,value` (a header line is allowed).
    /// With --state-dir, WRstate persists there, so successive runs continue one another.
    ///
    /// Example:
    ///   pliant policy run policies/static-limit.lua --metrics m.json --param limit=1000 --json
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// List the shipped policies.
    List,
    /// The shipped policies deciding over a built-in scenario, tick by tick.
    Demo(super::policy_demo::Args),
}

/// Arguments of `policy check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// Policy files, chunk directories, or shipped policy names.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The sample environment to dry-run in (any: each until one runs cleanly).
    #[arg(long, value_enum, default_value_t = Env::Any)]
    env: Env,
    #[command(flatten)]
    common: Common,
}

/// Which service's sample environment `policy check` dry-runs a policy in.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Env {
    /// Tier first, then fs.
    Any,
    /// A cluster of caches (serve, sim, parsplice).
    Tier,
    /// One file cache (`pliant fs`).
    Fs,
}

impl Env {
    fn name(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::Tier => "tier",
            Self::Fs => "fs",
        }
    }

    /// The environments this choice tries, in order.
    fn each(self) -> &'static [Env] {
        match self {
            Self::Any => &[Self::Tier, Self::Fs],
            Self::Tier => &[Self::Tier],
            Self::Fs => &[Self::Fs],
        }
    }
}

/// Arguments of `policy run`.
#[derive(clap::Args)]
#[command(mut_arg("json", |a| a.help("Print one JSON object instead of text")))]
pub struct RunArgs {
    /// One policy: a .lua file, its chunk files, a chunk directory, or a shipped policy name.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Cluster metrics as JSON.
    #[arg(long, value_name = "METRICS.json")]
    metrics: PathBuf,
    /// Time series for `timeseries()`, as `ts,value` lines.
    #[arg(long, value_name = "TS.csv")]
    timeseries: Option<PathBuf>,
    /// Override `whoami` from the metrics file.
    #[arg(long, value_name = "ID")]
    whoami: Option<String>,
    /// Persist WRstate in this directory (default: in memory, forgotten after the run).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    output: Json,
    /// Also write the decision log (JSON lines) here.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// Options shared by check and run.
#[derive(clap::Args)]
#[command(mut_arg("params", |a| a.help(
    "Policy parameter, visible as `params.KEY` (repeatable), e.g. --param target=1000"
)))]
struct Common {
    #[command(flatten)]
    params: PolicyParams,
    /// Instruction budget per callback.
    #[arg(long, default_value_t = Limits::default().instructions)]
    budget: u64,
    /// Memory cap per policy, in MiB.
    #[arg(long, default_value_t = Limits::default().memory_bytes >> 20)]
    memory_mib: usize,
}

impl Common {
    fn engine(&self, store: Rc<dyn StateStore>, metrics: Metrics) -> Engine {
        let config = EngineConfig {
            limits: Limits {
                instructions: self.budget,
                memory_bytes: self.memory_mib << 20,
            },
            ..EngineConfig::default()
        };
        let mut e = Engine::new(config, store, metrics);
        e.set_params(self.params.params.iter().cloned().collect::<Params>());
        e
    }
}

/// Runs a policy subcommand.
pub fn run(cmd: Command) -> Result<ExitCode> {
    match cmd {
        Command::Check(a) => check(&a),
        Command::Run(a) => run_once(&a),
        Command::Demo(a) => super::policy_demo::run(&a),
        Command::List => {
            for name in shipped::NAMES {
                let style = shipped::get(name).map_or("?", |p| p.style.name());
                println!("{name:24} ({style})");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn check(a: &CheckArgs) -> Result<ExitCode> {
    let mut failed = 0;
    let groups = PolicySource::group_paths(&a.files);
    for files in &groups {
        let label = files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        match check_one(a, files) {
            Ok((src, env, d)) => {
                println!(
                    "ok    {label} ({}, {}) in {}: dry run when={} where={} howmuch={}",
                    src.name,
                    src.style.name(),
                    env.name(),
                    d.when,
                    answer(d.where_.as_ref()),
                    answer(d.howmuch.as_ref()),
                );
            }
            Err(errors) => {
                failed += 1;
                println!("FAIL  {label}");
                let texts: Vec<(Option<Env>, String)> = errors
                    .iter()
                    .map(|(env, e)| (*env, super::chain(e).replace('\n', "\n      ")))
                    .collect();
                // An error that does not depend on the environment (a syntax error) once.
                let same = texts.len() > 1 && texts.windows(2).all(|w| w[0].1 == w[1].1);
                for (env, text) in texts.iter().take(if same { 1 } else { texts.len() }) {
                    let at = match env {
                        Some(e) if !same => format!("in {}: ", e.name()),
                        _ => String::new(),
                    };
                    println!("      {at}{text}");
                }
            }
        }
    }
    if failed > 0 {
        eprintln!("{failed} of {} policies failed", groups.len());
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// A policy dry-run in each environment `--env` names until one runs it cleanly; else every
/// environment's error (or the one error of reading the policy, with no environment).
#[allow(clippy::type_complexity)]
fn check_one(
    a: &CheckArgs,
    files: &[PathBuf],
) -> Result<(PolicySource, Env, Decision), Vec<(Option<Env>, anyhow::Error)>> {
    let src = PolicySource::resolve(files).map_err(|e| vec![(None, e.into())])?;
    let mut errors = Vec::new();
    for &env in a.env.each() {
        let (metrics, ts) = match env {
            Env::Fs => (pliant_fs::policy::sample_environment(), TimeSeries::new()),
            _ => pliant_tier::sample_environment(),
        };
        let mut e = a.common.engine(Rc::new(MemoryStore::new()), metrics);
        e.timeseries().replace(ts.with_mut(std::mem::take));
        match e.check(&src) {
            Ok(d) => return Ok((src, env, d)),
            Err(err) => errors.push((Some(env), err.into())),
        }
    }
    Err(errors)
}

/// A decision's answer as JSON, or `none` when it was not asked or gave nothing.
fn answer<T: serde::Serialize>(v: Option<&T>) -> String {
    v.map_or_else(
        || "none".into(),
        |v| serde_json::to_string(v).unwrap_or_default(),
    )
}

fn run_once(a: &RunArgs) -> Result<ExitCode> {
    let src = PolicySource::resolve(&a.files)?;
    let text = std::fs::read_to_string(&a.metrics)
        .with_context(|| format!("cannot read metrics {}", a.metrics.display()))?;
    let mut metrics = Metrics::from_json(&text, &a.metrics.display().to_string())?;
    if let Some(w) = &a.whoami {
        metrics.set_whoami(ServerId::parse(w));
    }
    if !metrics.ids().contains(metrics.whoami()) {
        bail!(
            "{}: whoami {} is not among the servers ({})",
            a.metrics.display(),
            metrics.whoami(),
            metrics
                .ids()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let store: Rc<dyn StateStore> = match &a.state_dir {
        Some(d) => Rc::new(FileStore::open(d)?),
        None => Rc::new(MemoryStore::new()),
    };
    let mut e = a.common.engine(store, metrics);
    if let Some(p) = &a.timeseries {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("cannot read time series {}", p.display()))?;
        let ts = TimeSeries::from_csv(&text, &p.display().to_string())?;
        e.timeseries().replace(ts.with_mut(std::mem::take));
    }
    let result = e.install(src.clone()).and_then(|_| e.decide());
    if let Some(path) = &a.log {
        let f = std::fs::File::create(path)
            .with_context(|| format!("cannot write log {}", path.display()))?;
        e.log().write_jsonl(std::io::BufWriter::new(f))?;
    }
    let ok = result.is_ok();
    if a.output.json {
        println!("{}", serde_json::to_string(&run_json(&result))?);
    } else {
        match &result {
            Ok(d) => print_decision(&src, d),
            Err(err) => eprintln!("error: {err}"),
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The `--json` shape of `policy run`.
fn run_json(r: &Result<Decision, pliant_policy::PolicyError>) -> serde_json::Value {
    match r {
        Ok(d) => serde_json::json!({
            "when": d.when,
            "where": d.where_,
            "howmuch": d.howmuch,
            "error": null,
            "instructions": d.instructions,
            "micros": d.micros,
        }),
        Err(e) => {
            // A policy stopped by its budget ran all of it: the count that stopped it is news,
            // a 0 would say it never ran. Other errors carry no count.
            let instructions = match e {
                pliant_policy::PolicyError::Budget { budget, .. } => serde_json::json!(budget),
                _ => serde_json::Value::Null,
            };
            serde_json::json!({
                "when": null, "where": null, "howmuch": null,
                "error": e.to_string(), "instructions": instructions, "micros": null,
            })
        }
    }
}

fn print_decision(src: &PolicySource, d: &Decision) {
    println!("policy   {} ({})", src.name, src.style.name());
    if let Some(l) = d.load {
        println!("load     {l}");
    }
    println!("when     {}", d.when);
    if let Some(w) = &d.where_ {
        let parts: Vec<String> = w.iter().map(|(k, v)| format!("{k} <- {v}")).collect();
        println!(
            "where    {}",
            if parts.is_empty() {
                "(nothing)".to_string()
            } else {
                parts.join(", ")
            }
        );
    }
    if d.when {
        match &d.howmuch {
            Some(h) => println!("howmuch  {}", serde_json::to_string(h).unwrap_or_default()),
            None => println!("howmuch  (none)"),
        }
    }
    println!(
        "cost     {} instructions, {:.1} µs",
        d.instructions, d.micros
    );
}
