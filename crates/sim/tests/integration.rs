//! The integration tests of `sim`, as one binary: every test binary links the whole
//! dependency tree (the Lua VM among it), so one binary instead of one per file saves those
//! links in every build of the suite. Each module is one subject.

mod libcachesim;
mod parsplice;
mod replay;
