//! One module per subcommand.

pub mod bench;
pub mod demo;
pub mod input;
pub mod policy;
pub mod policy_demo;
pub mod sim;
pub mod trace;
