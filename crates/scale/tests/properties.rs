//! Every plan, on random instances and every strategy: no bucket lost or duplicated,
//! decommissioned servers empty, capacity respected, and the streamed moves lead exactly to the
//! placement.

use pliant_scale::{
    Bucket, Cluster, Move, PlanError, PlanOptions, Rescale, Strategy as Goal, TransferModel, plan,
};
use proptest::prelude::*;

fn instance() -> impl Strategy<Value = (Cluster, Rescale)> {
    (
        2usize..12,
        1usize..60,
        0usize..6,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(servers, buckets, change, grow, seed)| {
            let mut x = seed | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let bs: Vec<Bucket> = (0..buckets)
                .map(|i| Bucket {
                    id: 1000 + i as u32,
                    size: 1.0 + (next() % 100) as f64,
                    load: 0.1 + (next() % 50) as f64,
                    server: (next() % servers as u64) as u32,
                })
                .collect();
            let total: f64 = bs.iter().map(|b| b.size).sum();
            let change = change.min(servers - 1);
            let r = if grow {
                Rescale {
                    add: (0..change as u32).map(|i| 100 + i).collect(),
                    remove: vec![],
                }
            } else {
                Rescale {
                    add: vec![],
                    remove: (0..change as u32).collect(),
                }
            };
            let after = servers - r.remove.len() + r.add.len();
            // A capacity with some slack over the average, so it binds but a placement exists.
            let capacity = (total / after as f64) * 1.6 + 100.0;
            (
                Cluster {
                    servers: (0..servers as u32).collect(),
                    buckets: bs,
                    capacity,
                    transfer: TransferModel::Network { s_net: 10.0 },
                },
                r,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn plans_keep_every_constraint((c, r) in instance(), k in prop::sample::select(vec![1usize, 4, 16, usize::MAX]), slots in any::<bool>()) {
        for s in Goal::ALL {
            let mut moves: Vec<Move> = Vec::new();
            match plan(&c, &r, s.weights(), PlanOptions { candidates: k, slots }, |m| moves.push(m)) {
                Ok(p) => {
                    prop_assert!(c.validate(&r, &p).is_ok(), "{:?}", c.validate(&r, &p));
                    prop_assert!(c.check_moves(&moves, &p).is_ok());
                    prop_assert_eq!(p.len(), c.buckets.len());
                    for leaving in &r.remove {
                        prop_assert!(!p.contains(leaving));
                    }
                    let o = c.evaluate(&r, &p).expect("valid");
                    prop_assert!(o.d_max <= c.capacity * (1.0 + 1e-9));
                    let moved: f64 = moves.iter().map(|m| m.bytes).sum();
                    prop_assert!((moved - o.moved_bytes).abs() < 1e-6);
                }
                // Greedy placement can strand a bucket on a tight capacity; that must be a typed
                // error, never a bad plan.
                Err(e) => prop_assert!(matches!(e, PlanError::Capacity { .. }), "{e}"),
            }
        }
    }
}

fn small() -> Cluster {
    Cluster {
        servers: vec![1, 2, 3],
        buckets: (0..6)
            .map(|i| Bucket {
                id: i,
                size: 10.0,
                load: 1.0,
                server: 1 + i % 3,
            })
            .collect(),
        capacity: 30.0,
        transfer: TransferModel::Network { s_net: 1.0 },
    }
}

#[test]
fn violations_are_typed_errors() {
    let c = small();
    let r = Rescale {
        add: vec![],
        remove: vec![3],
    };
    let mut p: Vec<u32> = c.buckets.iter().map(|b| b.server).collect();
    assert!(matches!(c.validate(&r, &p), Err(PlanError::NotEmpty(3))));
    p = vec![1, 1, 1, 1, 2, 2];
    assert!(matches!(
        c.validate(&r, &p),
        Err(PlanError::Capacity { server: 1, .. })
    ));
    assert!(matches!(
        c.validate(&r, &vec![1, 2]),
        Err(PlanError::Length { got: 2, buckets: 6 })
    ));
    assert!(matches!(
        c.validate(&r, &vec![1, 2, 9, 1, 2, 1]),
        Err(PlanError::NotAServer { server: 9, .. })
    ));
    let bad = Rescale {
        add: vec![2],
        remove: vec![],
    };
    assert!(matches!(c.after(&bad), Err(PlanError::Request(_))));
    let too_small = Rescale {
        add: vec![],
        remove: vec![2, 3],
    };
    let e = plan(
        &c,
        &too_small,
        Goal::Lt.weights(),
        PlanOptions::default(),
        |_| {},
    )
    .expect_err("60 bytes do not fit one 30-byte server");
    assert!(e.to_string().contains("do not fit"), "{e}");
}

#[test]
fn decommission_moves_exactly_the_leaving_servers_data_under_lt() {
    let c = small();
    let r = Rescale {
        add: vec![],
        remove: vec![3],
    };
    let mut moves = Vec::new();
    let p = plan(&c, &r, Goal::Lt.weights(), PlanOptions::default(), |m| {
        moves.push(m)
    })
    .expect("plan");
    let o = c.evaluate(&r, &p).expect("valid");
    assert_eq!(
        moves.len(),
        2,
        "only server 3's two buckets move: {moves:?}"
    );
    assert!(moves.iter().all(|m| m.from == 3));
    assert_eq!(o.l_max, 3.0);
    assert_eq!(o.d_max, 30.0);
}

#[test]
fn commission_balances_load_onto_new_servers() {
    let mut c = small();
    c.capacity = f64::INFINITY;
    let r = Rescale {
        add: vec![4, 5, 6],
        remove: vec![],
    };
    let p = plan(&c, &r, Goal::L.weights(), PlanOptions::default(), |_| {}).expect("plan");
    let o = c.evaluate(&r, &p).expect("valid");
    assert_eq!(o.l_max, 1.0, "six equal buckets on six servers");
}

/// The storage-bottleneck form: a server's time is bytes read / S_read + bytes written / S_write,
/// in the outcome and in the exact model.
#[test]
fn storage_bound_transfer_time() {
    let mut c = small();
    c.capacity = f64::INFINITY;
    c.transfer = TransferModel::Storage {
        s_read: 10.0,
        s_write: 5.0,
    };
    let r = Rescale {
        add: vec![],
        remove: vec![3],
    };
    let p = plan(&c, &r, Goal::Lt.weights(), PlanOptions::default(), |_| {}).expect("plan");
    let o = c.evaluate(&r, &p).expect("valid");
    // Server 3 reads its two 10-byte buckets (20 / 10 = 2 s); each receiver writes 10 bytes
    // (10 / 5 = 2 s), so the slowest server takes 2 s.
    assert_eq!(o.t_max, 2.0);
    #[cfg(feature = "exact")]
    {
        let opt = pliant_scale::exact::optimum(&c, &r, Goal::Lt).expect("exact");
        assert_eq!(opt.t_max, 2.0);
    }
}
