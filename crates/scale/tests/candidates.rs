//! The candidate shortcut is a heuristic: evaluating only the `k` least-penalised servers gives
//! other plans than evaluating every server on seeded clusters (`pliant_scale::candidates`; the
//! full measurement is `cargo bench -p pliant-scale --bench candidates`).

use pliant_scale::Strategy;
use pliant_scale::candidates::{self, Params};
use pliant_scale::emulate;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

/// A small version of the bench's comparison, every strategy: how many of 24 plans differ, each
/// count pinned (the run is seeded and deterministic).
#[test]
fn sixteen_candidates_change_plans_that_weigh_more_than_load() {
    let p = Params {
        instances: 24,
        servers: (8, 48),
        buckets_per_server: (4, 12),
        warmup: 1,
        ..Params::default()
    };
    assert_eq!(p.k, 16, "the planner's default");
    let reports = candidates::compare(&p).expect("compare");
    let differ: Vec<(&str, usize)> = reports.iter().map(|r| (r.strategy, r.differ)).collect();
    // With load alone weighed, the penalty is (almost) the load term, which orders the servers
    // by what a bucket adds too: the shortcut finds the same server. With data or transfer
    // weighed, it does not.
    assert_eq!(
        differ,
        [("l", 0), ("lt", PIN_LT), ("dt", PIN_DT), ("ldt", PIN_LDT)]
    );
    for r in &reports {
        assert_eq!(r.plans, 24);
        assert!(r.worse_by_1pct + r.better_by_1pct <= 2 * r.differ);
        assert_eq!(r.l_max.is_some(), r.differ > 0, "{}", r.strategy);
        if let Some(q) = r.l_max {
            assert!(q.min <= q.median && q.median <= q.max);
            assert!(q.min > 0.5 && q.max < 2.0, "{q:?}");
        }
    }
}

const PIN_LT: usize = 5;
const PIN_DT: usize = 3;
const PIN_LDT: usize = 14;

/// With at least as many candidates as servers, the two searches are the same search.
#[test]
fn as_many_candidates_as_servers_is_the_exhaustive_search() {
    for s in Strategy::ALL {
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        let (c, mut next) =
            candidates::warmed(24, 400, (20, 40), 2, s, 16, &mut rng).expect("cluster");
        let r = emulate::rescaling(&c, 40, &mut next, &mut rng);
        let b = candidates::both(&c, &r, s, 40).expect("plans");
        assert!(b.same, "{}", s.name());
        assert_eq!(b.with_k, b.all);
    }
}

/// The comparison refuses a range in which the rescaled cluster cannot have more than `k`
/// servers (the two searches would be the same by construction), and one with a single size
/// above `k`, whose draw of a size after unlike the size before would never end.
#[test]
fn a_range_that_never_exceeds_k_is_refused() {
    for servers in [(2, 16), (8, 17), (20, 20)] {
        let p = Params {
            servers,
            ..Params::default()
        };
        assert!(candidates::compare(&p).is_err(), "{servers:?}");
    }
}
