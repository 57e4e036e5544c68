//! `pliant policy demo`: the shipped policies on a built-in scenario, with their decisions.
//!
//! It shows what each shipped
//! policy decides, tick by tick, and what acting on those decisions does to the system.

use std::process::ExitCode;

use super::args::Json;
use anyhow::Result;
use pliant_policy::{Engine, Metrics, ParamValue, PolicySource, ServerId, shipped};
use serde::Serialize;

/// Arguments of `demo`.
#[derive(clap::Args)]
#[command(mut_arg("json", |a| a.help("Print one JSON object instead of tables")))]
pub struct Args {
    /// Decision intervals to simulate.
    #[arg(long, default_value_t = 12)]
    ticks: u32,
    #[command(flatten)]
    output: Json,
}

#[derive(Serialize)]
struct CacheTick {
    tick: u32,
    keys_before: f64,
    when: bool,
    howmuch: Option<f64>,
    keys_after: f64,
}

#[derive(Serialize)]
struct SpillTick {
    tick: u32,
    loads: Vec<f64>,
    when: bool,
    moved_to: Option<String>,
    amount: f64,
}

#[derive(Serialize)]
struct FanTick {
    tick: u32,
    points: usize,
    when: bool,
    suggested_keys: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    cache: Vec<(String, Vec<CacheTick>)>,
    spill: Vec<SpillTick>,
    fan: Vec<FanTick>,
}

fn policy(name: &str) -> Result<PolicySource> {
    shipped::get(name).ok_or_else(|| anyhow::anyhow!("shipped policy {name} missing"))
}

/// A cache that gains 30,000 new keys per tick (a ParSplice run exploring new states), trimmed
/// whenever the policy says so.
fn cache_run(name: &str, params: &[(&str, f64)], ticks: u32) -> Result<Vec<CacheTick>> {
    let mut m = Metrics::new(0);
    m.set(0, "keys", 0.0);
    let mut e = Engine::in_memory(m);
    e.set_params(
        params
            .iter()
            .map(|(k, v)| (k.to_string(), ParamValue::Num(*v)))
            .collect(),
    );
    e.install(policy(name)?)?;
    let mut keys = 0.0;
    let mut out = Vec::new();
    for tick in 1..=ticks {
        keys += 30_000.0;
        e.metrics_mut().set(0, "keys", keys);
        let d = e.decide()?;
        let howmuch = d.howmuch.and_then(|h| h.amount());
        let before = keys;
        if let (true, Some(n)) = (d.when, howmuch) {
            keys = keys.min(n);
        }
        out.push(CacheTick {
            tick,
            keys_before: before,
            when: d.when,
            howmuch,
            keys_after: keys,
        });
    }
    Ok(out)
}

/// Four metadata servers, server 1 hot; greedy spill moves load to its neighbour.
fn spill_run(ticks: u32) -> Result<Vec<SpillTick>> {
    let mut loads = [80.0, 20.0, 20.0, 20.0];
    let mut m = Metrics::new(1);
    for (id, l) in (1..).zip(loads) {
        m.set(id, "req_rate", l);
    }
    let mut e = Engine::in_memory(m);
    e.install(policy("cephfs-greedy-spill")?)?;
    let mut out = Vec::new();
    for tick in 1..=ticks {
        for (id, l) in (1..).zip(loads) {
            e.metrics_mut().set(id, "req_rate", l);
        }
        let d = e.decide()?;
        let mut moved_to = None;
        let mut amount = 0.0;
        for (to, x) in d.where_.iter().flatten() {
            if let ServerId::Num(i) = to {
                let i = usize::try_from(*i - 1).unwrap_or(0);
                loads[0] -= x;
                loads[i] += x;
                moved_to = Some(to.to_string());
                amount += x;
            }
        }
        out.push(SpillTick {
            tick,
            loads: loads.to_vec(),
            when: d.when,
            moved_to,
            amount,
        });
    }
    Ok(out)
}

/// Accesses that dwell in one superbasin of 500 keys for three ticks, then move on for good.
fn fan_run(ticks: u32) -> Result<Vec<FanTick>> {
    let mut e = Engine::in_memory(Metrics::new(0));
    e.install(policy("regime-fan")?)?;
    let mut out = Vec::new();
    let mut t = 0.0;
    for tick in 1..=ticks {
        let basin = f64::from((tick - 1) / 3) * 500.0;
        for i in 0..2000u32 {
            // Sweeps down through the basin's keys: one widening fan per basin.
            e.timeseries().push(t, basin + f64::from(499 - i % 500));
            t += 1.0;
        }
        let d = e.decide()?;
        out.push(FanTick {
            tick,
            points: e.timeseries().len(),
            when: d.when,
            suggested_keys: d.howmuch.and_then(|h| h.amount()),
        });
    }
    Ok(out)
}

/// Runs the demo.
pub fn run(a: &Args) -> Result<ExitCode> {
    let report = Report {
        cache: vec![
            (
                "parsplice-absorb-trim (absorb 100000, target 1000)".into(),
                cache_run(
                    "parsplice-absorb-trim",
                    &[("absorb", 100_000.0), ("target", 1000.0)],
                    a.ticks,
                )?,
            ),
            (
                "static-limit (limit 100000)".into(),
                cache_run("static-limit", &[("limit", 100_000.0)], a.ticks)?,
            ),
        ],
        spill: spill_run(a.ticks)?,
        fan: fan_run(a.ticks)?,
    };
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("Pliant demo: shipped policies deciding over a built-in scenario\n");
    println!(
        "1. Cache trimming: a cache gains 30,000 keys per tick; trims apply when `when` holds."
    );
    for (name, ticks) in &report.cache {
        println!("\n   {name}");
        println!("   tick   keys before  when   howmuch   keys after");
        for c in ticks {
            println!(
                "   {:>4}  {:>12}  {:<5}  {:>8}  {:>11}",
                c.tick,
                c.keys_before,
                c.when,
                c.howmuch.map_or("-".into(), |h| h.to_string()),
                c.keys_after
            );
        }
    }
    println!(
        "\n2. cephfs-greedy-spill on 4 servers, server 1 hot: spills after 3 overloaded ticks."
    );
    println!("   tick  when   moved        loads after");
    for s in &report.spill {
        println!(
            "   {:>4}  {:<5}  {:<11}  {:?}",
            s.tick,
            s.when,
            s.moved_to
                .as_ref()
                .map_or("-".into(), |t| format!("{} -> {t}", s.amount)),
            s.loads
        );
    }
    println!("\n3. regime-fan over key accesses: a new superbasin every 3 ticks.");
    println!("   tick  points  regimes>=2  suggested cache (keys)");
    for f in &report.fan {
        println!(
            "   {:>4}  {:>6}  {:<10}  {}",
            f.tick,
            f.points,
            f.when,
            f.suggested_keys.map_or("-".into(), |k| k.to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}
