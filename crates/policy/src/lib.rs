//! Pliant's policy engine, after Mantle (the Ceph metadata balancer): administrators write *when*
//! to act, *where* to send load, *how much* to move and how to compute *load* as small Lua
//! programs, and the service runs them whenever a decision is due.
//!
//! This crate owns the Lua sandbox, the environment policies see (`whoami`, `servers[id][metric]`
//! with aliases `server` and `mds`, `timeseries()`, `params`, `WRstate`/`RDstate`, `BAL_LOG`),
//! resource limits, hot swap with version history, the decision log, and the policies Pliant
//! ships (see [`shipped`]) with the built-in scenarios that show them deciding ([`scenarios`]).
//!
//! Two styles of policy are first-class:
//! - one file defining global functions `load()`, `when()`, `where(targets)`, `howmuch()`; a
//!   missing one takes its default (`load`: keep the supplied `load` metric; `when`: `false`;
//!   `where`: send nothing; `howmuch`: no amount);
//! - Mantle-library style: chunks `load.lua`, `when.lua`, `where.lua`, `howmuch.lua`, each a
//!   script whose `return` value is the decision (`where.lua` sees the global `targets`), with the
//!   `load` chunk run before each of the others.
//!
//! Dependencies: `mlua` (Lua 5.4, vendored so no system Lua is needed) runs the policies;
//! `thiserror` types the errors; `serde`/`serde_json` read metrics and write decisions and logs;
//! `tracing` carries `BAL_LOG`.

mod decision;
mod engine;
mod env;
mod error;
mod interval;
mod log;
pub mod scenarios;
pub mod shipped;
mod source;
mod state;
mod vm;

pub use decision::{Decision, HowMuch, Targets};
pub use engine::{Engine, EngineConfig, Limits, Version, previous_version};
pub use env::{Metrics, ParamValue, Params, Point, ServerId, TimeSeries};
pub use error::{Location, PolicyError, VmError, VmErrorKind};
pub use interval::parse_interval;
pub use log::{DecisionLog, LogEntry};
pub use source::{Callback, Chunk, PolicySource, Style};
pub use state::{FileStore, MemoryStore, StateStore, StateValue};
