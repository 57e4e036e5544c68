//! `WRstate` persistence: across decisions, across engine restarts, and not during dry runs.

use std::rc::Rc;

use crate::common::{cluster, f};
use pliant_policy::{Engine, EngineConfig, FileStore, HowMuch, StateStore, StateValue};

const COUNTER: &str = r#"
function when() WRstate(RDstate() + 1) return true end
function howmuch() return RDstate() end
"#;

#[test]
fn wrstate_survives_engine_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = Rc::new(FileStore::open(dir.path()).expect("store"));
        let mut e = Engine::new(EngineConfig::default(), store, cluster());
        e.install(f(COUNTER)).expect("install");
        for expect in 1..=3 {
            assert_eq!(
                e.decide().expect("decide").howmuch,
                Some(HowMuch::Amount(f64::from(expect)))
            );
        }
    } // engine dropped: the "service" restarts
    let store = Rc::new(FileStore::open(dir.path()).expect("store"));
    assert_eq!(store.load("p").expect("load"), Some(StateValue::Num(3.0)));
    let mut e = Engine::new(EngineConfig::default(), store, cluster());
    e.install(f(COUNTER)).expect("install");
    assert_eq!(
        e.decide().expect("decide").howmuch,
        Some(HowMuch::Amount(4.0)),
        "continues from the persisted 3"
    );
}

#[test]
fn dry_run_writes_do_not_reach_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Rc::new(FileStore::open(dir.path()).expect("store"));
    let mut e = Engine::new(EngineConfig::default(), store.clone(), cluster());
    e.install(f(COUNTER)).expect("install");
    assert_eq!(
        store.load("p").expect("load"),
        None,
        "install's dry run persisted nothing"
    );
    assert_eq!(
        e.decide().expect("decide").howmuch,
        Some(HowMuch::Amount(1.0))
    );
}

/// A store that fails every write, to check that a failed persist fails the decision instead of
/// silently losing state.
struct FailingStore;
impl StateStore for FailingStore {
    fn load(&self, _: &str) -> Result<Option<StateValue>, pliant_policy::PolicyError> {
        Ok(None)
    }
    fn save(&self, policy: &str, _: &StateValue) -> Result<(), pliant_policy::PolicyError> {
        Err(pliant_policy::PolicyError::State {
            path: format!("/nowhere/{policy}").into(),
            source: std::io::Error::other("disk full"),
        })
    }
}

#[test]
fn failed_state_write_fails_the_decision() {
    let mut e = Engine::new(EngineConfig::default(), Rc::new(FailingStore), cluster());
    e.install(f(COUNTER)).expect("dry run does not write");
    let err = e.decide().expect_err("write fails");
    assert!(err.to_string().contains("disk full"), "{err}");
}
