//! `pliant docs`: write the command-line reference (`docs/cli/`) from clap's own description of
//! the commands, so the flag tables the guides point to are `--help`'s and cannot drift.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli_docs::{self, MARKER};

/// Arguments of `docs`.
#[derive(clap::Args)]
#[command(
    after_help = "Example (from the repository root, after changing a command's flags):
  cargo run --release -- docs"
)]
pub struct Args {
    /// Directory to write the pages to (one Markdown file per command, and index.md). Generated
    /// pages of commands that no longer exist are removed; other files are left alone.
    #[arg(long, value_name = "DIR", default_value = "docs/cli")]
    out: PathBuf,
}

/// Runs `docs`.
pub fn run(a: &Args) -> Result<ExitCode> {
    let pages = cli_docs::pages(crate::Cli::command());
    std::fs::create_dir_all(&a.out).with_context(|| format!("{}", a.out.display()))?;
    for stale in generated_files(&a.out)? {
        let name = stale.file_name().map(|n| n.to_string_lossy().into_owned());
        if !pages.iter().any(|p| Some(&p.name) == name.as_ref()) {
            std::fs::remove_file(&stale).with_context(|| format!("{}", stale.display()))?;
            eprintln!("removed {}", stale.display());
        }
    }
    for p in &pages {
        let path = a.out.join(&p.name);
        std::fs::write(&path, &p.text).with_context(|| format!("{}", path.display()))?;
    }
    eprintln!("wrote {} pages to {}", pages.len(), a.out.display());
    Ok(ExitCode::SUCCESS)
}

/// The Markdown files in `dir` that an earlier `pliant docs` wrote (they start with [`MARKER`]).
fn generated_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md")
            && std::fs::read_to_string(&path).is_ok_and(|t| t.starts_with(MARKER))
        {
            out.push(path);
        }
    }
    Ok(out)
}
