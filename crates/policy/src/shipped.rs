//! The policies Pliant ships, embedded in the binary so they run with no files installed.

use crate::source::{Callback, PolicySource};

/// Names of the shipped policies.
pub const NAMES: [&str; 8] = [
    "parsplice-absorb-trim",
    "parsplice-no-progress",
    "cephfs-greedy-spill",
    "static-limit",
    "regime-fan",
    "fs-evict-watermarks",
    "fs-writeback-watermarks",
    "fs-writeback-when-idle",
];

/// A shipped policy by name.
pub fn get(name: &str) -> Option<PolicySource> {
    Some(match name {
        "parsplice-absorb-trim" => PolicySource::functions(
            name,
            include_str!("../../../policies/parsplice-absorb-trim.lua"),
        ),
        "parsplice-no-progress" => PolicySource::functions(
            name,
            include_str!("../../../policies/parsplice-no-progress.lua"),
        ),
        "static-limit" => {
            PolicySource::functions(name, include_str!("../../../policies/static-limit.lua"))
        }
        "regime-fan" => {
            PolicySource::functions(name, include_str!("../../../policies/regime-fan.lua"))
        }
        "fs-evict-watermarks" => PolicySource::functions(
            name,
            include_str!("../../../policies/fs-evict-watermarks.lua"),
        ),
        "fs-writeback-watermarks" => PolicySource::functions(
            name,
            include_str!("../../../policies/fs-writeback-watermarks.lua"),
        ),
        "fs-writeback-when-idle" => PolicySource::functions(
            name,
            include_str!("../../../policies/fs-writeback-when-idle.lua"),
        ),
        "cephfs-greedy-spill" => PolicySource::chunks(
            name,
            [
                (
                    Callback::Load,
                    include_str!("../../../policies/cephfs-greedy-spill/load.lua"),
                ),
                (
                    Callback::When,
                    include_str!("../../../policies/cephfs-greedy-spill/when.lua"),
                ),
                (
                    Callback::Where,
                    include_str!("../../../policies/cephfs-greedy-spill/where.lua"),
                ),
                (
                    Callback::HowMuch,
                    include_str!("../../../policies/cephfs-greedy-spill/howmuch.lua"),
                ),
            ],
        ),
        _ => return None,
    })
}
