//! `pliant demo`: the main job. A ParSplice run (the model, or a real trace) through every cache
//! policy of the studies plus `auto`, with the trajectory each keeps, the memory each needs, and a
//! report with charts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use pliant_parsplice::{PolicyKind, RunReport, study};

use super::args::{Json, Seed};
use crate::plot::{Chart, Series, draw};

/// Arguments of `demo`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  pliant demo                                   # the model: 2.5 h, growth delay 100,000, the measured layout
  pliant demo --hours 4.2 --growth 1000000 --json
  pliant demo --trace ../shared/traces/parsplice/d1M/rank4.csv.gz
  pliant demo --trace ../shared/traces/parsplice/d100K/rank4.csv.gz --hours 1

With --trace, the recorded reads and writes are replayed on the trace's own clock (the whole
trace, or its first --hours), the growth delay and temperature come from the ps-config.xml beside
the trace, and efficiency is the time the unlimited cache took to replay it over the time each
policy took.")]
#[command(mut_arg("json", |a| a.help("Print one JSON object instead of the table")))]
#[command(mut_arg("seed", |a| a.help("Seed of the state process")))]
pub struct Args {
    /// Hours to run: of simulated wall-clock time on the model (default 2.5), of the trace's own
    /// clock with --trace (default: all of it).
    #[arg(long)]
    hours: Option<f64>,
    /// Growth delay in ps (ParSplice `<Delay>`): 100000 or 1000000 in the traced runs. Default:
    /// the trace's ps-config.xml, else 100000.
    #[arg(long)]
    growth: Option<f64>,
    /// WorkManagers (caches), each with --workers workers. Default: the measured policy runs'
    /// one (their 256 ranks on 8 nodes had one WorkManager); with --trace, 1.
    #[arg(long)]
    nodes: Option<u32>,
    /// Workers per WorkManager. Default: the measured runs' 251; with --trace, the traces' 27.
    #[arg(long)]
    workers: Option<u32>,
    /// Temperature relative to the traced runs' (1.0 = their `<Temperature>`, 700 K).
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    #[command(flatten)]
    rng: Seed,
    /// Effective penalty of a store read in seconds (fitted to a measured policy run on the
    /// model's former layout; see `pliant_parsplice::model::READ_LATENCY_SECONDS`).
    #[arg(long, value_name = "SECONDS")]
    miss_penalty: Option<f64>,
    /// Replay a real ParSplice trace (a WorkManager's: rank4.csv.gz) instead of the model.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Skip the sweep of fixed LRU sizes and two-phase thresholds that draws the
    /// efficiency–memory front (about halves the run time).
    #[arg(long)]
    no_front: bool,
    /// Run only these of the study's policies, by label (comma-separated, e.g. `auto,lru-100`);
    /// `unlimited`, every policy's baseline, always runs.
    #[arg(long, value_name = "LABELS", value_delimiter = ',')]
    only: Vec<String>,
    /// The efficiency `auto` keeps (of the unlimited cache's, in (0, 1]): the one number it is
    /// given; it derives its working-set window from it and the run.
    #[arg(long, value_name = "FRACTION", default_value_t = pliant_tier::auto::EFFICIENCY,
          value_parser = fraction)]
    auto_efficiency: f64,
    /// Where to write the HTML report and charts.
    #[arg(long, default_value = "pliant-report")]
    report: PathBuf,
    #[command(flatten)]
    output: Json,
}

impl Args {
    fn request(&self) -> study::Request {
        study::Request {
            trace: self.trace.clone(),
            hours: self.hours,
            growth: self.growth,
            nodes: self.nodes,
            workers: self.workers,
            temperature: self.temperature,
            seed: self.rng.seed,
            miss_penalty: self.miss_penalty,
        }
    }
}

/// A fraction in (0, 1].
fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("`{s}` is not a fraction in (0, 1], e.g. 0.96")),
    }
}

/// Runs `demo`.
pub fn run(a: &Args) -> Result<ExitCode> {
    let setup = study::prepare(&a.request())?;
    let workload = setup.workload;
    let mut warnings = setup.warnings();
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let study_policies = study::policies();
    for label in &a.only {
        if !study_policies.iter().any(|p| p.kind.label() == *label) {
            anyhow::bail!(
                "--only: no policy `{label}` in the study (it has {})",
                study_policies
                    .iter()
                    .map(|p| p.kind.label())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let study_policies: Vec<_> = study_policies
        .into_iter()
        .filter(|p| {
            let label = p.kind.label();
            a.only.is_empty() || label == "unlimited" || a.only.contains(&label)
        })
        .collect();
    let policies: Vec<_> = study_policies
        .iter()
        .map(|p| match p.kind {
            PolicyKind::Auto { .. } => PolicyKind::Auto {
                efficiency: a.auto_efficiency,
            },
            ref k => k.clone(),
        })
        .collect();
    let charted: Vec<String> = study_policies
        .iter()
        .filter(|p| p.charted)
        .map(|p| p.kind.label())
        .collect();
    let runs = study::runs(&policies, !a.no_front).len();
    let bar = indicatif::ProgressBar::new(1000).with_message(format!(
        "{runs} runs, {}",
        setup.replay.as_ref().map_or_else(
            || format!("{} h of ParSplice", workload.hours),
            |r| format!("replaying {} reads", r.coverage.reads)
        )
    ));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let t = std::time::Instant::now();
    let outcome = study::run_study(&setup, &policies, !a.no_front, &|f| {
        bar.set_position((f * 1000.0) as u64)
    })?;
    bar.finish_and_clear();
    let seconds = t.elapsed().as_secs_f64();
    let study::Outcome {
        rows,
        fixed,
        front_final,
        front_mean,
        ..
    } = &outcome;
    let undecided = study::undecided(rows);
    // Text mode prints this under the table it qualifies; JSON carries it with the others.
    if let Some(w) = &undecided {
        warnings.push(w.clone());
    }
    let header = Header::new(&setup, seconds);
    write_report(&a.report, &header, &warnings, &outcome, &charted)?;
    if a.output.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "hours": workload.hours,
                "growth_delay": workload.growth_delay,
                "growth_delay_from": setup.growth_from,
                "temperature": workload.temperature,
                "nodes": workload.nodes,
                "workers_per_node": workload.workers,
                "source": a.trace.as_ref().map_or("model".to_string(), |p| p.display().to_string()),
                "replay": setup.replay.as_ref().map(|r| &r.coverage),
                "warnings": warnings,
                "seconds": seconds,
                "policies": rows,
                "fixed": fixed,
                "front_final": front_final,
                "front_mean": front_mean,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}\n", header.text);
    println!(
        "{:<22} {:>10} {:>13} {:>10} {:^35} {:^26} {:>9}",
        "",
        "",
        "trajectory",
        "keys held",
        "memory, all WorkManagers",
        "% of unlimited's",
        "peak store"
    );
    println!(
        "{:<22} {:>10} {:>13} {:>10} {:>11} {:>11} {:>11} {:>8} {:>8} {:>8} {:>9}",
        "policy",
        "efficiency",
        "ps, at end",
        "at end",
        "final",
        "peak",
        "mean",
        "final",
        "peak",
        "mean",
        "reads/s"
    );
    for r in rows {
        let [
            policy,
            eff,
            trajectory,
            keys,
            fin,
            peak,
            mean,
            frac,
            peak_frac,
            mean_frac,
            store,
        ] = cells(r);
        println!(
            "{policy:<22} {eff:>10} {trajectory:>13} {keys:>10} {fin:>11} {peak:>11} {mean:>11} \
             {frac:>8} {peak_frac:>8} {mean_frac:>8} {store:>9}"
        );
    }
    if let Some(r) = rows.iter().find(|r| r.policy == "auto") {
        match (r.auto_armed_s, r.auto_window_s, r.auto_target_keys) {
            (Some(armed), Some(window), Some(keys)) => println!(
                "\nauto (WorkManager 0): left the opening regime at {armed:.0} s ({} regimes by \
                 the gap statistic) and trimmed to its working set from then on; at the end it \
                 kept the {keys} keys read in the last {window:.0} s, the window a {:.0}% \
                 efficiency objective allows at the misses' measured cost, or longer where the \
                 store reads its trims caused raised it.",
                r.auto_regimes.unwrap_or(0),
                100.0 * a.auto_efficiency
            ),
            _ => println!(
                "\nauto (WorkManager 0): the run never left its opening regime; it absorbed \
                 throughout."
            ),
        }
    }
    if let Some(r) = rows.iter().find(|r| r.policy == "auto")
        && !front_final.is_empty()
    {
        let gap = |g: Option<f64>| match g {
            Some(g) if g > 0.0 => format!("{:.1} points below it", 100.0 * g),
            Some(g) => format!("on or above it ({:+.1} points)", -100.0 * g),
            None => "below any fixed policy's memory".into(),
        };
        println!(
            "auto against the front of the fixed policies ({} runs): {} on final memory, {} on \
             mean memory.",
            fixed.len(),
            gap(r.below_front_final),
            gap(r.below_front_mean)
        );
    }
    if let Some(w) = &undecided {
        println!("\nwarning: {w}");
    }
    println!("\nreport: {}", a.report.join("index.html").display());
    Ok(ExitCode::SUCCESS)
}

/// What the run was, in a few lines for the table's header and the report.
struct Header {
    text: String,
}

impl Header {
    fn new(s: &study::Prepared, seconds: f64) -> Self {
        let w = &s.workload;
        let mut text = match &s.replay {
            Some(r) => {
                let c = &r.coverage;
                format!(
                    "ParSplice trace {}, replayed on its own clock: {} reads and {} writes of {} \
                     keys over {:.0} s ({:.2} h) of its {:.0} s, {} WorkManager{} × {} workers",
                    c.path.display(),
                    c.reads,
                    c.writes,
                    c.keys,
                    c.span_seconds,
                    c.span_seconds / 3600.0,
                    c.trace_seconds,
                    w.nodes,
                    if w.nodes == 1 { "" } else { "s" },
                    w.workers
                )
            }
            None => format!(
                "ParSplice model, {} h, {} WorkManager{} × {} workers",
                w.hours,
                w.nodes,
                if w.nodes == 1 { "" } else { "s" },
                w.workers
            ),
        };
        text.push_str(&format!(
            "\ngrowth delay {} ({}), temperature {}, {:.1} s",
            w.growth_delay, s.growth_from, s.temperature_from, seconds
        ));
        text.push_str(if s.replay.is_some() {
            "\nefficiency = time the unlimited cache took to replay the trace / time this policy took"
        } else {
            "\nefficiency = trajectory at the end / the unlimited cache's"
        });
        Self { text }
    }
}

/// The table's cells, shared by the text table and the HTML report.
fn cells(r: &study::Row) -> [String; 11] {
    let pct = |x: f64| format!("{:.2}%", 100.0 * x);
    [
        r.policy.clone(),
        format!("{:.1}%", 100.0 * r.efficiency),
        r.trajectory
            .map_or_else(|| "—".into(), |t| grouped(t.round() as u64)),
        grouped(r.keys_held),
        human(r.final_memory_bytes),
        human(r.peak_memory_bytes),
        human(r.mean_memory_bytes),
        pct(r.memory_fraction),
        pct(r.peak_fraction),
        pct(r.mean_fraction),
        format!("{:.0}", r.peak_store_reads_per_s),
    ]
}

/// `5,182,228`: digits in groups of three, as the measured runs' figures are quoted.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.50 GiB`: binary units, the ones sizes are given in (`--capacity 64MiB` showed as
/// "67.1 MB", a number the user never wrote).
pub fn human(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    match b {
        x if x >= KIB * KIB * KIB => format!("{:.2} GiB", x / (KIB * KIB * KIB)),
        x if x >= KIB * KIB => format!("{:.1} MiB", x / (KIB * KIB)),
        x if x >= KIB => format!("{:.1} KiB", x / KIB),
        x => format!("{x:.0} B"),
    }
}

fn write_report(
    dir: &Path,
    header: &Header,
    warnings: &[String],
    outcome: &study::Outcome,
    charted: &[String],
) -> Result<()> {
    let (reports, rows) = (&outcome.reports, &outcome.rows);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = &reports[0];
    let shown: Vec<&RunReport> = reports
        .iter()
        .filter(|r| charted.contains(&r.policy))
        .collect();
    // One line per shown policy, a point per tick.
    let lines = |f: &dyn Fn(&pliant_parsplice::Tick) -> f64| -> Vec<Series> {
        shown
            .iter()
            .map(|r| {
                Series::line(
                    r.policy.clone(),
                    r.ticks.iter().map(|k| (k.t / 3600.0, f(k))).collect(),
                )
            })
            .collect()
    };
    let eff = shown
        .iter()
        .map(|r| {
            Series::line(
                r.policy.clone(),
                study::efficiency_over_time(r, base)
                    .into_iter()
                    .map(|(t, e)| (t / 3600.0, 100.0 * e))
                    .collect(),
            )
        })
        .collect();
    let mem = lines(&|k| k.bytes as f64 / 1e6);
    let store = lines(&|k| k.store_reads_per_s);
    let reads = vec![Series::line(
        "reads/s (all WorkManagers)",
        base.ticks
            .iter()
            .map(|k| (k.t / 3600.0, k.reads as f64 / 10.0))
            .collect(),
    )];
    let charts = [
        (
            "efficiency",
            Chart {
                title: "Efficiency: trajectory relative to the unlimited cache (%)",
                x_label: "hours",
                y_label: "efficiency %",
                log_x: false,
                series: eff,
            },
        ),
        (
            "memory",
            Chart {
                title: "Cache memory, all WorkManagers (MB)",
                x_label: "hours",
                y_label: "MB",
                log_x: false,
                series: mem,
            },
        ),
        (
            "store",
            Chart {
                title: "Store reads per second (misses reaching the store)",
                x_label: "hours",
                y_label: "reads/s",
                log_x: false,
                series: store,
            },
        ),
        (
            "reads",
            Chart {
                title: "Workload: reads per second",
                x_label: "hours",
                y_label: "reads/s",
                log_x: false,
                series: reads,
            },
        ),
    ];
    let mut imgs = String::new();
    let mut charts = Vec::from(charts);
    if !outcome.front_final.is_empty() {
        charts.push(("front-final", front_chart(outcome, study::Measure::Final)));
        charts.push(("front-mean", front_chart(outcome, study::Measure::Mean)));
    }
    for (name, chart) in charts {
        let svg = format!("{name}.svg");
        draw(&dir.join(&svg), std::slice::from_ref(&chart))?;
        draw(
            &dir.join(format!("{name}.png")),
            std::slice::from_ref(&chart),
        )?;
        imgs.push_str(&format!("<img src=\"{svg}\" alt=\"{}\">\n", chart.title));
    }
    let mut table = String::from(
        "<tr><th>policy</th><th>efficiency</th><th>trajectory at the end, ps</th>\
         <th>keys held at the end</th><th>final memory</th><th>peak memory</th>\
         <th>mean memory</th><th>final, % of unlimited</th><th>peak, % of unlimited</th>\
         <th>mean, % of unlimited</th><th>peak store reads/s</th></tr>\n",
    );
    for r in rows {
        let cells: String = cells(r).iter().map(|c| format!("<td>{c}</td>")).collect();
        table.push_str(&format!("<tr>{cells}</tr>\n"));
    }
    let escape = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let about = escape(&header.text).replace('\n', "<br>");
    let warned: String = warnings
        .iter()
        .map(|w| format!("<p><strong>warning:</strong> {}</p>", escape(w)))
        .collect();
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Pliant: ParSplice cache policies</title>\
         <style>body{{font-family:sans-serif;max-width:1040px;margin:2em auto}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}\
         td:first-child{{text-align:left}}img{{width:100%;margin:1em 0}}</style></head><body>\
         <h1>ParSplice cache policies</h1><p>{about}</p>{warned}<p>Memory = bytes held by all WorkManager \
         caches together: at the end, at the most at one instant, and averaged over the run.</p><table>{table}</table>{imgs}</body></html>\n"
    );
    std::fs::write(dir.join("index.html"), html)
        .with_context(|| format!("writing {}", dir.join("index.html").display()))?;
    Ok(())
}

/// Efficiency over memory (`measure`, % of the unlimited cache's, log scale): every fixed policy
/// run, their Pareto front, and the study's other policies (`auto`) as points of their own.
fn front_chart(o: &study::Outcome, measure: study::Measure) -> Chart<'static> {
    let pt = |r: &study::Row| (100.0 * measure.of(r).max(1e-6), 100.0 * r.efficiency);
    let front = match measure {
        study::Measure::Final => &o.front_final,
        study::Measure::Mean => &o.front_mean,
    };
    let mut series = vec![
        Series::dots("fixed policies", o.fixed.iter().map(pt).collect()),
        Series::line(
            "front",
            front
                .iter()
                .map(|p| (100.0 * p.memory.max(1e-6), 100.0 * p.efficiency))
                .collect(),
        ),
    ];
    let is_fixed = |r: &study::Row| o.fixed.iter().any(|f| f.policy == r.policy);
    for r in o.rows.iter().filter(|r| !is_fixed(r)) {
        series.push(Series::dots(r.policy.clone(), vec![pt(r)]));
    }
    Chart {
        title: match measure {
            study::Measure::Final => "Efficiency over final memory: fixed policies and their front",
            study::Measure::Mean => "Efficiency over mean memory: fixed policies and their front",
        },
        x_label: "memory, % of the unlimited cache's (log)",
        y_label: "efficiency %",
        log_x: true,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::grouped;

    #[test]
    fn grouped_puts_a_comma_every_three_digits() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(5_182_228), "5,182,228");
        assert_eq!(grouped(100_000), "100,000");
    }
}
