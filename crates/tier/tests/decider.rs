//! What decides a tier's capacity: a Lua policy over the tier's view, and `auto`'s gate (it
//! absorbs until the read rate has left the flash crowd, then keeps the keys read recently).

use pliant_policy::{ParamValue, PolicySource};
use pliant_tier::{CacheView, Decider, Resize};

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
        Some(Resize::Capacity(150))
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

/// Feeds `auto` 10-s intervals: in each, `reads(i)` reads spread over `keys(i)` keys (numbered
/// from `first_key(i)`), then a decision with 27 clients. Returns the decisions.
fn run_auto(
    d: &mut Decider,
    intervals: usize,
    shape: impl Fn(usize) -> (u64, u64, u64),
) -> Vec<Option<Resize>> {
    let mut held = 0;
    (0..intervals)
        .map(|i| {
            let (reads, keys, first) = shape(i);
            let t0 = i as f64 * 10.0;
            for r in 0..reads {
                d.on_read(t0 + 10.0 * r as f64 / reads as f64, first + r % keys);
            }
            held += keys;
            let mut v = view(t0 + 10.0, held, u64::MAX, reads as f64 / 10.0);
            v.clients = Some(27.0);
            d.decide(&v).expect("auto decides")
        })
        .collect()
}

/// A deterministic wobble of ±10%.
fn wobble(n: u64, i: usize) -> u64 {
    n * (95 + (i as u64 * 37) % 11) / 100
}

/// The flash crowd: many reads of the same two states, the same two throughout.
fn crowd(i: usize) -> (u64, u64, u64) {
    (wobble(6000, i), 2, 0)
}

/// Exploration: fewer reads, over ten states, new ones every interval.
fn exploring(i: usize) -> (u64, u64, u64) {
    (wobble(800, i), 10, 100 + 5 * i as u64)
}

#[test]
fn auto_keeps_absorbing_while_the_read_rate_stays_in_the_flash_crowd() {
    let mut d = Decider::auto(1, 0.96);
    let decisions = run_auto(&mut d, 360, crowd);
    assert!(
        d.auto_state().is_none(),
        "armed in the crowd: {:?}",
        d.auto_state()
    );
    assert!(
        decisions.iter().all(Option::is_none),
        "resized while absorbing"
    );
}

#[test]
fn auto_arms_once_the_read_rate_has_left_the_flash_crowd_and_trims_to_its_window() {
    let mut d = Decider::auto(1, 0.96);
    let decisions = run_auto(
        &mut d,
        180,
        |i| if i < 60 { crowd(i) } else { exploring(i) },
    );
    let s = d.auto_state().expect("armed after the crowd");
    // The crowd ends at 600 s; the gate fits when the history has grown by a sixteenth, so it
    // sees the change within a few intervals.
    assert!((610.0..=700.0).contains(&s.armed_at), "{s:?}");
    // The crowd and exploration at least; the wobble's levels may split them further.
    assert!(s.regimes >= 2, "{s:?}");
    assert!(decisions[..60].iter().all(Option::is_none));
    // No fetch was ever reported, so misses have no price yet: the window is the longest reuse
    // time seen (under 20 s: each key is read within its interval and the next), and the trim
    // keeps every key read within it.
    let last = decisions
        .last()
        .copied()
        .flatten()
        .expect("trims once armed");
    assert!(
        matches!(last, Resize::Trim(n) if n == s.target_keys),
        "{last:?} vs {s:?}"
    );
    assert!(s.window_seconds > 0.0 && s.window_seconds < 20.0, "{s:?}");
}
