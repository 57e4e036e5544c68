//! How often the heuristic's `k` = 16 candidates give another plan than evaluating every server,
//! and by how much; and the README's 1,920-onto-128 commission planned both ways, with times.
//!
//! `cargo bench -p pliant-scale --bench candidates` (under a minute on a 2-core machine).

use pliant_scale::Strategy;
use pliant_scale::candidates::{self, Params, Report};
use pliant_scale::emulate::{self, Quartiles};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

fn q(x: &Option<Quartiles>) -> String {
    x.map_or("-".into(), |q| {
        format!("{:.4} [{:.4}–{:.4}]", q.median, q.min, q.max)
    })
}

fn main() {
    let p = Params::default();
    println!(
        "{} seeded clusters of {}–{} servers (after: more than k = {}), {}–{} buckets per server, \
         {} warm-up rescalings, seed {}",
        p.instances,
        p.servers.0,
        p.servers.1,
        p.k,
        p.buckets_per_server.0,
        p.buckets_per_server.1,
        p.warmup,
        p.seed
    );
    println!(
        "| strategy | plans that differ | with k / with all, median [min–max]: L_max | D_max | T_max | bytes moved | worse by > 1% | better by > 1% |"
    );
    println!("|---|---:|---|---|---|---|---:|---:|");
    let reports: Vec<Report> = candidates::compare(&p).expect("compare");
    for r in &reports {
        println!(
            "| {} | {} of {} ({:.1}%) | {} | {} | {} | {} | {} | {} |",
            r.strategy,
            r.differ,
            r.plans,
            100.0 * r.differ as f64 / r.plans as f64,
            q(&r.l_max),
            q(&r.d_max),
            q(&r.t_max),
            q(&r.moved),
            r.worse_by_1pct,
            r.better_by_1pct
        );
    }

    // The README's scenario: 1,920 servers commissioned onto 128 holding 8,192 buckets, after
    // the emulation's 25 warm-up rescalings (planned with k = 16) and one back to 128.
    println!();
    println!(
        "commission-1920-onto-128 (8,192 buckets, 25 warm-up rescalings, seed 1), k = 16 against every server:"
    );
    println!(
        "| strategy | candidates | L_max / L_t | D_max / D_t | T_max / T_t | moved | plan ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for s in Strategy::ALL {
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let (c, mut next) =
            candidates::warmed(128, 8_192, (128, 2_048), 25, s, 16, &mut rng).expect("cluster");
        let r = emulate::rescaling(&c, 2_048, &mut next, &mut rng);
        let b = candidates::both(&c, &r, s, 16).expect("plans");
        for (label, o, ms) in [("16", &b.with_k, b.ms.0), ("all 2,048", &b.all, b.ms.1)] {
            println!(
                "| {} | {label} | {:.4} | {:.4} | {:.4} | {:.4} | {ms:.1} |",
                s.name(),
                o.load_ratio(),
                o.data_ratio(),
                o.transfer_ratio(),
                o.moved_fraction
            );
        }
        println!("| {} | same placement: {} | | | | | |", s.name(), b.same);
    }
}
