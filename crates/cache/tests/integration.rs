//! The integration tests of `cache`, as one binary: every test binary links the whole
//! dependency tree (the Lua VM among it), so one binary instead of one per file saves those
//! links in every build of the suite. Each module is one subject.

mod api;
mod golden;
mod properties;
mod slots;
