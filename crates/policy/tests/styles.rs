//! Both policy styles: global functions in one file, and Mantle-library chunks.

use crate::common::{cluster, f};
use pliant_policy::{Callback, Engine, HowMuch, PolicyError, PolicySource, ServerId, Style};

#[test]
fn function_style_missing_callbacks_take_defaults() {
    let mut e = Engine::in_memory(cluster());
    e.install(f("function howmuch() return 1 end"))
        .expect("install");
    let d = e.decide().expect("decide");
    assert!(!d.when, "default when is false");
    assert_eq!(d.where_, None, "where not evaluated when `when` is false");
    assert_eq!(d.load, None, "no load callback, no computed load");

    e.install(f("function when() return true end"))
        .expect("install");
    let d = e.decide().expect("decide");
    assert!(d.when);
    assert_eq!(
        d.where_,
        Some(Default::default()),
        "default where sends nothing"
    );
    assert_eq!(d.howmuch, None, "default howmuch is no amount");
}

#[test]
fn function_style_defining_nothing_is_rejected() {
    let mut e = Engine::in_memory(cluster());
    let err = e.install(f("local x = 1")).expect_err("empty policy");
    assert!(err.to_string().contains("defines none of"), "{err}");
    let err = e.install(f("when = 3")).expect_err("when not a function");
    assert!(err.to_string().contains("expected a function"), "{err}");
}

/// An existing Mantle-library policy, unmodified: chunks return their decision, `where.lua`
/// fills the global `targets`, and `load.lua` runs before every other chunk.
#[test]
fn chunk_style_runs_load_before_each_chunk() {
    let src = PolicySource::chunks(
        "mantle",
        [
            (
                Callback::Load,
                r#"calls = (calls or 0) + 1
                   servers[whoami]["load"] = servers[whoami]["req_rate"] * 2
                   return servers[whoami]["load"]"#,
            ),
            (Callback::When, r#"return servers[whoami]["load"] > 50"#),
            (
                Callback::Where,
                r#"targets[2] = servers[whoami]["load"] / 2
                   targets[3] = calls"#,
            ),
            (Callback::HowMuch, r#"return {"half", calls}"#),
        ],
    );
    let mut e = Engine::in_memory(cluster());
    e.install(src).expect("install");
    let d = e.decide().expect("decide");
    assert_eq!(d.load, Some(60.0));
    assert!(d.when);
    let w = d.where_.expect("where");
    assert_eq!(w.get(&ServerId::Num(2)), Some(&30.0));
    // Dry run ran load 3 times; this decision's where is the 5th load, howmuch the 6th.
    assert_eq!(w.get(&ServerId::Num(3)), Some(&5.0));
    assert_eq!(
        serde_json::to_value(d.howmuch.expect("howmuch")).expect("json"),
        serde_json::json!(["half", 6])
    );
}

#[test]
fn chunk_style_where_may_return_a_new_table() {
    let src = PolicySource::chunks(
        "w",
        [
            (Callback::When, "return true"),
            (Callback::Where, "return {[3] = 4}"),
            (Callback::HowMuch, "return 8"),
        ],
    );
    let mut e = Engine::in_memory(cluster());
    e.install(src).expect("install");
    let d = e.decide().expect("decide");
    assert_eq!(d.where_.expect("where").get(&ServerId::Num(3)), Some(&4.0));
    assert_eq!(d.howmuch, Some(HowMuch::Amount(8.0)));
}

#[test]
fn chunk_files_on_disk_load_as_chunk_style() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pol = dir.path().join("spill");
    std::fs::create_dir(&pol).expect("mkdir");
    std::fs::write(
        pol.join("when.lua"),
        "return servers[whoami][\"keys\"] > 10",
    )
    .expect("w");
    let src = PolicySource::from_paths(&[pol.join("when.lua")]).expect("load");
    assert!(matches!(src.style, Style::Chunks(_)));
    assert_eq!(src.name, "spill");
    let mut e = Engine::in_memory(cluster());
    e.install(src).expect("install");
    assert!(e.decide().expect("decide").when);
}

#[test]
fn syntax_error_names_the_chunk_file_and_line() {
    let src = PolicySource::chunks("bad", [(Callback::When, "local x = \n\n if then")]);
    let mut e = Engine::in_memory(cluster());
    let err = e.install(src).expect_err("syntax");
    let loc = err.location().expect("location");
    assert_eq!((loc.chunk.as_str(), loc.line), ("when.lua", 3));
}

#[test]
fn a_name_that_is_no_file_resolves_to_the_shipped_policy_and_a_file_wins_over_it() {
    let shipped = PolicySource::resolve(&["static-limit".into()]).expect("shipped policy");
    assert_eq!(shipped.name, "static-limit");
    let e = PolicySource::resolve(&["no-such-policy".into()]).expect_err("unknown name");
    assert!(matches!(&e, PolicyError::NotFound { path } if path.as_os_str() == "no-such-policy"));
    assert!(
        e.to_string().contains("static-limit"),
        "the error lists what is shipped: {e}"
    );
    // A file of that name in the working directory is what the user meant.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("static-limit");
    std::fs::write(&file, "function when() return true end").expect("write");
    let mine = PolicySource::resolve(std::slice::from_ref(&file)).expect("the file");
    assert_ne!(
        mine, shipped,
        "the file, not the shipped policy of the same name"
    );
}
