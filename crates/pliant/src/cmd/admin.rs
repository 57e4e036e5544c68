//! `pliant admin ADDR …`: a running node's policy and counters.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use pliant_policy::PolicySource;
use pliant_proto::client::Client;
use pliant_proto::frame::Frame;

use super::args::{Json, PolicyParams};

/// Manage a running `pliant serve` node: load, roll back and inspect its live policy, read its
/// counters. Policy files are read here and their source sent: the node never opens a path a
/// client names.
///
/// Examples:
///   pliant admin 127.0.0.1:6479 stats
///   pliant admin 127.0.0.1:6479 policy load my-policy.lua --param limit=5000
///   pliant admin 127.0.0.1:6479 policy load auto --param efficiency=0.96
///   pliant admin 127.0.0.1:6479 policy status
///   pliant admin 127.0.0.1:6479 policy log 20
///   pliant admin 127.0.0.1:6479 policy rollback
///   pliant admin 127.0.0.1:7000 balancer load cephfs-greedy-spill --param min_rebalance=0.2
///   pliant admin 127.0.0.1:7000 balancer status
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The node's address.
    #[arg(value_name = "ADDR:PORT")]
    addr: String,
    /// The node's password (as redis-cli's -a); also read from PLIANT_PASSWORD.
    #[arg(short = 'a', long = "pass", value_name = "PASSWORD")]
    password: Option<String>,
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// The node's counters (memory tier, store, keyspace, clients).
    Stats(Json),
    /// The node's live policy.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// The cluster's balancer (Mantle): loading one through any node swaps it on every node.
    #[command(subcommand)]
    Balancer(BalancerCmd),
}

#[derive(clap::Subcommand)]
enum BalancerCmd {
    /// Set the cluster's balancer policy (a file, chunk files or a directory of them, or a
    /// shipped name): checked on the node asked, then kept in the coordination store, and every
    /// node installs it at its next decision (one that fails to install there keeps the one
    /// before, and says so in its status).
    Load {
        /// The policy.
        #[arg(required = true, num_args = 1.., value_name = "FILE|NAME")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        params: PolicyParams,
    },
    /// Make the policy before the current one the cluster's again.
    Rollback,
    /// This node's balancer: the policy and version it runs, its decisions and moves (JSON).
    Status,
    /// This node's newest balancer decisions, one JSON object a line.
    Log {
        /// How many.
        #[arg(default_value_t = 10)]
        n: u64,
    },
}

#[derive(clap::Subcommand)]
enum PolicyCmd {
    /// Install a policy (a file, chunk files, a shipped name, or `auto`, the built-in regime
    /// detection, with `--param efficiency=0.96`); the running one stays if it fails to install.
    Load {
        /// The policy.
        #[arg(required = true, num_args = 1.., value_name = "FILE|NAME")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        params: PolicyParams,
    },
    /// Switch back to the policy that ran before.
    Rollback,
    /// The running policy, its versions and its latest decision (JSON).
    Status,
    /// The newest entries of the decision log, one JSON object a line.
    Log {
        /// How many.
        #[arg(default_value_t = 10)]
        n: u64,
    },
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let password = a
        .password
        .clone()
        .or_else(|| std::env::var("PLIANT_PASSWORD").ok());
    let mut c = Client::connect(&a.addr, password.as_deref())?;
    let reply = match &a.what {
        What::Stats(json) => {
            let text = text(c.call(&[b"PLIANT.STATS"])?)?;
            let v: serde_json::Value = serde_json::from_str(&text).context("PLIANT.STATS")?;
            if json.json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if let Some(o) = v.as_object() {
                for (k, v) in o {
                    println!("{k:<16} {v}");
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        What::Policy(PolicyCmd::Load { files, params }) => {
            let mut args: Vec<Vec<u8>> = vec![b"PLIANT.POLICY".to_vec(), b"LOAD".to_vec()];
            if matches!(files.as_slice(), [f] if f.as_os_str() == pliant_kv::policy::AUTO) {
                // The built-in policy: the node has it, nothing to send but its parameters.
                args.push(pliant_kv::policy::AUTO.as_bytes().to_vec());
            } else {
                let source = PolicySource::resolve(files)?;
                let code = match &source.style {
                    pliant_policy::Style::Functions(chunk) => chunk.code.clone(),
                    _ => bail!(
                        "{}: only function-style policies (one .lua file) can be sent to a node yet",
                        source.name
                    ),
                };
                args.push(source.name.clone().into_bytes());
                args.push(code.into_bytes());
            }
            for (k, v) in &params.params {
                args.push(format!("{k}={}", super::args::param_text(v)).into_bytes());
            }
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            c.call(&refs)?
        }
        What::Balancer(BalancerCmd::Load { files, params }) => {
            let source = PolicySource::resolve(files)?;
            let params: pliant_policy::Params = params.params.iter().cloned().collect();
            let record = pliant_cluster::balancer::record_of(&source, &params);
            let json = serde_json::to_string(&record)?;
            c.call(&[b"PLIANT.BALANCER", b"LOAD", json.as_bytes()])?
        }
        What::Balancer(BalancerCmd::Rollback) => c.call(&[b"PLIANT.BALANCER", b"ROLLBACK"])?,
        What::Balancer(BalancerCmd::Status) => c.call(&[b"PLIANT.BALANCER", b"STATUS"])?,
        What::Balancer(BalancerCmd::Log { n }) => {
            c.call(&[b"PLIANT.BALANCER", b"LOG", n.to_string().as_bytes()])?
        }
        What::Policy(PolicyCmd::Rollback) => c.call(&[b"PLIANT.POLICY", b"ROLLBACK"])?,
        What::Policy(PolicyCmd::Status) => c.call(&[b"PLIANT.POLICY", b"STATUS"])?,
        What::Policy(PolicyCmd::Log { n }) => {
            c.call(&[b"PLIANT.POLICY", b"LOG", n.to_string().as_bytes()])?
        }
    };
    match reply {
        Frame::Array(items) => {
            for i in items {
                println!("{}", text(i)?);
            }
        }
        other => println!("{}", text(other)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// A reply's text; an error reply is this command's error.
fn text(f: Frame) -> anyhow::Result<String> {
    match f {
        Frame::Simple(s) => Ok(s),
        Frame::Bulk(b) | Frame::Verbatim(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Frame::Error(e) => bail!("{e}"),
        Frame::Integer(n) => Ok(n.to_string()),
        other => Ok(format!("{other:?}")),
    }
}
