//! One module per subcommand.

pub mod admin;
pub mod args;
pub mod bench;
pub mod cluster;
pub mod demo;
pub mod fs;
pub mod input;
pub mod parsplice;
pub mod policy;
pub mod policy_demo;
pub mod regimes;
pub mod replay;
pub mod rescale;
pub mod scale;
pub mod serve;
pub mod sim;
pub mod trace;
