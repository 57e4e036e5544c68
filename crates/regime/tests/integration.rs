//! The integration tests of `regime`, as one binary (the workspace's convention: one link of the
//! dependency tree, the Lua VM among it, instead of one per file). Each module is one subject.

mod fan;
mod traces;
