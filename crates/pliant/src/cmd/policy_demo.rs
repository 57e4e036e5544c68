//! `pliant policy demo`: the shipped policies on built-in scenarios, with their decisions, tick
//! by tick (the scenarios are `pliant_policy::scenarios`).

use std::process::ExitCode;

use super::args::Json;
use anyhow::Result;
use pliant_policy::scenarios;

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

/// Runs the demo.
pub fn run(a: &Args) -> Result<ExitCode> {
    let report = scenarios::run(a.ticks)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("Pliant demo: shipped policies deciding over a built-in scenario\n");
    println!(
        "1. Cache trimming: a cache gains {} keys per tick; trims apply when `when` holds.",
        scenarios::KEYS_PER_TICK
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
