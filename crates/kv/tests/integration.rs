//! The integration tests of `kv`, as one binary (the workspace's convention: each test binary
//! links the whole dependency tree). Each module is one subject; `served` is their harness.

mod errors;
mod redis_commands;
mod served;
mod service;
