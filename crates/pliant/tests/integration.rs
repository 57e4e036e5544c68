//! The integration tests of `pliant`, as one binary: every test binary links the whole
//! dependency tree (the Lua VM among it), so one binary instead of one per file saves those
//! links in every build of the suite. Each module is one subject.

mod cluster_cli;
mod common;
mod docs_cli;
mod docs_links;
mod errors_cli;
mod fs_cli;
mod fs_striped_cli;
mod parsplice_cli;
mod policy_cli;
mod posix_diff;
mod rescale_scale_cli;
mod scale_cli;
mod serve_cli;
mod serve_redis_cli;
mod sim_trace_cli;
mod slurm_cli;
mod tiers_cli;
