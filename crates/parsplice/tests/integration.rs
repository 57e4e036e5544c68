//! The integration tests of `parsplice`, as one binary (the workspace's convention: one link of
//! the dependency tree, the Lua VM among it, instead of one per file). Each module is one subject.

mod hierarchy;
mod replay;
mod study;
