//! The comparison rows of `--all` / `--compare`: for every scenario that
//! has spin-baseline runs, each other variant's headline metrics against the
//! baseline's, as medians over the repeats of that run, and the ratio
//! variant / baseline.
//!
//! S5 (many keys) has no baseline: its line is the cluster runs against the
//! one-server runs (`"kind":"scaling"`).
//!
//! Only runs that were `ok` count. A ratio is `null` when the baseline's
//! value is zero or missing (e.g. a spin worker that never got the lock
//! makes the baseline's per-worker fairness 0).
//!
//! The markdown tables of `--compare`, `--tls` and S6 are in `tables`.
#![allow(clippy::cast_precision_loss)]

use serde_json::{json, Map, Value};
use std::fmt::Write as _;

mod tables;

pub(crate) use tables::{peer_table, s6_table, TLS_SUFFIX, TLS_TABLE};

/// The `variant` of the spin-baseline runs.
pub(crate) const BASELINE: &str = "spin";

/// The label of S6's reference rows: `Lock` with all 16 workers in one
/// client (S2's `Lock`, run in S6's interleaving).
pub(crate) const S6_REFERENCE: &str = "S6 1x16";

/// Which direction of a metric is good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
    /// Informational (e.g. the busiest worker's count).
    Neither,
}

impl Better {
    fn name(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
            Better::Neither => "neither",
        }
    }
}

/// Derived metric: `worker_acq_min / worker_acq_max` of an S2 run (1 = every
/// worker got the lock equally often, 0 = some worker starved).
const FAIRNESS: &str = "worker_fairness";

/// The headline metrics of a scenario (keys of the JSON line, or `FAIRNESS`).
fn metrics(scenario: &str) -> &'static [(&'static str, Better)] {
    use Better::{Higher, Lower, Neither};
    match scenario {
        "S1" => &[
            ("ops_per_s", Higher),
            ("lat_p50_us", Lower),
            ("lat_p99_us", Lower),
            ("cmds_per_acq", Lower),
        ],
        "S2" => &[
            ("acq_per_s", Higher),
            ("wait_p50_us", Lower),
            ("wait_p99_us", Lower),
            ("wait_max_us", Lower),
            (FAIRNESS, Higher),
            ("worker_acq_min", Higher),
            ("worker_acq_max", Neither),
            ("self_reacquire_frac", Lower),
            ("xhandoff_gap_p50_us", Lower),
            ("cmds_per_acq", Lower),
        ],
        "S3" => &[
            ("total_s", Lower),
            ("completed", Higher),
            ("timed_out", Lower),
            ("wait_max_us", Lower),
            ("cmds_per_acq", Lower),
            ("cmds_first_300ms", Lower),
        ],
        _ => &[],
    }
}

/// The scenario a row belongs to: its `label` (S4.1, ...) or `scenario`.
fn scenario_of(row: &Map<String, Value>) -> Option<&str> {
    row.get("label")
        .or_else(|| row.get("scenario"))
        .and_then(Value::as_str)
}

fn variant(row: &Map<String, Value>) -> Option<&str> {
    row.get("variant").and_then(Value::as_str)
}

fn value_of(row: &Map<String, Value>, key: &str) -> Option<f64> {
    if key == FAIRNESS {
        let min = row.get("worker_acq_min")?.as_f64()?;
        let max = row.get("worker_acq_max")?.as_f64()?;
        return (max > 0.0).then(|| min / max);
    }
    row.get(key)?.as_f64()
}

/// The median (mean of the two middle values for an even count).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        f64::midpoint(v[mid - 1], v[mid])
    })
}

/// `a / b` with 3 decimals; `None` when `b` is zero.
pub(crate) fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0).then(|| (a / b * 1000.0).round() / 1000.0)
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The median of `key` over `rows`.
fn median_of(rows: &[&Map<String, Value>], key: &str) -> Option<f64> {
    let values: Vec<f64> = rows.iter().filter_map(|r| value_of(r, key)).collect();
    median(&values)
}

/// The ok runs of `scenario`, grouped by variant, in the order the variants
/// first appear.
fn by_variant<'a>(
    rows: &'a [Map<String, Value>],
    scenario: &str,
) -> Vec<(&'a str, Vec<&'a Map<String, Value>>)> {
    let mut groups: Vec<(&str, Vec<&Map<String, Value>>)> = Vec::new();
    let ok = rows
        .iter()
        .filter(|r| r.get("ok").and_then(Value::as_bool) == Some(true))
        .filter(|r| scenario_of(r) == Some(scenario));
    for row in ok {
        let Some(v) = variant(row) else { continue };
        match groups.iter_mut().find(|(name, _)| *name == v) {
            Some((_, runs)) => runs.push(row),
            None => groups.push((v, vec![row])),
        }
    }
    groups
}

/// The runs of `name` among `groups` (none when it did not run).
fn runs_of<'a>(
    groups: &[(&str, Vec<&'a Map<String, Value>>)],
    name: &str,
) -> Vec<&'a Map<String, Value>> {
    groups
        .iter()
        .find(|(v, _)| *v == name)
        .map(|(_, runs)| runs.clone())
        .unwrap_or_default()
}

/// One `"kind":"comparison"` object per (scenario, variant other than the
/// baseline), for every scenario with ok baseline runs, in the order the
/// variants first appear.
pub(crate) fn comparisons(rows: &[Map<String, Value>]) -> Vec<Value> {
    let mut out = Vec::new();
    for scenario in ["S1", "S2", "S3"] {
        let groups = by_variant(rows, scenario);
        let base = runs_of(&groups, BASELINE);
        if base.is_empty() {
            continue;
        }
        for (v, mine) in groups.iter().filter(|(v, _)| *v != BASELINE) {
            let mut m = Map::new();
            for &(key, better) in metrics(scenario) {
                let (a, b) = (median_of(mine, key), median_of(&base, key));
                let r = a.zip(b).and_then(|(a, b)| ratio(a, b));
                m.insert(
                    key.into(),
                    json!({
                        "redisync": a.map(round),
                        "spin": b.map(round),
                        "ratio": r,
                        "better": better.name(),
                    }),
                );
            }
            out.push(json!({
                "kind": "comparison",
                "scenario": scenario,
                "variant": v,
                "baseline": BASELINE,
                "statistic": "median over the ok runs of this invocation",
                "runs": mine.len(),
                "baseline_runs": base.len(),
                "ratio": "variant / baseline",
                "metrics": m,
            }));
        }
    }
    out
}

/// A plain-text table of `comparisons` for stderr.
pub(crate) fn summary(comparisons: &[Value]) -> String {
    let mut s =
        String::from("comparison with the spin baseline (medians; ratio = redisync / spin)\n");
    let num = |v: &Value| {
        v.as_f64()
            .map_or_else(|| "-".to_string(), |x| format!("{x}"))
    };
    for c in comparisons {
        let _ = writeln!(
            s,
            "{} {} ({} runs) vs spin ({} runs):",
            c["scenario"].as_str().unwrap_or("?"),
            c["variant"].as_str().unwrap_or("?"),
            c["runs"],
            c["baseline_runs"]
        );
        let scenario = c["scenario"].as_str().unwrap_or("");
        // In the order of `metrics` (the JSON object is sorted by name).
        for &(key, _) in metrics(scenario) {
            let m = &c["metrics"][key];
            let _ = writeln!(
                s,
                "  {key:<22} {:>12} {:>12}  x{:<8} ({} is better)",
                num(&m["redisync"]),
                num(&m["spin"]),
                num(&m["ratio"]),
                m["better"].as_str().unwrap_or("?"),
            );
        }
    }
    s
}

/// The S5 metrics of the scaling line (cluster / one server).
const S5_METRICS: &[(&str, Better)] = &[
    ("acq_per_s", Better::Higher),
    ("lat_p50_us", Better::Lower),
    ("lat_p99_us", Better::Lower),
    ("wait_p99_us", Better::Lower),
    ("cmds_per_acq", Better::Lower),
    ("busy_waits", Better::Neither),
    ("instances", Better::Neither),
];

/// The S5 variants: one server and the cluster.
const S5_ONE: &str = "Lock";
const S5_CLUSTER: &str = "Lock (cluster)";

/// One `"kind":"scaling"` object: the medians of the ok S5 runs on the
/// cluster and on one server (fixed lease) and their ratio; `None` without
/// ok runs of both.
pub(crate) fn scaling(rows: &[Map<String, Value>]) -> Option<Value> {
    let pick = |v: &str| -> Vec<&Map<String, Value>> {
        rows.iter()
            .filter(|r| r.get("ok").and_then(Value::as_bool) == Some(true))
            .filter(|r| scenario_of(r) == Some("S5") && variant(r) == Some(v))
            .collect()
    };
    let (one, cluster) = (pick(S5_ONE), pick(S5_CLUSTER));
    if one.is_empty() || cluster.is_empty() {
        return None;
    }
    let mut m = Map::new();
    for &(key, better) in S5_METRICS {
        let (c, o) = (median_of(&cluster, key), median_of(&one, key));
        m.insert(
            key.into(),
            json!({
                "cluster": c.map(round),
                "one": o.map(round),
                "ratio": c.zip(o).and_then(|(c, o)| ratio(c, o)),
                "better": better.name(),
            }),
        );
    }
    Some(json!({
        "kind": "scaling",
        "scenario": "S5",
        "variant": S5_CLUSTER,
        "baseline": S5_ONE,
        "statistic": "median over the ok runs of this invocation",
        "runs": cluster.len(),
        "baseline_runs": one.len(),
        "ratio": "cluster / one server",
        "metrics": m,
    }))
}

/// A plain-text table of the `scaling` line for stderr.
pub(crate) fn scaling_summary(c: &Value) -> String {
    let num = |v: &Value| {
        v.as_f64()
            .map_or_else(|| "-".to_string(), |x| format!("{x}"))
    };
    let mut s = format!(
        "S5 many keys: cluster ({} runs) vs one server ({} runs), medians:\n",
        c["runs"], c["baseline_runs"]
    );
    for &(key, _) in S5_METRICS {
        let m = &c["metrics"][key];
        let _ = writeln!(
            s,
            "  {key:<22} {:>12} {:>12}  x{:<8} ({} is better)",
            num(&m["cluster"]),
            num(&m["one"]),
            num(&m["ratio"]),
            m["better"].as_str().unwrap_or("?"),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn row(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(ratio(1.0, 3.0), Some(0.333));
        assert_eq!(ratio(1.0, 0.0), None);
    }

    #[test]
    fn compares_each_variant_with_the_baseline() {
        let rows = vec![
            row(
                json!({"ok": true, "scenario": "S1", "variant": "Lock", "ops_per_s": 9000.0,
                "cmds_per_acq": 6.0}),
            ),
            row(
                json!({"ok": true, "scenario": "S1", "variant": "spin", "ops_per_s": 10000.0,
                "cmds_per_acq": 4.0}),
            ),
            row(
                json!({"ok": true, "scenario": "S1", "variant": "Lock", "ops_per_s": 11000.0,
                "cmds_per_acq": 6.0}),
            ),
            row(
                json!({"ok": true, "scenario": "S1", "variant": "spin", "ops_per_s": 12000.0,
                "cmds_per_acq": 4.0}),
            ),
            // Not ok: ignored.
            row(json!({"ok": false, "scenario": "S1", "variant": "Lock", "ops_per_s": 1.0})),
            row(
                json!({"ok": true, "scenario": "S2", "variant": "Lock", "acq_per_s": 450.0,
                "worker_acq_min": 130, "worker_acq_max": 150}),
            ),
            row(
                json!({"ok": true, "scenario": "S2", "variant": "FairLock", "acq_per_s": 400.0,
                "worker_acq_min": 120, "worker_acq_max": 130}),
            ),
            row(
                json!({"ok": true, "scenario": "S2", "variant": "spin", "acq_per_s": 400.0,
                "worker_acq_min": 0, "worker_acq_max": 300}),
            ),
            // No baseline for S4.1: no comparison.
            row(
                json!({"ok": true, "scenario": "S1", "label": "S4.1", "variant": "Redlock(3)",
                "ops_per_s": 5000.0}),
            ),
        ];
        let c = comparisons(&rows);
        assert_eq!(c.len(), 3);
        assert_eq!(c[0]["scenario"], "S1");
        assert_eq!(c[0]["variant"], "Lock");
        assert_eq!(c[0]["runs"], 2);
        assert_eq!(c[0]["baseline_runs"], 2);
        let ops = &c[0]["metrics"]["ops_per_s"];
        assert_eq!(ops["redisync"], json!(10000.0));
        assert_eq!(ops["spin"], json!(11000.0));
        assert_eq!(ops["ratio"], json!(0.909));
        assert_eq!(ops["better"], "higher");
        assert_eq!(c[0]["metrics"]["cmds_per_acq"]["ratio"], json!(1.5));
        assert_eq!(c[0]["metrics"]["lat_p50_us"]["ratio"], Value::Null);
        assert_eq!(c[1]["variant"], "Lock");
        assert_eq!(c[2]["variant"], "FairLock");
        let fair = &c[1]["metrics"]["worker_fairness"];
        assert_eq!(fair["redisync"], json!(0.867));
        assert_eq!(fair["spin"], json!(0.0));
        assert_eq!(fair["ratio"], Value::Null);
        assert_eq!(c[2]["metrics"]["acq_per_s"]["ratio"], json!(1.0));
        assert!(summary(&c).contains("S2 FairLock (1 runs) vs spin (1 runs):"));
        assert!(scaling(&rows).is_none());
    }

    #[test]
    fn s5_cluster_against_one_server() {
        let s5 = |variant: &str, acq: f64, instances: u64| {
            row(json!({"ok": true, "scenario": "S5", "variant": variant,
                "acq_per_s": acq, "instances": instances, "cmds_per_acq": 8.0}))
        };
        let mut rows = vec![
            s5("Lock", 10_000.0, 1),
            s5("Lock (cluster)", 12_000.0, 3),
            s5("Lock", 8_000.0, 1),
            s5("Lock (cluster)", 11_000.0, 3),
            s5("Lock", 9_000.0, 1),
        ];
        rows.push(row(
            json!({"ok": false, "scenario": "S5", "variant": "Lock (cluster)", "acq_per_s": 1.0}),
        ));
        let c = scaling(&rows).expect("both variants ran");
        assert_eq!(c["kind"], "scaling");
        assert_eq!(c["runs"], 2);
        assert_eq!(c["baseline_runs"], 3);
        let acq = &c["metrics"]["acq_per_s"];
        assert_eq!(acq["cluster"], json!(11_500.0));
        assert_eq!(acq["one"], json!(9_000.0));
        assert_eq!(acq["ratio"], json!(1.278));
        assert_eq!(c["metrics"]["instances"]["ratio"], json!(3.0));
        assert!(scaling_summary(&c).contains("acq_per_s"));
        assert!(scaling(&rows[..1]).is_none());
    }
}
