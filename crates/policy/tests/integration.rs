//! The integration tests of `policy`, as one binary: every test binary links the whole
//! dependency tree (the Lua VM among it), so one binary instead of one per file saves those
//! links in every build of the suite. Each module is one subject.

mod common;
mod environment;
mod hostile;
mod hotswap;
mod shipped;
mod state;
mod styles;
