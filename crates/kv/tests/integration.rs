//! The integration tests of `kv`, as one binary (the workspace's convention: each test binary
//! links the whole dependency tree). Each module is one subject.

mod errors;
mod redis_commands;
