//! The study's policy registry is the one list: the demo tables of docs/parsplice.md are held to it.

use pliant_parsplice::PolicyKind;
use pliant_parsplice::study;

/// The first column of every table in the "The demo's tables" section of docs/parsplice.md, one
/// list per table, emphasis stripped.
fn guide_demo_tables() -> Vec<Vec<String>> {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/parsplice.md"
    ))
    .expect("docs/parsplice.md");
    let section = guide
        .split("\n## The demo's tables")
        .nth(1)
        .expect("docs/parsplice.md has a section \"## The demo's tables…\"");
    // The rest of the heading line is not part of the section's tables.
    let section = section.split_once('\n').map_or(section, |(_, s)| s);
    let section = section.split("\n#").next().unwrap_or(section);
    let mut tables: Vec<Vec<String>> = Vec::new();
    let mut in_table = false;
    for line in section.lines() {
        let Some(row) = line.strip_prefix('|') else {
            in_table = false;
            continue;
        };
        let first = row.split('|').next().unwrap_or("").trim().replace("**", "");
        if !in_table {
            // A header row starts a table; the separator row under it is skipped below.
            in_table = true;
            tables.push(Vec::new());
        } else if !first.starts_with("---") {
            tables.last_mut().expect("a table").push(first);
        }
    }
    tables
}

#[test]
fn the_guide_demo_tables_list_the_registry_policies_in_order() {
    let labels: Vec<String> = study::policies().iter().map(|p| p.kind.label()).collect();
    let tables = guide_demo_tables();
    assert_eq!(
        tables.len(),
        4,
        "the four runs of the demo (two growth rates × 2.5 h, 4.2 h)"
    );
    for (i, t) in tables.iter().enumerate() {
        assert_eq!(
            t,
            &labels,
            "docs/parsplice.md demo table {} against study::policies()",
            i + 1
        );
    }
}

#[test]
fn the_registry_starts_with_the_baseline_and_charts_it_and_auto() {
    let p = study::policies();
    assert_eq!(
        p[0].kind,
        PolicyKind::Unlimited,
        "efficiency is relative to the first"
    );
    let charted: Vec<String> = p
        .iter()
        .filter(|p| p.charted)
        .map(|p| p.kind.label())
        .collect();
    assert_eq!(charted.first().map(String::as_str), Some("unlimited"));
    assert!(charted.iter().any(|l| l == "auto"), "{charted:?}");
    let mut labels: Vec<String> = p.iter().map(|p| p.kind.label()).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(
        labels.len(),
        p.len(),
        "labels name runs in reports: they must be unique"
    );
}
