//! `pliant`: the command-line front end. Thin by design: argument parsing, file I/O and output
//! formatting live here; every capability lives in a library crate.

/// The allocator: mimalloc, measured against glibc's in one sitting (docs/benchmarks.md,
/// `allocator-30j`): group-committed SETs under `--durability always` 0–5% more a second, a
/// slot move about 15% less CPU a key (with transparent huge pages off for servers: see
/// `main`), the simulator unchanged.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli_docs;
mod cmd;
mod plot;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Pliant: a programmable, elastic caching layer for HPC data services.
///
/// Start with `pliant demo`. Every command has --help with examples.
#[derive(Parser)]
#[command(name = "pliant", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: a ParSplice run through every cache policy of the studies plus `auto`,
    /// with efficiency, memory, and an HTML report in ./pliant-report/.
    Demo(cmd::demo::Args),
    /// Write, check and run Mantle-style Lua policies offline.
    #[command(subcommand)]
    Policy(cmd::policy::Command),
    /// Replay a trace through cache configurations (one pass, in parallel), optionally with a
    /// policy resizing the caches.
    Sim(cmd::sim::Args),
    /// The ParSplice workload model: write its trace, calibrate it, compare with measured runs.
    #[command(subcommand)]
    Parsplice(cmd::parsplice::Command),
    /// Regimes of a run (k-means over reads/s) and the fan detector's superbasins, with the
    /// cache thresholds they suggest.
    Regimes(cmd::regimes::Args),
    /// Elastic rescaling: plan a rescaling, emulate the paper's scenarios, compare with the
    /// optimum.
    #[command(subcommand)]
    Scale(cmd::scale::Command),
    /// Performance benchmarks (numbers reported in docs/benchmarks.md).
    #[command(subcommand)]
    Bench(cmd::bench::Command),
    /// Run a cache node that speaks the Redis protocol, over a persistent store.
    Serve(Box<cmd::serve::Args>),
    /// A cluster of nodes speaking Redis Cluster's protocol: start one here, show one.
    #[command(subcommand)]
    Cluster(cmd::cluster::Command),
    /// Manage a running node: its live policy and counters.
    Admin(cmd::admin::Args),
    /// Replay a trace against a Redis-protocol server (Pliant or Redis).
    Replay(cmd::replay::Args),
    /// Trace statistics, conversion to oracleGeneral, and synthetic traces.
    #[command(subcommand)]
    Trace(cmd::trace::Command),
    /// A transparent write-back cache (FUSE) over a slow directory, with hints and counters.
    #[command(subcommand)]
    Fs(cmd::fs::Command),
    /// DataWarp-style job directives (`#DW jobdw type=cache …`): set a job's cache up, tear it
    /// down (what Slurm's burst_buffer.lua calls).
    #[command(subcommand)]
    Job(cmd::fs::JobCommand),
    /// Write the Markdown reference of every command and flag (docs/cli/), from this --help.
    Docs(cmd::docs::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // fuser warns when its own unmount at exit finds the mount already gone (`pliant fs
    // unmount` unmounted it): expected, so not worth a line in every mount's log.
    let default = match cli.verbose {
        0 => "warn,fuser=error",
        1 => "info,fuser=error",
        2 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if serves(&cli.command) {
        // mimalloc asks for transparent huge pages on its memory: a node whose heap grows (a
        // slot move's target) then spends a quarter of its CPU zeroing 2 MiB pages
        // (`clear_page_erms` in a profile of a commission), and the move costs more CPU a key
        // than under glibc's allocator instead of less. Off for servers (and the processes they
        // start), before they have allocated to speak of; kept for the commands that replay
        // and model in large tables, which huge pages make faster. Where the kernel refuses,
        // pages stay as they were.
        #[cfg(target_os = "linux")]
        let _ = nix::sys::prctl::set_thp_disable(true);
    } else {
        sigpipe::default();
    }
    let result = match cli.command {
        Command::Demo(args) => cmd::demo::run(&args),
        Command::Policy(c) => cmd::policy::run(c),
        Command::Sim(a) => cmd::sim::run(&a),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Regimes(a) => cmd::regimes::run(&a),
        Command::Parsplice(c) => cmd::parsplice::run(c),
        Command::Scale(c) => cmd::scale::run(c),
        Command::Trace(c) => cmd::trace::run(c),
        Command::Serve(a) => cmd::serve::run(&a),
        Command::Admin(a) => cmd::admin::run(&a),
        Command::Cluster(c) => cmd::cluster::run(c),
        Command::Replay(a) => cmd::replay::run(&a),
        Command::Fs(c) => cmd::fs::run(c),
        Command::Job(c) => cmd::fs::run_job(c),
        Command::Docs(a) => cmd::docs::run(&a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", cmd::chain(&e));
            ExitCode::FAILURE
        }
    }
}

mod sigpipe {
    #![allow(unsafe_code)]

    /// Rust starts every program with SIGPIPE ignored, so `println!` into a pipe whose reader
    /// has gone (`pliant trace stats … | head -1`) panics. A command that prints ends there as
    /// `cat` does; a server keeps ignoring it, so a client that hangs up costs one connection an
    /// error, not the whole server.
    pub fn default() {
        use nix::sys::signal::{SigHandler, Signal, signal};
        // SAFETY: called first thing in main, before any thread exists; SIG_DFL installs no
        // handler of ours.
        let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    }
}

/// Whether a command serves others (sockets, a FUSE mount) rather than printing a result.
fn serves(command: &Command) -> bool {
    matches!(
        command,
        Command::Serve(_)
            | Command::Cluster(cmd::cluster::Command::Up(_))
            | Command::Fs(cmd::fs::Command::Mount(_))
            | Command::Fs(cmd::fs::Command::Server(_))
            | Command::Bench(cmd::bench::Command::SlowFs(_))
    )
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command's arguments are consistent (ids, flattened options, help overrides), which
    /// clap otherwise checks only when that command runs.
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
