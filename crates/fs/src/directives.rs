//! Reads the `#DW` lines of a Slurm batch script that ask for a per-job Pliant cache, in the
//! syntax Cray DataWarp defined for its transparent cache, so a script written for DataWarp's
//! `type=cache` runs under Pliant unchanged:
//!
//! ```text
//! #!/bin/bash
//! #SBATCH --nodes=4
//! #DW jobdw type=cache access_mode=striped(MFS=16GiB) pfs=/lus/project/run42 \
//! #DW       capacity=10TiB write_window_multiplier=10 write_window_length=86400
//! #DW preload path=/lus/project/run42/input
//! srun ./simulate --in "$DW_JOB_STRIPED_CACHE/input" --out "$DW_JOB_STRIPED_CACHE/output"
//! ```
//!
//! # Where directives are read
//!
//! As Slurm reads them (`_xlate_batch` in both of its burst-buffer plugins,
//! `src/plugins/burst_buffer/{lua,datawarp}/`): lines are scanned from the top, empty lines are
//! skipped, and the scan stops at the first line that does not start with `#`, so directives
//! live in the leading comment block next to `#SBATCH`. A `#DW` line after the first command,
//! or an indented one, is an ordinary shell comment; Slurm ignores it and so does this parser
//! (a script may well write another job script through a here-document).
//!
//! A line ending in `\` continues on the next line, which starts with `#DW` again (Slurm joins
//! such lines; the DataWarp transparent-cache paper shows the same form). Slurm silently drops
//! a continuation that is followed by anything else; here that is an error, as is a
//! continuation at the end of the file. Empty lines between the two halves are skipped, as
//! Slurm skips them. A token cannot be split across lines.
//!
//! `#BB` lines are Slurm's own burst-buffer directives (persistent buffers, in Slurm's DataWarp
//! plugin) and are rejected as unsupported; `#BB_LUA`, the default marker of Slurm's Lua plugin,
//! is an ordinary comment.
//!
//! # What is accepted
//!
//! `#DW jobdw` takes whitespace-separated `key=value` options, at most once each:
//!
//! - `type=cache` (required): DataWarp's transparent cache. `type=scratch` is refused.
//! - `access_mode=striped` (required), optionally with options in parentheses, comma-separated:
//!   `MFS=size`, the maximum file size (DataWarp's guard against runaway writes), and
//!   `client_cache`, which asked DataWarp's DVS for client-side caching and is recorded in
//!   [`CacheDirective::extra`]. `private` and `ldbal` are refused.
//! - `capacity=size` (required): how much the cache holds.
//! - `pfs=/absolute/path` (required): the parallel-file-system directory the cache fronts.
//! - `write_window_multiplier=n` and `write_window_length=seconds`: at most `n × capacity`
//!   bytes written per window; DataWarp's defaults are 10 and 86400 when they are absent.
//! - `pool=name`: a burst-buffer pool, recorded in [`CacheDirective::extra`]. Slurm's Lua
//!   plugin, configured with `Directive=DW`, rejects a directive line that has `capacity=` but
//!   no `pool=` (`_parse_capacity`).
//!
//! `#DW preload path=/absolute/path` is Pliant's own: a file or directory under `pfs` to read
//! into the cache before the job starts. `stage_in`, `stage_out`, `swap` and `persistentdw`
//! are refused.
//!
//! Sizes are what [`pliant_cache::Capacity`] reads in bytes (`4096`, `500MB`, `10G`, `10GiB`,
//! `1TiB`), greater than zero. `capacity` must be a whole number: Slurm reads a burst-buffer
//! capacity with `strtoull` and a unit suffix (`bb_get_size_num`), so `1.5TiB` would be
//! accounted as 1 byte, rounded up to one grain of its pool (NERSC lists this among its
//! burst-buffer known issues).
//!
//! # Sources
//!
//! - B. Landsteiner and D. Paul, "DataWarp Transparent Cache: Implementation, Challenges, and
//!   Early Experience", Cray User Group 2018 (LaTeX source in the GitHub repository
//!   `magicite/cug2018-pap119s1`): the four required options, `MFS` and `client_cache`, the
//!   write-window options and their defaults, `$DW_JOB_STRIPED_CACHE`, and a continued `#DW`
//!   line.
//! - Slurm, `src/plugins/burst_buffer/lua/burst_buffer_lua.c` and
//!   `src/plugins/burst_buffer/datawarp/burst_buffer_datawarp.c` (`_xlate_batch`,
//!   `_parse_bb_opts`, `_parse_capacity`) and `src/plugins/burst_buffer/common/
//!   burst_buffer_common.c` (`bb_get_size_num`); <https://slurm.schedmd.com/burst_buffer.html>.
//! - NERSC, "Burst Buffer", Known Issues
//!   (<https://www.nersc.gov/users/computational-systems/cori/burst-buffer/>).

use std::path::{Component, PathBuf};

use pliant_cache::Capacity;

/// What a job script's directives ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobDirectives {
    /// The cache, if the script has a `#DW jobdw type=cache`.
    pub cache: Option<CacheDirective>,
    /// `#DW preload` lines, in script order.
    pub preloads: Vec<PreloadDirective>,
}

impl JobDirectives {
    /// Checks what parsing cannot: that the cache's `pfs` is an existing directory and each
    /// preload's path exists, as this machine sees them (what `pliant job check` and `setup`
    /// run; `file` names the script in errors). A job whose `pfs` is missing would otherwise
    /// pass the check at submission and fail only once it is scheduled.
    pub fn check_paths(&self, file: &str) -> Result<(), DirectiveError> {
        self.check_pfs(file)?;
        let cx = Cx { file };
        for p in &self.preloads {
            if let Err(e) = std::fs::symlink_metadata(&p.path) {
                return Err(cx.err(
                    p.line,
                    "#DW preload",
                    Some(&format!("path={}", p.path.display())),
                    Kind::PathNotFound,
                    e.to_string(),
                ));
            }
        }
        Ok(())
    }

    /// The part of [`check_paths`](Self::check_paths) about the cache's `pfs` alone: for root
    /// setting up another user's job, which must not stat the preload paths (see
    /// [`crate::job::setup`]).
    pub fn check_pfs(&self, file: &str) -> Result<(), DirectiveError> {
        let cx = Cx { file };
        let Some(c) = &self.cache else {
            return Ok(());
        };
        let param = format!("pfs={}", c.pfs.display());
        match std::fs::metadata(&c.pfs) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(cx.err(
                    c.line,
                    "#DW jobdw",
                    Some(&param),
                    Kind::PathNotFound,
                    "not a directory: pfs names the directory the cache fronts",
                ));
            }
            Err(e) => {
                return Err(cx.err(
                    c.line,
                    "#DW jobdw",
                    Some(&param),
                    Kind::PathNotFound,
                    format!("{e}: pfs names the directory the cache fronts, which must exist"),
                ));
            }
        }
        Ok(())
    }
}

/// A `#DW jobdw type=cache` directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDirective {
    /// The 1-based line where the directive starts.
    pub line: usize,
    /// The parallel-file-system directory the cache fronts (`pfs=`), absolute.
    pub pfs: PathBuf,
    /// Bytes the cache holds (`capacity=`).
    pub capacity_bytes: u64,
    /// How files are laid out (`access_mode=`).
    pub access_mode: AccessMode,
    /// Largest file the job may write (`access_mode=striped(MFS=...)`).
    pub max_file_size: Option<u64>,
    /// At most this many times `capacity_bytes` written per window (`write_window_multiplier=`;
    /// DataWarp's default is 10).
    pub write_window_multiplier: Option<u32>,
    /// The window's length in seconds (`write_window_length=`; DataWarp's default is 86400).
    pub write_window_length_secs: Option<u64>,
    /// DataWarp options accepted but left to the caller, in script order: `("pool", name)` and
    /// `("client_cache", "")` (from `access_mode=striped(client_cache)`).
    pub extra: Vec<(String, String)>,
}

/// DataWarp's `access_mode`. Only `striped` is provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessMode {
    /// One namespace shared by all of the job's nodes.
    Striped,
}

/// A `#DW preload path=...` directive: read this file or directory into the cache before the
/// job starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreloadDirective {
    /// The 1-based line of the directive.
    pub line: usize,
    /// An absolute path inside the cache's `pfs`.
    pub path: PathBuf,
}

/// Why a job script's directives were refused. Its text always names the file, the line, the
/// directive and, when one is at fault, the parameter:
/// `job.sh:3: #DW jobdw: capacity=12XB: expected a size such as 10GiB`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{file}:{line}: {directive}: {}{message}",
    .param.as_ref().map(|p| format!("{p}: ")).unwrap_or_default()
)]
#[non_exhaustive]
pub struct DirectiveError {
    /// The script's name as the caller gave it.
    pub file: String,
    /// The 1-based line at fault.
    pub line: usize,
    /// The directive, e.g. `#DW jobdw`.
    pub directive: String,
    /// The parameter at fault as written (`capacity=12XB`), or the name of a missing one.
    pub param: Option<String>,
    /// What kind of mistake it is.
    pub kind: DirectiveErrorKind,
    /// What is wrong and, where it helps, what to write instead.
    pub message: String,
}

/// The kinds of [`DirectiveError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirectiveErrorKind {
    /// Not the shape of a directive: no `key=value`, unbalanced parentheses, an empty `#DW`.
    Syntax,
    /// A `\` continuation that nothing continues.
    Continuation,
    /// A `#DW` command nobody defines.
    UnknownCommand,
    /// Something DataWarp or Slurm defines that Pliant does not provide.
    Unsupported,
    /// An option the directive does not take.
    UnknownOption,
    /// An option given twice.
    DuplicateOption,
    /// A required option left out.
    MissingOption,
    /// An option whose value is malformed or out of range.
    InvalidValue,
    /// A second `#DW jobdw`.
    SecondCache,
    /// A preload outside the cache's `pfs`.
    PreloadOutsidePfs,
    /// A preload in a script without a cache.
    PreloadWithoutCache,
    /// A path the directive names that is not there (or not a directory where one is needed).
    PathNotFound,
}

use DirectiveErrorKind as Kind;

/// Reads the directives of the batch script `text`; `file` names it in errors.
pub fn parse_script(file: &str, text: &str) -> Result<JobDirectives, DirectiveError> {
    let cx = Cx { file };
    let mut out = JobDirectives::default();
    for d in cx.collect(text)? {
        let Some(command) = d.toks.first() else {
            return Err(cx.err(
                d.line,
                d.prefix,
                None,
                Kind::Syntax,
                "empty directive; expected #DW jobdw type=cache ... or #DW preload path=...",
            ));
        };
        let label = format!("{} {}", d.prefix, command.text);
        if d.prefix == "#BB" {
            return Err(cx.err(
                d.line,
                &label,
                None,
                Kind::Unsupported,
                "not supported: #BB lines are Slurm's own burst-buffer directives (persistent \
                 buffers); Pliant reads #DW jobdw and #DW preload",
            ));
        }
        match command.text.as_str() {
            "jobdw" => {
                if let Some(first) = &out.cache {
                    return Err(cx.err(
                        d.line,
                        &label,
                        None,
                        Kind::SecondCache,
                        format!(
                            "a second #DW jobdw; a job has one cache, requested at line {}",
                            first.line
                        ),
                    ));
                }
                out.cache = Some(cx.jobdw(&d, &label)?);
            }
            "preload" => out.preloads.push(cx.preload(&d, &label)?),
            other => {
                let why = match other {
                    "stage_in" => {
                        "Pliant reads a file in on its first use; to read files in before the \
                         job starts, write #DW preload path=<file or directory under pfs>"
                    }
                    "stage_out" => {
                        "with type=cache the job's writes reach the PFS by write-back, so there \
                         is nothing to stage out"
                    }
                    "swap" => "Pliant caches files; it provides no swap space",
                    "persistentdw" | "create_persistent" | "destroy_persistent" => {
                        "a Pliant cache lives and dies with its job; there are no persistent \
                         instances"
                    }
                    _ => {
                        return Err(cx.err(
                            d.line,
                            &label,
                            None,
                            Kind::UnknownCommand,
                            "unknown command; Pliant reads #DW jobdw and #DW preload",
                        ));
                    }
                };
                return Err(cx.err(
                    d.line,
                    &label,
                    None,
                    Kind::Unsupported,
                    format!("not supported: {why}"),
                ));
            }
        }
    }
    // Checked after every line is read: a preload may come before its jobdw.
    for p in &out.preloads {
        let param = format!("path={}", p.path.display());
        match &out.cache {
            None => {
                return Err(cx.err(
                    p.line,
                    "#DW preload",
                    Some(&param),
                    Kind::PreloadWithoutCache,
                    "there is no #DW jobdw type=cache to preload into",
                ));
            }
            Some(c) if !p.path.starts_with(&c.pfs) => {
                return Err(cx.err(
                    p.line,
                    "#DW preload",
                    Some(&param),
                    Kind::PreloadOutsidePfs,
                    format!(
                        "not inside the cache's pfs={} (line {})",
                        c.pfs.display(),
                        c.line
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

/// A directive after continuations are joined.
struct Directive {
    /// `#DW` or `#BB`.
    prefix: &'static str,
    /// Where it starts.
    line: usize,
    /// Its words, each with the line it is on, so errors point at the physical line.
    toks: Vec<Tok>,
}

struct Tok {
    text: String,
    line: usize,
}

struct Cx<'a> {
    file: &'a str,
}

impl Cx<'_> {
    fn err(
        &self,
        line: usize,
        directive: &str,
        param: Option<&str>,
        kind: Kind,
        message: impl Into<String>,
    ) -> DirectiveError {
        DirectiveError {
            file: self.file.to_string(),
            line,
            directive: directive.to_string(),
            param: param.map(str::to_string),
            kind,
            message: message.into(),
        }
    }

    /// The directives of the leading comment block, continuations joined.
    fn collect(&self, text: &str) -> Result<Vec<Directive>, DirectiveError> {
        let mut done = Vec::new();
        // A directive whose last line ended in `\`, and that line's number.
        let mut open: Option<(Directive, usize)> = None;
        let broken = |d: &Directive, at: usize, next: usize| {
            self.err(
                at,
                &label(d, ""),
                None,
                Kind::Continuation,
                format!(
                    "the line ends with \\ but line {next} does not start with {}, so it does \
                     not continue the directive",
                    d.prefix
                ),
            )
        };
        for (i, raw) in text.split('\n').enumerate() {
            let n = i + 1;
            if raw.is_empty() {
                continue;
            }
            if !raw.starts_with('#') {
                if let Some((d, at)) = &open {
                    return Err(broken(d, *at, n));
                }
                break;
            }
            let prefix = match directive_prefix(raw) {
                Prefix::Comment => {
                    if let Some((d, at)) = &open {
                        return Err(broken(d, *at, n));
                    }
                    continue;
                }
                Prefix::Glued => {
                    let word = raw.split_whitespace().next().unwrap_or(raw);
                    return Err(self.err(
                        n,
                        word,
                        None,
                        Kind::Syntax,
                        "expected a space after #DW",
                    ));
                }
                Prefix::Directive(p) => p,
            };
            let body = &raw[prefix.len()..];
            let (body, continues) = match body.strip_suffix('\\') {
                Some(b) => (b, true),
                None => (body, false),
            };
            let mut d = match open.take() {
                Some((d, _)) if d.prefix == prefix => d,
                Some((d, at)) => return Err(broken(&d, at, n)),
                None => Directive {
                    prefix,
                    line: n,
                    toks: Vec::new(),
                },
            };
            if !continues && body.trim_end().ends_with('\\') {
                return Err(self.err(
                    n,
                    &label(&d, body),
                    None,
                    Kind::Syntax,
                    "a continuation \\ must be the last character of its line (it is followed \
                     by whitespace)",
                ));
            }
            if let Err(bad) = tokenize(body, n, &mut d.toks) {
                return Err(self.err(
                    n,
                    &label(&d, body),
                    Some(&bad),
                    Kind::Syntax,
                    "unbalanced parentheses",
                ));
            }
            if continues {
                open = Some((d, n));
            } else {
                done.push(d);
            }
        }
        if let Some((d, at)) = open {
            return Err(self.err(
                at,
                &label(&d, ""),
                None,
                Kind::Continuation,
                "the line ends with \\ but the file ends",
            ));
        }
        Ok(done)
    }

    fn jobdw(&self, d: &Directive, label: &str) -> Result<CacheDirective, DirectiveError> {
        let opts = &d.toks[1..];
        let bad =
            |t: &Tok, kind, message: String| self.err(t.line, label, Some(&t.text), kind, message);
        // Read first so that a DataWarp scratch request is told that, not that its
        // scratch-only options are unknown.
        for t in opts {
            if let Some(v) = t.text.strip_prefix("type=") {
                match v {
                    "cache" => {}
                    "scratch" => {
                        return Err(bad(
                            t,
                            Kind::Unsupported,
                            "type=scratch is a DataWarp scratch allocation; Pliant provides \
                             type=cache only"
                                .into(),
                        ));
                    }
                    _ => {
                        return Err(bad(t, Kind::InvalidValue, "expected type=cache".into()));
                    }
                }
            }
        }
        let mut seen: Vec<(&str, usize)> = Vec::new();
        let mut access_mode = None;
        let mut capacity = None;
        let mut pfs = None;
        let mut max_file_size = None;
        let mut multiplier = None;
        let mut length = None;
        let mut extra = Vec::new();
        for t in opts {
            let (key, value) = key_value(t).map_err(|m| bad(t, Kind::Syntax, m))?;
            if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
                return Err(bad(
                    t,
                    Kind::DuplicateOption,
                    format!("{key} is already given on line {first}"),
                ));
            }
            seen.push((key, t.line));
            match key {
                "type" => {}
                "access_mode" => {
                    let m = access_mode_of(value).map_err(|(k, m)| bad(t, k, m))?;
                    access_mode = Some(AccessMode::Striped);
                    max_file_size = m.max_file_size;
                    if m.client_cache {
                        extra.push(("client_cache".to_string(), String::new()));
                    }
                }
                "capacity" => {
                    capacity = Some(capacity_of(value).map_err(|m| bad(t, Kind::InvalidValue, m))?);
                }
                "pfs" => pfs = Some(absolute(value).map_err(|m| bad(t, Kind::InvalidValue, m))?),
                "pool" if value.is_empty() => {
                    return Err(bad(t, Kind::InvalidValue, "expected a pool name".into()));
                }
                "pool" => extra.push(("pool".to_string(), value.to_string())),
                "write_window_multiplier" => {
                    multiplier = Some(positive::<u32>(value).ok_or_else(|| {
                        bad(
                            t,
                            Kind::InvalidValue,
                            "expected a whole number greater than zero, e.g. \
                             write_window_multiplier=10"
                                .into(),
                        )
                    })?);
                }
                "write_window_length" => {
                    length = Some(positive::<u64>(value).ok_or_else(|| {
                        bad(
                            t,
                            Kind::InvalidValue,
                            "expected a number of seconds greater than zero, e.g. \
                             write_window_length=86400"
                                .into(),
                        )
                    })?);
                }
                _ => {
                    return Err(bad(
                        t,
                        Kind::UnknownOption,
                        "unknown option; #DW jobdw type=cache takes type, access_mode, capacity, \
                         pfs, pool, write_window_multiplier and write_window_length"
                            .into(),
                    ));
                }
            }
        }
        let missing = |key: &str, message: &str| {
            self.err(d.line, label, Some(key), Kind::MissingOption, message)
        };
        if !seen.iter().any(|(k, _)| *k == "type") {
            return Err(missing("type", "required; write type=cache"));
        }
        let pfs = pfs.ok_or_else(|| {
            missing(
                "pfs",
                "required: the parallel-file-system directory to cache, e.g. pfs=/lus/project",
            )
        })?;
        let capacity_bytes = capacity.ok_or_else(|| {
            missing(
                "capacity",
                "required: how much the cache holds, e.g. capacity=10TiB",
            )
        })?;
        let access_mode = access_mode
            .ok_or_else(|| missing("access_mode", "required; write access_mode=striped"))?;
        Ok(CacheDirective {
            line: d.line,
            pfs,
            capacity_bytes,
            access_mode,
            max_file_size,
            write_window_multiplier: multiplier,
            write_window_length_secs: length,
            extra,
        })
    }

    fn preload(&self, d: &Directive, label: &str) -> Result<PreloadDirective, DirectiveError> {
        let mut path: Option<(PathBuf, usize)> = None;
        for t in &d.toks[1..] {
            let bad = |kind, message: String| self.err(t.line, label, Some(&t.text), kind, message);
            let (key, value) = key_value(t).map_err(|m| bad(Kind::Syntax, m))?;
            match key {
                "path" => {
                    if let Some((_, first)) = &path {
                        return Err(bad(
                            Kind::DuplicateOption,
                            format!(
                                "path is already given on line {first}; write one #DW preload \
                                 per path"
                            ),
                        ));
                    }
                    path = Some((
                        absolute(value).map_err(|m| bad(Kind::InvalidValue, m))?,
                        t.line,
                    ));
                }
                _ => {
                    return Err(bad(
                        Kind::UnknownOption,
                        "unknown option; #DW preload takes path".into(),
                    ));
                }
            }
        }
        let Some((path, _)) = path else {
            return Err(self.err(
                d.line,
                label,
                Some("path"),
                Kind::MissingOption,
                "required: the file or directory under pfs to read in, e.g. \
                 path=/lus/project/input",
            ));
        };
        Ok(PreloadDirective { line: d.line, path })
    }
}

enum Prefix {
    /// `#DW` or `#BB`, then whitespace or the end of the line.
    Directive(&'static str),
    /// `#DW` run into a word, like `#DWjobdw`.
    Glued,
    /// Any other comment, `#SBATCH` and `#BB_LUA` among them.
    Comment,
}

fn directive_prefix(line: &str) -> Prefix {
    let spaced = |rest: &str| rest.is_empty() || rest.starts_with(char::is_whitespace);
    if let Some(rest) = line.strip_prefix("#DW") {
        if spaced(rest) {
            Prefix::Directive("#DW")
        } else {
            // Slurm's Lua plugin, configured with Directive=DW, matches `#DW` as a prefix and
            // would hand such a line over as a directive; ignoring it would hide the typo.
            Prefix::Glued
        }
    } else if line.strip_prefix("#BB").is_some_and(spaced) {
        Prefix::Directive("#BB")
    } else {
        Prefix::Comment
    }
}

/// The directive's name for an error: prefix and command, the command read from `body` when
/// no word has been collected yet.
fn label(d: &Directive, body: &str) -> String {
    match d
        .toks
        .first()
        .map(|t| t.text.as_str())
        .or_else(|| body.split_whitespace().next())
    {
        Some(command) => format!("{} {command}", d.prefix),
        None => d.prefix.to_string(),
    }
}

/// Splits `body` at whitespace outside parentheses, so `striped(MFS=1GiB, client_cache)` stays
/// one word. On unbalanced parentheses returns the word at fault.
fn tokenize(body: &str, line: usize, out: &mut Vec<Tok>) -> Result<(), String> {
    let word_at = |s: usize| {
        body[s..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let mut depth = 0usize;
    let mut start = None;
    for (i, c) in body.char_indices() {
        if c.is_whitespace() && depth == 0 {
            if let Some(s) = start.take() {
                out.push(Tok {
                    text: body[s..i].to_string(),
                    line,
                });
            }
            continue;
        }
        let s = *start.get_or_insert(i);
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Err(word_at(s)),
            ')' => depth -= 1,
            _ => {}
        }
    }
    if let Some(s) = start {
        if depth > 0 {
            return Err(word_at(s));
        }
        out.push(Tok {
            text: body[s..].trim_end().to_string(),
            line,
        });
    }
    Ok(())
}

fn key_value(t: &Tok) -> Result<(&str, &str), String> {
    if t.text == "\\" {
        return Err("a continuation \\ must be the last character of its line".into());
    }
    match t.text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key, value)),
        _ => Err("expected key=value".into()),
    }
}

struct Striped {
    max_file_size: Option<u64>,
    client_cache: bool,
}

/// `striped`, `striped(MFS=16GiB)`, `striped(MFS=16GiB,client_cache)`.
fn access_mode_of(value: &str) -> Result<Striped, (Kind, String)> {
    let only_striped = || {
        (
            Kind::Unsupported,
            "not supported; Pliant provides access_mode=striped only".to_string(),
        )
    };
    let (name, options) = match value.split_once('(') {
        Some((name, rest)) => match rest.strip_suffix(')') {
            Some(options) => (name, Some(options)),
            None => return Err(only_striped()),
        },
        None => (value, None),
    };
    match name {
        "striped" => {}
        "private" | "ldbal" => return Err(only_striped()),
        _ if name.contains(',') => return Err(only_striped()),
        _ => {
            return Err((
                Kind::InvalidValue,
                "expected access_mode=striped, optionally striped(MFS=size,client_cache)".into(),
            ));
        }
    }
    let mut mode = Striped {
        max_file_size: None,
        client_cache: false,
    };
    for option in options
        .into_iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
    {
        let twice = || (Kind::DuplicateOption, format!("{option}: given twice"));
        if option == "client_cache" {
            if mode.client_cache {
                return Err(twice());
            }
            mode.client_cache = true;
        } else if let Some(size) = option.strip_prefix("MFS=") {
            if mode.max_file_size.is_some() {
                return Err(twice());
            }
            let bytes = size_of(size, "16GiB")
                .map_err(|m| (Kind::InvalidValue, format!("{option}: {m}")))?;
            mode.max_file_size = Some(bytes);
        } else {
            return Err((
                Kind::UnknownOption,
                format!("{option}: unknown option of striped; it takes MFS=size and client_cache"),
            ));
        }
    }
    Ok(mode)
}

fn capacity_of(value: &str) -> Result<u64, String> {
    let bytes = size_of(value, "10GiB")?;
    let unit = value.trim_start_matches(|c: char| c.is_ascii_digit());
    if unit.len() == value.len() || !unit.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(
            "Slurm reads a burst-buffer capacity as a whole number and a unit and would \
             misread this one; write it without a decimal point, e.g. 1536GiB"
                .into(),
        );
    }
    Ok(bytes)
}

/// A size in bytes greater than zero; `example` shows the form in the error.
fn size_of(value: &str, example: &str) -> Result<u64, String> {
    let zero = || "must be greater than zero".to_string();
    match value.parse::<Capacity>() {
        // A fraction of a byte rounds to zero.
        Ok(Capacity::Bytes(0)) => Err(zero()),
        Ok(Capacity::Bytes(n)) => Ok(n),
        Ok(Capacity::Keys(_)) => Err(format!("expected a size in bytes such as {example}")),
        Err(_) => {
            let number: String = value
                .chars()
                .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '_'))
                .filter(|c| *c != '_')
                .collect();
            if number.parse::<f64>() == Ok(0.0) {
                Err(zero())
            } else {
                Err(format!("expected a size such as {example}"))
            }
        }
    }
}

fn positive<T: std::str::FromStr + PartialEq + Default>(value: &str) -> Option<T> {
    value.parse::<T>().ok().filter(|n| *n != T::default())
}

fn absolute(value: &str) -> Result<PathBuf, String> {
    if !value.starts_with('/') {
        return Err(if value.contains('$') {
            "expected an absolute path; environment variables are not expanded".into()
        } else {
            "expected an absolute path".into()
        });
    }
    let path = PathBuf::from(value);
    // `Path::starts_with` compares components, so `/pfs/../etc` would pass for `/pfs`.
    if path.components().any(|c| c == Component::ParentDir) {
        return Err("'..' is not allowed; name the directory directly".into());
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> JobDirectives {
        parse_script("job.sh", text).expect("the directives parse")
    }

    fn err(text: &str) -> DirectiveError {
        parse_script("job.sh", text).expect_err("the directives are refused")
    }

    /// The error's full text, checked against its kind too.
    fn refused(text: &str, kind: DirectiveErrorKind) -> String {
        let e = err(text);
        assert_eq!(e.kind, kind, "{e}");
        e.to_string()
    }

    fn cache(text: &str) -> CacheDirective {
        ok(text).cache.expect("a cache directive")
    }

    const MIN: &str = "#DW jobdw type=cache access_mode=striped capacity=1GiB pfs=/lus/p";

    fn with(options: &str) -> String {
        format!("#!/bin/bash\n{MIN} {options}\nsrun a.out\n")
    }

    #[test]
    fn a_realistic_script_reads_in_full() {
        let d = ok(include_str!("../tests/data/jobs/good.sh"));
        assert_eq!(
            d,
            JobDirectives {
                cache: Some(CacheDirective {
                    line: 6,
                    pfs: PathBuf::from("/lus/project/run42"),
                    capacity_bytes: 10 << 40,
                    access_mode: AccessMode::Striped,
                    max_file_size: Some(16 << 30),
                    write_window_multiplier: Some(10),
                    write_window_length_secs: Some(86_400),
                    extra: vec![("pool".into(), "pliant".into())],
                }),
                preloads: vec![
                    PreloadDirective {
                        line: 9,
                        path: PathBuf::from("/lus/project/run42/input"),
                    },
                    PreloadDirective {
                        line: 10,
                        path: PathBuf::from("/lus/project/run42/mesh.h5"),
                    },
                ],
            }
        );
    }

    #[test]
    fn the_bad_sample_is_refused_at_its_capacity() {
        let e = parse_script("bad.sh", include_str!("../tests/data/jobs/bad.sh"))
            .expect_err("bad.sh is refused");
        assert_eq!(
            e.to_string(),
            "bad.sh:5: #DW jobdw: capacity=12XB: expected a size such as 10GiB"
        );
    }

    #[test]
    fn a_script_without_directives_asks_for_nothing() {
        assert_eq!(
            ok("#!/bin/sh\n#SBATCH -N 1\nsrun a.out\n"),
            JobDirectives::default()
        );
        assert_eq!(ok(""), JobDirectives::default());
    }

    #[test]
    fn the_minimal_cache_takes_no_optional_values() {
        let c = cache(MIN);
        assert_eq!(c.line, 1);
        assert_eq!(c.pfs, PathBuf::from("/lus/p"));
        assert_eq!(c.capacity_bytes, 1 << 30);
        assert_eq!(c.access_mode, AccessMode::Striped);
        assert_eq!(c.max_file_size, None);
        assert_eq!(c.write_window_multiplier, None);
        assert_eq!(c.write_window_length_secs, None);
        assert!(c.extra.is_empty());
    }

    #[test]
    fn options_may_come_in_any_order_and_spacing() {
        let c = cache("#DW   jobdw\tpfs=/lus/q  capacity=2GiB access_mode=striped type=cache  ");
        assert_eq!(
            (c.pfs, c.capacity_bytes),
            (PathBuf::from("/lus/q"), 2 << 30)
        );
    }

    #[test]
    fn directives_after_the_first_command_are_ignored_as_slurm_ignores_them() {
        let text =
            format!("#!/bin/bash\n{MIN}\nmodule load x\n#DW jobdw type=scratch\n#DW bogus\n");
        assert_eq!(cache(&text).line, 2);
        // Indented, a line is a command line to Slurm, which stops there.
        assert_eq!(ok(&format!("#!/bin/bash\n  {MIN}\n")).cache, None);
        assert_eq!(
            ok(&format!("#!/bin/bash\n\t#DW jobdw\n{MIN}\n")).cache,
            None
        );
    }

    #[test]
    fn empty_lines_and_other_comments_do_not_end_the_header() {
        let text = format!("#!/bin/bash\n\n#SBATCH -N 2\n\n# a note\n#BB_LUA\n{MIN}\n");
        assert_eq!(cache(&text).line, 7);
    }

    #[test]
    fn a_continued_directive_joins_its_lines() {
        let text = "#!/bin/sh\n#DW jobdw type=cache access_mode=striped \\\n#DW pfs=/lus/p \\\n\
                    #DW       capacity=3GiB\nsrun a.out\n";
        let c = cache(text);
        assert_eq!((c.line, c.capacity_bytes), (2, 3 << 30));
        // No space before the backslash, and an empty line between the halves.
        let c = cache("#DW jobdw type=cache access_mode=striped pfs=/lus/p\\\n\n#DW capacity=4G\n");
        assert_eq!(c.capacity_bytes, 4 << 30);
    }

    #[test]
    fn an_error_on_a_continuation_line_names_that_line() {
        let text = "#!/bin/sh\n#DW jobdw type=cache access_mode=striped pfs=/lus/p \\\n\
                    #DW capacity=12XB\n";
        assert_eq!(
            refused(text, Kind::InvalidValue),
            "job.sh:3: #DW jobdw: capacity=12XB: expected a size such as 10GiB"
        );
    }

    #[test]
    fn a_continuation_must_continue_on_a_dw_line() {
        let start = "#!/bin/sh\n#DW jobdw type=cache access_mode=striped \\\n";
        for next in [
            "#SBATCH -N 1\n",
            "capacity=1GiB pfs=/lus/p\n",
            "#BB capacity=1GiB\n",
        ] {
            let text = format!("{start}{next}");
            assert_eq!(
                refused(&text, Kind::Continuation),
                "job.sh:2: #DW jobdw: the line ends with \\ but line 3 does not start with #DW, \
                 so it does not continue the directive",
                "{next}"
            );
        }
    }

    #[test]
    fn a_continuation_at_the_end_of_the_file_is_refused() {
        for text in [
            "#DW jobdw type=cache \\",
            "#DW jobdw type=cache \\\n",
            "#DW jobdw \\\n\n",
        ] {
            assert_eq!(
                refused(text, Kind::Continuation),
                "job.sh:1: #DW jobdw: the line ends with \\ but the file ends",
                "{text:?}"
            );
        }
    }

    #[test]
    fn whitespace_after_a_continuation_backslash_is_refused() {
        let e = refused(&format!("{MIN} \\ \n#DW pool=x\n"), Kind::Syntax);
        assert!(
            e.starts_with("job.sh:1: #DW jobdw: a continuation \\ must be the last"),
            "{e}"
        );
        let e = refused(&format!("{MIN} \\ pool=x\n"), Kind::Syntax);
        assert!(
            e.starts_with("job.sh:1: #DW jobdw: \\: a continuation \\ must be"),
            "{e}"
        );
    }

    #[test]
    fn sizes_take_binary_decimal_and_bare_units() {
        for (written, bytes) in [
            ("10GiB", 10u64 << 30),
            ("1TiB", 1 << 40),
            ("500MB", 500_000_000),
            ("2KB", 2_000),
            ("10G", 10 << 30),
            ("64K", 64 << 10),
            ("4096", 4096),
            ("4096B", 4096),
        ] {
            let c = cache(&format!(
                "#DW jobdw type=cache access_mode=striped pfs=/p capacity={written}"
            ));
            assert_eq!(c.capacity_bytes, bytes, "{written}");
        }
    }

    #[test]
    fn bad_sizes_name_the_parameter() {
        let text = "#DW jobdw type=cache access_mode=striped pfs=/p capacity=";
        for (value, message) in [
            ("12XB", "expected a size such as 10GiB"),
            ("", "expected a size such as 10GiB"),
            ("-1GiB", "expected a size such as 10GiB"),
            ("0", "must be greater than zero"),
            ("0GiB", "must be greater than zero"),
            ("1000keys", "expected a size in bytes such as 10GiB"),
            ("unlimited", "expected a size in bytes such as 10GiB"),
        ] {
            assert_eq!(
                refused(&format!("{text}{value}"), Kind::InvalidValue),
                format!("job.sh:1: #DW jobdw: capacity={value}: {message}"),
            );
        }
    }

    #[test]
    fn a_capacity_slurm_would_misread_is_refused() {
        for value in ["1.5TiB", "0.5GiB", "4_096"] {
            let text = MIN.replace("capacity=1GiB", &format!("capacity={value}"));
            let e = refused(&text, Kind::InvalidValue);
            assert!(
                e.starts_with(&format!(
                    "job.sh:1: #DW jobdw: capacity={value}: Slurm reads"
                )),
                "{e}"
            );
        }
        // Elsewhere a fraction is fine.
        let c = cache(&with("").replace("striped", "striped(MFS=1.5GiB)"));
        assert_eq!(c.max_file_size, Some(3 << 29));
    }

    #[test]
    fn access_mode_striped_takes_mfs_and_client_cache() {
        let c = cache(&MIN.replace("striped", "striped(MFS=16GiB)"));
        assert_eq!(c.max_file_size, Some(16 << 30));
        assert!(c.extra.is_empty());
        let c = cache(&MIN.replace("striped", "striped(MFS=10GiB,client_cache)"));
        assert_eq!(c.max_file_size, Some(10 << 30));
        assert_eq!(c.extra, vec![("client_cache".to_string(), String::new())]);
        // A space inside the parentheses does not split the option.
        let c = cache(&MIN.replace("striped", "striped(client_cache, MFS=1GiB)"));
        assert_eq!(c.max_file_size, Some(1 << 30));
    }

    #[test]
    fn other_access_modes_are_refused() {
        for (mode, kind, message) in [
            (
                "private",
                Kind::Unsupported,
                "not supported; Pliant provides access_mode=striped only",
            ),
            (
                "ldbal",
                Kind::Unsupported,
                "not supported; Pliant provides access_mode=striped only",
            ),
            (
                "striped,private",
                Kind::Unsupported,
                "not supported; Pliant provides access_mode=striped only",
            ),
            (
                "stripe",
                Kind::InvalidValue,
                "expected access_mode=striped, optionally striped(MFS=size,client_cache)",
            ),
            (
                "striped(MFS=12XB)",
                Kind::InvalidValue,
                "MFS=12XB: expected a size such as 16GiB",
            ),
            (
                "striped(MFS=0)",
                Kind::InvalidValue,
                "MFS=0: must be greater than zero",
            ),
            (
                "striped(MFS=1G,MFS=2G)",
                Kind::DuplicateOption,
                "MFS=2G: given twice",
            ),
            (
                "striped(fast)",
                Kind::UnknownOption,
                "fast: unknown option of striped; it takes MFS=size and client_cache",
            ),
        ] {
            let text = MIN.replace("access_mode=striped", &format!("access_mode={mode}"));
            assert_eq!(
                refused(&text, kind),
                format!("job.sh:1: #DW jobdw: access_mode={mode}: {message}")
            );
        }
    }

    #[test]
    fn unbalanced_parentheses_are_refused() {
        for mode in ["striped(MFS=1GiB", "striped)MFS=1GiB", "striped(MFS=1GiB))"] {
            let e = refused(&MIN.replace("striped", mode), Kind::Syntax);
            assert_eq!(
                e,
                format!("job.sh:1: #DW jobdw: access_mode={mode}: unbalanced parentheses")
            );
        }
    }

    #[test]
    fn each_required_option_is_named_when_missing() {
        for (drop, message) in [
            ("type=cache", "type: required; write type=cache"),
            (
                "pfs=/lus/p",
                "pfs: required: the parallel-file-system directory to cache, e.g. pfs=/lus/project",
            ),
            (
                "capacity=1GiB",
                "capacity: required: how much the cache holds, e.g. capacity=10TiB",
            ),
            (
                "access_mode=striped",
                "access_mode: required; write access_mode=striped",
            ),
        ] {
            let text = format!("#!/bin/sh\n#SBATCH -N 1\n{}\n", MIN.replace(drop, ""));
            assert_eq!(
                refused(&text, Kind::MissingOption),
                format!("job.sh:3: #DW jobdw: {message}")
            );
        }
    }

    #[test]
    fn only_type_cache_is_provided() {
        assert_eq!(
            refused(
                &MIN.replace("type=cache", "type=scratch"),
                Kind::Unsupported
            ),
            "job.sh:1: #DW jobdw: type=scratch: type=scratch is a DataWarp scratch allocation; \
             Pliant provides type=cache only"
        );
        // Told about scratch even when scratch-only options come first.
        let text = "#DW jobdw sync_on_close=yes capacity=1GiB access_mode=striped type=scratch";
        assert_eq!(err(text).param.as_deref(), Some("type=scratch"));
        assert_eq!(
            refused(&MIN.replace("type=cache", "type=swap"), Kind::InvalidValue),
            "job.sh:1: #DW jobdw: type=swap: expected type=cache"
        );
    }

    #[test]
    fn duplicate_unknown_and_malformed_options_are_refused() {
        let text = "#DW jobdw type=cache access_mode=striped capacity=1GiB pfs=/p \\\n\
                    #DW capacity=2GiB\n";
        assert_eq!(
            refused(text, Kind::DuplicateOption),
            "job.sh:2: #DW jobdw: capacity=2GiB: capacity is already given on line 1"
        );
        let e = refused(&with("sync_on_close=yes"), Kind::UnknownOption);
        assert!(
            e.starts_with("job.sh:2: #DW jobdw: sync_on_close=yes: unknown option;"),
            "{e}"
        );
        for word in ["striped", "=cache"] {
            assert_eq!(
                refused(&with(word), Kind::Syntax),
                format!("job.sh:2: #DW jobdw: {word}: expected key=value")
            );
        }
    }

    #[test]
    fn a_second_cache_is_refused() {
        let text = format!("#!/bin/sh\n{MIN}\n#SBATCH -N 1\n{MIN}\n");
        assert_eq!(
            refused(&text, Kind::SecondCache),
            "job.sh:4: #DW jobdw: a second #DW jobdw; a job has one cache, requested at line 2"
        );
    }

    #[test]
    fn pfs_must_be_absolute_and_direct() {
        for (pfs, message) in [
            ("lus/p", "expected an absolute path"),
            ("", "expected an absolute path"),
            (
                "$SCRATCH/run",
                "expected an absolute path; environment variables are not expanded",
            ),
            (
                "/lus/p/../q",
                "'..' is not allowed; name the directory directly",
            ),
        ] {
            assert_eq!(
                refused(
                    &MIN.replace("pfs=/lus/p", &format!("pfs={pfs}")),
                    Kind::InvalidValue
                ),
                format!("job.sh:1: #DW jobdw: pfs={pfs}: {message}")
            );
        }
    }

    #[test]
    fn write_windows_and_pool_are_read() {
        let c = cache(&with(
            "write_window_multiplier=5 write_window_length=43200 pool=wlm_pool",
        ));
        assert_eq!(c.write_window_multiplier, Some(5));
        assert_eq!(c.write_window_length_secs, Some(43_200));
        assert_eq!(c.extra, vec![("pool".to_string(), "wlm_pool".to_string())]);
    }

    #[test]
    fn bad_write_windows_and_pools_are_refused() {
        for (option, message) in [
            (
                "write_window_multiplier=0",
                "expected a whole number greater than zero",
            ),
            (
                "write_window_multiplier=ten",
                "expected a whole number greater than zero",
            ),
            (
                "write_window_multiplier=4294967296",
                "expected a whole number greater than zero",
            ),
            (
                "write_window_length=0",
                "expected a number of seconds greater than zero",
            ),
            (
                "write_window_length=1.5",
                "expected a number of seconds greater than zero",
            ),
            ("pool=", "expected a pool name"),
        ] {
            let e = refused(&with(option), Kind::InvalidValue);
            assert!(
                e.starts_with(&format!("job.sh:2: #DW jobdw: {option}: {message}")),
                "{e}"
            );
        }
    }

    #[test]
    fn other_dw_commands_are_refused_by_name_and_line() {
        for command in [
            "stage_in",
            "stage_out",
            "swap",
            "persistentdw",
            "create_persistent",
        ] {
            let text =
                format!("#!/bin/sh\n{MIN}\n#DW {command} type=file source=/a destination=/b\n");
            let e = refused(&text, Kind::Unsupported);
            assert!(
                e.starts_with(&format!("job.sh:3: #DW {command}: not supported: ")),
                "{e}"
            );
        }
        assert_eq!(
            refused("#DW jobdwx type=cache", Kind::UnknownCommand),
            "job.sh:1: #DW jobdwx: unknown command; Pliant reads #DW jobdw and #DW preload"
        );
    }

    #[test]
    fn bb_lines_are_refused_but_bb_lua_is_a_comment() {
        let e = refused(
            "#!/bin/sh\n#BB create_persistent name=a capacity=1G\n",
            Kind::Unsupported,
        );
        assert!(
            e.starts_with("job.sh:2: #BB create_persistent: not supported: #BB lines"),
            "{e}"
        );
        assert_eq!(ok("#BB_LUA pool=x\n").cache, None);
    }

    #[test]
    fn malformed_dw_lines_are_refused() {
        assert_eq!(
            refused("#!/bin/sh\n#DW\n", Kind::Syntax),
            "job.sh:2: #DW: empty directive; expected #DW jobdw type=cache ... or #DW preload \
             path=..."
        );
        assert_eq!(
            refused("#DWjobdw type=cache", Kind::Syntax),
            "job.sh:1: #DWjobdw: expected a space after #DW"
        );
    }

    #[test]
    fn preloads_inside_pfs_are_read_wherever_they_are() {
        let text = format!(
            "#!/bin/sh\n#DW preload path=/lus/p/in\n{MIN}\n#DW preload path=/lus/p\n\
             #DW preload path=/lus/p/a/b.h5\n"
        );
        let paths: Vec<_> = ok(&text)
            .preloads
            .into_iter()
            .map(|p| (p.line, p.path))
            .collect();
        assert_eq!(
            paths,
            vec![
                (2, PathBuf::from("/lus/p/in")),
                (4, PathBuf::from("/lus/p")),
                (5, PathBuf::from("/lus/p/a/b.h5")),
            ]
        );
    }

    #[test]
    fn a_preload_outside_pfs_is_refused_at_its_line() {
        for path in ["/lus/other", "/lus/pp", "/"] {
            let text = format!("#!/bin/sh\n#DW preload path={path}\n{MIN}\n");
            assert_eq!(
                refused(&text, Kind::PreloadOutsidePfs),
                format!(
                    "job.sh:2: #DW preload: path={path}: not inside the cache's pfs=/lus/p (line 3)"
                )
            );
        }
        let e = refused(
            &format!("{MIN}\n#DW preload path=/lus/p/../etc\n"),
            Kind::InvalidValue,
        );
        assert!(
            e.starts_with("job.sh:2: #DW preload: path=/lus/p/../etc: '..'"),
            "{e}"
        );
    }

    #[test]
    fn a_preload_needs_a_cache() {
        assert_eq!(
            refused(
                "#!/bin/sh\n#DW preload path=/lus/p/in\n",
                Kind::PreloadWithoutCache
            ),
            "job.sh:2: #DW preload: path=/lus/p/in: there is no #DW jobdw type=cache to preload \
             into"
        );
    }

    #[test]
    fn malformed_preloads_are_refused() {
        for (line, kind, message) in [
            (
                "#DW preload",
                Kind::MissingOption,
                "path: required: the file or directory",
            ),
            (
                "#DW preload path=in",
                Kind::InvalidValue,
                "path=in: expected an absolute path",
            ),
            (
                "#DW preload /lus/p/in",
                Kind::Syntax,
                "/lus/p/in: expected key=value",
            ),
            (
                "#DW preload path=/lus/p/a path=/lus/p/b",
                Kind::DuplicateOption,
                "path=/lus/p/b: path is already given on line 2",
            ),
            (
                "#DW preload path=/lus/p/a recursive=yes",
                Kind::UnknownOption,
                "recursive=yes: unknown option; #DW preload takes path",
            ),
        ] {
            let e = refused(&format!("{MIN}\n{line}\n"), kind);
            assert!(
                e.starts_with(&format!("job.sh:2: #DW preload: {message}")),
                "{e}"
            );
        }
    }

    #[test]
    fn errors_carry_their_parts() {
        let e = err("#!/bin/sh\n#DW jobdw type=cache capacity=12XB\n");
        assert_eq!(
            (
                e.file.as_str(),
                e.line,
                e.directive.as_str(),
                e.param.as_deref()
            ),
            ("job.sh", 2, "#DW jobdw", Some("capacity=12XB"))
        );
    }

    #[test]
    fn job_check_accepted_a_pfs_that_does_not_exist() {
        let d = ok(
            "#!/bin/bash\n#DW jobdw type=cache access_mode=striped capacity=1GiB pfs=/nonexistent-pliant-pfs\n",
        );
        let e = d
            .check_paths("job.sh")
            .expect_err("a missing pfs is refused");
        assert_eq!(e.kind, DirectiveErrorKind::PathNotFound);
        let text = e.to_string();
        assert!(
            text.starts_with("job.sh:2: #DW jobdw: pfs=/nonexistent-pliant-pfs: "),
            "{text}"
        );
        // A file where the directory should be is refused too; an existing directory passes,
        // and then a preload that is not there is named by its own line.
        let top = tempfile::tempdir().expect("tempdir");
        let file = top.path().join("f");
        std::fs::write(&file, b"x").expect("file");
        let d = ok(&format!("{MIN_HEAD}pfs={}\n", file.display()));
        let e = d.check_paths("job.sh").expect_err("a file is not a pfs");
        assert!(e.to_string().contains("not a directory"), "{e}");
        let d = ok(&format!(
            "{MIN_HEAD}pfs={0}\n#DW preload path={0}/missing\n",
            top.path().display()
        ));
        let e = d.check_paths("job.sh").expect_err("a missing preload");
        assert_eq!((e.line, e.directive.as_str()), (3, "#DW preload"), "{e}");
        std::fs::write(top.path().join("missing"), b"now here").expect("file");
        assert_eq!(d.check_paths("job.sh"), Ok(()));
    }

    const MIN_HEAD: &str = "#!/bin/bash\n#DW jobdw type=cache access_mode=striped capacity=1GiB ";
}
