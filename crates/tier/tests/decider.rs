//! What decides a tier's capacity: a Lua policy over the tier's view, and `auto`'s gate (it
//! absorbs until the read rate has left the flash crowd, then keeps the keys read recently).

use pliant_policy::{ParamValue, PolicySource};
use pliant_tier::{CacheView, Decider};

fn view(t: f64, keys: u64, capacity: u64, reads_per_s: f64) -> CacheView {
    CacheView {
        t,
        keys,
        capacity,
        reads_per_s,
        ..CacheView::default()
    }
}

#[test]
fn a_lua_decider_sees_the_view_and_its_howmuch_becomes_the_capacity() {
    let source = PolicySource::functions(
        "half",
        "function when() return servers[whoami].keys > params.limit end
         function howmuch() return servers[whoami].keys / 2 end",
    );
    let mut d = Decider::lua(source, [("limit".into(), ParamValue::Num(100.0))].into())
        .expect("policy installs");
    assert_eq!(
        d.decide(&view(10.0, 50, u64::MAX, 1.0)).expect("decides"),
        None
    );
    assert_eq!(
        d.decide(&view(20.0, 300, u64::MAX, 1.0)).expect("decides"),
        Some(150)
    );
    // A decision that asks for the capacity the tier already has is no resize.
    assert_eq!(d.decide(&view(30.0, 300, 150, 1.0)).expect("decides"), None);
    assert_eq!(
        Decider::Fixed
            .decide(&view(40.0, 300, 10, 1.0))
            .expect("decides"),
        None
    );
}

#[test]
fn a_lua_decider_that_fails_reports_the_policy_error() {
    // It installs (its check sees an empty cache) and fails on the first full one.
    let source = PolicySource::functions(
        "broken",
        "function when() if servers[whoami].keys > 0 then error('full') end return false end",
    );
    let mut d = Decider::lua(source, Default::default()).expect("policy installs");
    let e = d
        .decide(&view(10.0, 1, 1, 1.0))
        .expect_err("the policy's error");
    assert!(e.to_string().contains("full"), "{e}");
}

/// Feeds `auto` one decision every 10 s up to `until`, reads/s from `rate`, and a read of key
/// `t / 10` at every step (one new key per interval); returns its decisions.
fn run_auto(d: &mut Decider, until: f64, rate: impl Fn(f64) -> f64) -> Vec<Option<u64>> {
    let mut out = Vec::new();
    let mut keys = 0;
    let mut t = 0.0;
    while t <= until {
        d.on_read(t, (t / 10.0) as u64);
        keys += 1;
        out.push(
            d.decide(&view(t, keys, u64::MAX, rate(t)))
                .expect("auto decides"),
        );
        t += 10.0;
    }
    out
}

#[test]
fn auto_keeps_absorbing_until_the_history_can_show_the_flash_crowds_decline() {
    // Half an hour of history first (see `Auto`): before that no fit is made, whatever the rate.
    let mut d = Decider::auto(1);
    let decisions = run_auto(&mut d, 1790.0, |t| 500.0 * (-t / 600.0).exp() + 10.0);
    assert!(d.auto_threshold().is_none(), "armed before the first fit");
    assert!(
        decisions.iter().all(Option::is_none),
        "resized while absorbing"
    );
}

#[test]
fn auto_arms_after_the_decline_and_trims_to_the_keys_read_in_its_window() {
    let mut d = Decider::auto(1);
    let decisions = run_auto(&mut d, 3600.0, |t| 500.0 * (-t / 600.0).exp() + 10.0);
    let th = d
        .auto_threshold()
        .expect("armed after the flash crowd's decline");
    assert!(th.start > 0.0 && th.keys > 0, "{th:?}");
    // Armed, the target is the distinct keys read from 300 s ago to now, both ends included:
    // one per 10-s interval.
    assert_eq!(decisions.last().copied().flatten(), Some(31));
    // And it armed at the first fit that could: nothing was resized before 1,800 s.
    assert!(decisions[..180].iter().all(Option::is_none));
    assert!(decisions[180].is_some());
}
