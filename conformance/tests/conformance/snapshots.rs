//! Snapshots of the human report and of the JSON report's schema.

use crate::zoo;

use emm_conformance::{check, Config, Report};
use zoo::{Bug, ZooFactory};

fn report() -> Report {
    let mut r = check(
        &ZooFactory(Bug::WrongIpcOffset),
        &Config::new(7).depth(8, 16).threads(1),
    );
    r.elapsed_ms = 0;
    r
}

#[test]
fn the_human_report() {
    insta::assert_snapshot!(report().to_table(false));
}

#[test]
fn the_json_report() {
    let r = report();
    let json = r.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for key in ["plugin", "backend", "passed", "seed", "checks"] {
        assert!(v.get(key).is_some(), "{key}");
    }
    let failed = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["passed"] == false)
        .unwrap();
    for key in ["name", "rule", "passed", "failure"] {
        assert!(failed.get(key).is_some(), "{key}");
    }
    for key in ["seed", "ops", "message", "replay", "step"] {
        assert!(failed["failure"].get(key).is_some(), "{key}");
    }
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
    insta::assert_snapshot!(json);
}
