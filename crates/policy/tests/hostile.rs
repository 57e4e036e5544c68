//! Hostile policies, one test each: every one is contained with a typed error, and the engine
//! keeps serving the good policy that was running before.

use crate::common::{cluster, f, small_engine};
use pliant_policy::{Callback, Engine, PolicyError};

const GOOD: &str = "function when() return true end function howmuch() return 42 end";

/// Installs GOOD, then the hostile candidate; returns the candidate's error after checking the
/// engine still serves GOOD.
fn contained(hostile: &str) -> PolicyError {
    let mut e: Engine = small_engine(cluster());
    e.install(f(GOOD)).expect("good policy");
    let err = e
        .install(f(hostile))
        .expect_err("hostile policy must be rejected");
    let d = e.decide().expect("engine still serving");
    assert_eq!(d.version, 1);
    assert_eq!(d.howmuch.and_then(|h| h.amount()), Some(42.0));
    err
}

#[test]
fn infinite_loop() {
    let err = contained("function when() while true do end end");
    let expected = matches!(
        err,
        PolicyError::Budget {
            callback: Callback::When,
            ..
        }
    );
    assert!(expected, "{err:?}");
    assert_eq!(err.location().map(|l| l.line), Some(1));
}

#[test]
fn infinite_loop_inside_pcall() {
    let err = contained(
        "function when() for i = 1, 1e9 do pcall(function() while true do end end) end return true end",
    );
    assert!(matches!(err, PolicyError::Budget { .. }), "{err:?}");
}

#[test]
fn infinite_loop_inside_xpcall_with_handler() {
    let err = contained(
        "function when() xpcall(function() while true do end end, function(e) return e end) return true end",
    );
    assert!(matches!(err, PolicyError::Budget { .. }), "{err:?}");
}

#[test]
fn recursion_without_end() {
    let err = contained(
        "local function f(n) return 1 + f(n + 1) end function when() return f(1) > 0 end",
    );
    // Lua's stack grows until either its own limit or our memory cap stops it.
    let msg = err.to_string();
    let expected = matches!(err, PolicyError::Memory { .. }) || msg.contains("stack overflow");
    assert!(expected, "{err:?}");
}

#[test]
fn string_rep_of_one_gigabyte() {
    let err = contained("function when() local s = string.rep('x', 1 << 30) return #s > 0 end");
    assert!(matches!(err, PolicyError::Memory { .. }), "{err:?}");
}

#[test]
fn table_growing_forever() {
    let err = contained("t = {} function when() while true do t[#t + 1] = {1, 2, 3} end end");
    // The budget or the memory cap, whichever comes first, stops it.
    let expected = matches!(err, PolicyError::Memory { .. } | PolicyError::Budget { .. });
    assert!(expected, "{err:?}");
}

#[test]
fn table_growing_forever_inside_pcall() {
    let err = contained(
        "t = {} function when() pcall(function() while true do t[#t + 1] = string.rep('y', 1000) .. #t end end) return true end",
    );
    let expected = matches!(err, PolicyError::Memory { .. } | PolicyError::Budget { .. });
    assert!(expected, "{err:?}");
}

fn assert_missing(code: &str, name: &str) {
    let err = contained(code);
    assert!(matches!(err, PolicyError::Runtime { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("'{name}'")) && msg.contains("nil"),
        "{msg}"
    );
}

#[test]
fn os_execute() {
    assert_missing(
        "function when() os.execute('touch /tmp/pwned') return true end",
        "os",
    );
}

#[test]
fn io_open() {
    assert_missing(
        "function when() io.open('/etc/passwd') return true end",
        "io",
    );
}

#[test]
fn require() {
    assert_missing("function when() require('os') return true end", "require");
}

#[test]
fn load() {
    assert_missing("function when() load('return 1')() return true end", "load");
}

#[test]
fn dofile() {
    assert_missing(
        "function when() dofile('/etc/passwd') return true end",
        "dofile",
    );
}

#[test]
fn loadfile_and_collectgarbage() {
    assert_missing(
        "function when() loadfile('/etc/passwd') return true end",
        "loadfile",
    );
    assert_missing(
        "function when() collectgarbage() return true end",
        "collectgarbage",
    );
}

#[test]
fn debug_sethook() {
    assert_missing("function when() debug.sethook() return true end", "debug");
}

#[test]
fn replacing_servers() {
    let err = contained("function when() servers = {} return true end");
    assert!(
        err.to_string()
            .contains("'servers' is provided by the engine"),
        "{err}"
    );
}

#[test]
fn replacing_wrstate() {
    let err = contained("function when() WRstate = function() end return true end");
    assert!(
        err.to_string()
            .contains("'WRstate' is provided by the engine"),
        "{err}"
    );
}

#[test]
fn replacing_wrstate_with_rawset_or_at_top_level() {
    let err = contained("rawset(_G, 'WRstate', print) function when() return true end");
    assert!(err.to_string().contains("cannot be replaced"), "{err}");
    let err = contained("mds = nil function when() return true end");
    assert!(err.to_string().contains("'mds'"), "{err}");
    let err = contained("function when() setmetatable(_G, nil) return true end");
    assert!(err.to_string().contains("protected metatable"), "{err}");
}

#[test]
fn returning_a_string_from_when() {
    let err = contained("function when() return 'yes' end");
    let expected = matches!(
        err,
        PolicyError::Malformed {
            callback: Callback::When,
            ..
        }
    );
    assert!(expected, "{err:?}");
    assert!(err.to_string().contains("expected a boolean"), "{err}");
}

#[test]
fn syntax_error() {
    let err = contained("function when() return ) end");
    assert!(matches!(err, PolicyError::Syntax { .. }), "{err:?}");
    assert_eq!(err.location().map(|l| l.line), Some(1));
}

#[test]
fn runtime_hostility_is_contained_at_decision_time_too() {
    let mut e = small_engine(cluster());
    // Installs cleanly, then loops forever once server 3 reports a `panic` metric.
    e.install(f(
        "function when() if servers[3]['panic'] then while true do end end return true end",
    ))
    .expect("install");
    e.metrics_mut().set(3, "panic", 1.0);
    let err = e.decide().expect_err("loops");
    assert!(matches!(err, PolicyError::Budget { .. }), "{err:?}");
    e.install(f(GOOD)).expect("a new policy still installs");
    assert_eq!(
        e.decide().expect("decide").howmuch.and_then(|h| h.amount()),
        Some(42.0)
    );
}
