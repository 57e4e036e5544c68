//! Hot swap: install, versions, history, rollback; a failing candidate never replaces the running
//! policy.

use crate::common::{cluster, f};
use pliant_policy::{Engine, HowMuch, PolicyError};

fn amount(e: &mut Engine) -> f64 {
    e.decide()
        .expect("decide")
        .howmuch
        .and_then(|h| h.amount())
        .expect("amount")
}

const V1: &str = "function when() return true end function howmuch() return 1 end";
const V2: &str = "function when() return true end function howmuch() return 2 end";

#[test]
fn failing_candidate_leaves_old_policy_serving() {
    let mut e = Engine::in_memory(cluster());
    assert_eq!(e.install(f(V1)).expect("v1"), 1);
    // Fails only in its dry run of `howmuch`, i.e. after compiling fine.
    let bad = "function when() return true end function howmuch() error('not ready') end";
    let err = e.install(f(bad)).expect_err("candidate fails dry run");
    assert!(matches!(err, PolicyError::Runtime { .. }), "{err:?}");
    assert_eq!(e.active_version(), Some(1));
    assert_eq!(
        e.versions().len(),
        1,
        "a rejected candidate is not a version"
    );
    assert_eq!(amount(&mut e), 1.0);
}

#[test]
fn versions_history_and_one_call_rollback() {
    let mut e = Engine::in_memory(cluster());
    e.install(f(V1)).expect("v1");
    e.install(f(V2)).expect("v2");
    assert_eq!(amount(&mut e), 2.0);
    assert_eq!(e.rollback().expect("rollback"), 1);
    assert_eq!(amount(&mut e), 1.0);
    e.activate(2).expect("forward again");
    assert_eq!(amount(&mut e), 2.0);
    assert_eq!(e.history(), [1, 2, 1, 2]);
    assert_eq!(e.decide().expect("decide").version, 2);
    assert!(matches!(e.activate(9), Err(PolicyError::UnknownVersion(9))));
}

#[test]
fn a_rollback_brings_back_the_old_versions_parameters() {
    let limit = |n: f64| {
        std::iter::once(("limit".to_string(), pliant_policy::ParamValue::Num(n)))
            .collect::<pliant_policy::Params>()
    };
    let lim = "function when() return true end function howmuch() return params.limit end";
    let mut e = Engine::in_memory(cluster());
    e.set_params(limit(5000.0));
    e.install(f(lim)).expect("v1");
    e.set_params(limit(100.0));
    e.install(f(lim)).expect("v2");
    assert_eq!(amount(&mut e), 100.0);
    assert_eq!(e.rollback().expect("rollback"), 1);
    assert_eq!(amount(&mut e), 5000.0, "version 1 runs with its own limit");
    assert_eq!(e.params(), &limit(5000.0));
    e.activate(2).expect("forward");
    assert_eq!(amount(&mut e), 100.0);
    assert_eq!(e.versions()[0].params, limit(5000.0));
}

#[test]
fn a_dry_run_asks_where_and_howmuch_only_when_when_says_so() {
    // `when` sets what `howmuch` reads, as Mantle's policies set their targets.
    let src = "function when() ready = servers[whoami].keys > 1e12 return ready end
               function howmuch() if not ready then error('asked too early') end return 1 end";
    let mut e = Engine::in_memory(cluster());
    let d = e
        .check(&f(src))
        .expect("a decision would never ask howmuch here");
    assert!(!d.when);
    assert!(d.howmuch.is_none() && d.where_.is_none());
    e.install(f(src)).expect("installs");
}

#[test]
fn decide_without_policy_is_an_error() {
    let mut e = Engine::in_memory(cluster());
    assert!(matches!(e.decide(), Err(PolicyError::NoPolicy)));
    assert!(matches!(e.rollback(), Err(PolicyError::NoPolicy)));
}

#[test]
fn runtime_failure_keeps_policy_installed_and_next_decision_works() {
    let mut e = Engine::in_memory(cluster());
    // Fails only while server 2 reports more than 1000 keys.
    e.install(f(r#"
        function when() if servers[2]["keys"] > 1000 then error("too many") end return true end
        function howmuch() return 5 end
    "#))
        .expect("install");
    e.metrics_mut().set(2, "keys", 5000.0);
    let err = e.decide().expect_err("fails");
    assert_eq!(err.location().map(|l| l.line), Some(2));
    e.metrics_mut().set(2, "keys", 10.0);
    assert_eq!(
        e.decide().expect("recovers").howmuch,
        Some(HowMuch::Amount(5.0))
    );
}

/// Regression: re-activating version 1 after installing version 2 logged its dry run as version 3.
#[test]
fn dry_run_of_a_reactivated_version_is_logged_under_its_own_number() {
    let mut e = Engine::in_memory(cluster());
    e.install(f(V1)).expect("v1");
    e.install(f(V2)).expect("v2");
    e.rollback().expect("back to v1");
    let last = e.log().entries().last().expect("dry-run entries");
    assert!(last.dry_run);
    assert_eq!(last.version, 1);
    assert!(
        e.log().entries().all(|x| x.version <= 2),
        "no entry for a version 3"
    );
}
