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
#![allow(clippy::cast_precision_loss)]

use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// The `variant` of the spin-baseline runs.
pub(crate) const BASELINE: &str = "spin";

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

/// One `"kind":"comparison"` object per (scenario, variant other than the
/// baseline), for every scenario with ok baseline runs, in the order the
/// variants first appear.
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

/// The peer every ratio of the peer table is taken against.
pub(crate) const PEER: &str = "rslock";

/// A column of a ratio table: the median of `key` over a variant's ok
/// runs, times `scale`; with `range` also its min-max, with `ratio` a
/// second column with the median's ratio to the reference variant's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Column {
    title: &'static str,
    key: &'static str,
    scale: f64,
    range: bool,
    ratio: bool,
}

impl Column {
    const fn new(title: &'static str, key: &'static str) -> Self {
        Self {
            title,
            key,
            scale: 1.0,
            range: false,
            ratio: false,
        }
    }

    /// Shown in milliseconds (the key is in microseconds).
    const fn ms(self) -> Self {
        Self {
            scale: 0.001,
            ..self
        }
    }

    const fn range(self) -> Self {
        Self {
            range: true,
            ..self
        }
    }

    const fn ratio(self) -> Self {
        Self {
            ratio: true,
            ..self
        }
    }
}

/// A markdown table per scenario: every variant's medians of `columns`,
/// with ratios to the `reference` variant's medians.
pub(crate) struct RatioTable {
    /// The scenarios (labels) with a table, in order.
    pub(crate) scenarios: &'static [&'static str],
    /// The variant every ratio divides by.
    pub(crate) reference: &'static str,
    /// The title of the ratio columns ("x rslock").
    pub(crate) ratio_title: &'static str,
    pub(crate) columns: fn(&str) -> &'static [Column],
    /// The ratio cells also show the min-max of the per-repeat ratios: the
    /// k-th ok run of a variant over the k-th ok run of the reference (the
    /// two ran next to each other when the variants are interleaved).
    pub(crate) paired: bool,
}

/// The columns of the peer table; the first is the headline, shown with
/// its min-max and its ratio to the peer.
fn peer_columns(scenario: &str) -> &'static [Column] {
    const S1: &[Column] = &[
        Column::new("ops/s", "ops_per_s").range().ratio(),
        Column::new("p50 µs", "lat_p50_us").ratio(),
        Column::new("p99 µs", "lat_p99_us"),
        Column::new("cmds/op", "cmds_per_acq"),
    ];
    const S2: &[Column] = &[
        Column::new("acq/s", "acq_per_s").range().ratio(),
        Column::new("wait p99 ms", "wait_p99_us").ms().ratio(),
        Column::new("per-worker min/max", FAIRNESS),
        Column::new("cmds/acq", "cmds_per_acq"),
    ];
    match scenario {
        "S1" | "S4.1" => S1,
        _ => S2,
    }
}

/// The table of `--compare`: per scenario (S1, S2, S4.1, S4.2) and variant,
/// the median of every column over the ok runs, the headline's min-max, and
/// the ratio of each variant's headline median to rslock's (and of p50 /
/// wait p99 likewise).
pub(crate) const PEER_TABLE: RatioTable = RatioTable {
    scenarios: &["S1", "S2", "S4.1", "S4.2"],
    reference: PEER,
    ratio_title: "x rslock",
    columns: peer_columns,
    paired: false,
};

/// The `variant` of the TLS runs of `--tls` is the plain one's with this
/// suffix.
pub(crate) const TLS_SUFFIX: &str = " (TLS)";

/// The columns of the TLS table: every metric the TLS cost is read from
/// with its min-max and its ratio TLS / plain; the commands per operation
/// as a check (the same scripts run either way: ratio 1).
fn tls_columns(scenario: &str) -> &'static [Column] {
    const S1: &[Column] = &[
        Column::new("ops/s", "ops_per_s").range().ratio(),
        Column::new("p50 µs", "lat_p50_us").range().ratio(),
        Column::new("p99 µs", "lat_p99_us"),
        Column::new("cmds/op", "cmds_per_acq").ratio(),
    ];
    const S2: &[Column] = &[
        Column::new("acq/s", "acq_per_s").range().ratio(),
        Column::new("wait p50 ms", "wait_p50_us")
            .ms()
            .range()
            .ratio(),
        Column::new("wait p99 ms", "wait_p99_us")
            .ms()
            .range()
            .ratio(),
        Column::new("per-worker min/max", FAIRNESS),
        Column::new("cmds/acq", "cmds_per_acq").ratio(),
    ];
    if scenario == "S1" {
        S1
    } else {
        S2
    }
}

/// The table of `--tls`: S1 and S2 with `Lock` over TLS and over plain TCP,
/// ratios TLS / plain (of the medians, and min-max of the per-repeat pairs).
pub(crate) const TLS_TABLE: RatioTable = RatioTable {
    scenarios: &["S1", "S2"],
    reference: "Lock",
    ratio_title: "x plain",
    columns: tls_columns,
    paired: true,
};

impl RatioTable {
    /// The markdown tables of `rows` (scenarios without ok runs left out).
    pub(crate) fn render(&self, rows: &[Map<String, Value>]) -> String {
        let mut s = String::new();
        for &scenario in self.scenarios {
            let groups = by_variant(rows, scenario);
            if groups.is_empty() {
                continue;
            }
            let reference = runs_of(&groups, self.reference);
            let columns = (self.columns)(scenario);
            let _ = writeln!(s, "\n**{scenario}**\n");
            let mut head = String::from("| variant | runs |");
            let mut rule = String::from("|---|---:|");
            for c in columns {
                let _ = write!(head, " {} |", c.title);
                rule.push_str("---:|");
                if c.ratio {
                    let _ = write!(head, " {} |", self.ratio_title);
                    rule.push_str("---:|");
                }
            }
            let _ = writeln!(s, "{head}\n{rule}");
            for (v, mine) in &groups {
                let _ = write!(s, "| {v} | {} |", mine.len());
                for c in columns {
                    let values = values(mine, c.key);
                    let med = median(&values);
                    let text = if c.range {
                        headline(&values, c.scale)
                    } else {
                        opt_cell(med, c.scale)
                    };
                    let _ = write!(s, " {text} |");
                    if c.ratio {
                        let r = med
                            .zip(median_of(&reference, c.key))
                            .and_then(|(a, b)| ratio(a, b));
                        let mut text = ratio_cell(r);
                        if self.paired && *v != self.reference {
                            text.push_str(&paired_range(mine, &reference, c.key));
                        }
                        let _ = write!(s, " {text} |");
                    }
                }
                s.push('\n');
            }
        }
        s
    }
}

/// A value for a table cell: no more digits than the noise deserves.
fn cell(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// " (lo-hi)": the min-max of the ratios of the k-th run of `mine` to the
/// k-th of `reference`; empty with fewer than two pairs.
fn paired_range(
    mine: &[&Map<String, Value>],
    reference: &[&Map<String, Value>],
    key: &str,
) -> String {
    let ratios: Vec<f64> = mine
        .iter()
        .zip(reference)
        .filter_map(|(a, b)| ratio(value_of(a, key)?, value_of(b, key)?))
        .collect();
    if ratios.len() < 2 {
        return String::new();
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(" ({lo:.2}-{hi:.2})")
}

/// The markdown table of `--compare` (see [`PEER_TABLE`]).
pub(crate) fn peer_table(rows: &[Map<String, Value>]) -> String {
    PEER_TABLE.render(rows)
}

/// The label of S6's reference rows: `Lock` with all 16 workers in one
/// client (S2's `Lock`, run in S6's interleaving).
pub(crate) const S6_REFERENCE: &str = "S6 1x16";
/// The variant every S6 layout is divided by `S6_REFERENCE`'s runs of.
const S6_REFERENCE_VARIANT: &str = "Lock";

/// The S6 labels ("S6 16x1", ...) among `rows`, in the order they first
/// appear, the reference left out.
fn s6_layouts(rows: &[Map<String, Value>]) -> Vec<&str> {
    let mut layouts: Vec<&str> = Vec::new();
    for row in rows {
        if row.get("scenario").and_then(Value::as_str) != Some("S6") {
            continue;
        }
        match scenario_of(row) {
            Some(l) if l != S6_REFERENCE && !layouts.contains(&l) => layouts.push(l),
            _ => {}
        }
    }
    layouts
}

/// The headline of a group with its min-max when there are several runs:
/// "450 (400-500)".
fn headline(values: &[f64], scale: f64) -> String {
    let Some(med) = median(values) else {
        return "-".into();
    };
    if values.len() < 2 {
        return cell(med * scale);
    }
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "{} ({}-{})",
        cell(med * scale),
        cell(lo * scale),
        cell(hi * scale)
    )
}

fn ratio_cell(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.2}"))
}

/// The markdown tables of S6 (S2 spread over clients), one per layout, the
/// reference (`Lock`, 1 client x 16 workers) first: per variant, the median
/// acq/s (min-max), its ratio to rslock's in the same layout and to the
/// reference's, cmds/acq, the per-worker acquisitions (medians of the least
/// and of the most served worker) and the wait p99. Empty without S6 rows.
pub(crate) fn s6_table(rows: &[Map<String, Value>]) -> String {
    let mut layouts = s6_layouts(rows);
    let reference = by_variant(rows, S6_REFERENCE);
    if !reference.is_empty() {
        layouts.insert(0, S6_REFERENCE);
    }
    if layouts.is_empty() {
        return String::new();
    }
    let window = rows
        .iter()
        .filter(|r| r.get("scenario").and_then(Value::as_str) == Some("S6"))
        .find_map(|r| r.get("duration_s")?.as_f64())
        .map_or_else(|| "?".into(), |d| format!("{d}"));
    let ref_acq = median_of(&runs_of(&reference, S6_REFERENCE_VARIANT), "acq_per_s");
    let mut s = format!(
        "\n**S6**: S2 spread over clients (16 workers on one key, 2 ms holds, fixed 10 s lease; \
         {window} s windows); each client is its own redisync Client / rslock LockManager / \
         fred client (spin); x {S6_REFERENCE_VARIANT} 1x16 = acq/s over that of \
         {S6_REFERENCE_VARIANT} with the 16 workers in one client ({S6_REFERENCE}, same \
         interleaving); per-worker min/max = acquisitions of the least / the most served worker\n"
    );
    for layout in layouts {
        let groups = by_variant(rows, layout);
        let peer = median_of(&runs_of(&groups, PEER), "acq_per_s");
        let _ = writeln!(
            s,
            "\n**{layout}** ({}{})\n\n| variant | runs | acq/s | x {PEER} \
             | x {S6_REFERENCE_VARIANT} 1x16 | cmds/acq | per-worker min/max | wait p99 ms |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|",
            layout_words(layout),
            if layout == S6_REFERENCE {
                ", the reference"
            } else {
                ""
            }
        );
        for (v, mine) in &groups {
            let acq = values(mine, "acq_per_s");
            let med = median(&acq);
            let _ = writeln!(
                s,
                "| {v} | {} | {} | {} | {} | {} | {} | {} |",
                mine.len(),
                headline(&acq, 1.0),
                ratio_cell(med.zip(peer).and_then(|(a, b)| ratio(a, b))),
                ratio_cell(med.zip(ref_acq).and_then(|(a, b)| ratio(a, b))),
                opt_cell(median_of(mine, "cmds_per_acq"), 1.0),
                per_worker_cell(mine),
                opt_cell(median_of(mine, "wait_p99_us"), 0.001),
            );
        }
    }
    s
}

/// "S6 16x1" -> "16 clients x 1 worker".
fn layout_words(layout: &str) -> String {
    let dims = layout.strip_prefix("S6 ").and_then(|d| d.split_once('x'));
    match dims {
        Some((c, w)) => {
            let plural = |n: &str, one: &str, many: &str| {
                if n == "1" {
                    format!("{n} {one}")
                } else {
                    format!("{n} {many}")
                }
            };
            format!(
                "{} x {}",
                plural(c, "client", "clients"),
                plural(w, "worker", "workers")
            )
        }
        None => layout.to_string(),
    }
}

/// The values of `key` over `rows`.
fn values(rows: &[&Map<String, Value>], key: &str) -> Vec<f64> {
    rows.iter().filter_map(|r| value_of(r, key)).collect()
}

fn opt_cell(x: Option<f64>, scale: f64) -> String {
    x.map_or_else(|| "-".into(), |x| cell(x * scale))
}

/// "min / max": the medians of the least and of the most served worker's
/// acquisitions.
fn per_worker_cell(rows: &[&Map<String, Value>]) -> String {
    let (min, max) = (
        median_of(rows, "worker_acq_min"),
        median_of(rows, "worker_acq_max"),
    );
    if min.is_none() && max.is_none() {
        return "-".into();
    }
    // Counts: whole numbers stay whole (a median of an even count may not be).
    let count = |x: Option<f64>| {
        x.map_or_else(
            || "-".into(),
            |x| {
                if x.fract() == 0.0 {
                    format!("{x:.0}")
                } else {
                    format!("{x:.1}")
                }
            },
        )
    };
    format!("{} / {}", count(min), count(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_peer_table_has_medians_min_max_and_ratios_to_rslock() {
        let s1 = |variant: &str, ops: f64, p50: f64| {
            row(json!({"ok": true, "scenario": "S1", "variant": variant,
                "ops_per_s": ops, "lat_p50_us": p50, "lat_p99_us": 400.0, "cmds_per_acq": 8.0}))
        };
        let rows = vec![
            s1("Lock", 9000.0, 100.0),
            s1("rslock", 8000.0, 120.0),
            s1("Lock", 11000.0, 90.0),
            s1("rslock", 10000.0, 100.0),
            // Not ok: left out.
            row(json!({"ok": false, "scenario": "S1", "variant": "Lock", "ops_per_s": 1.0})),
        ];
        let table = peer_table(&rows);
        assert!(table.contains("**S1**"), "{table}");
        assert!(
            table.contains("| Lock | 2 | 10000 (9000-11000) | 1.11 | 95.0 | 0.86 | 400 | 8.00 |"),
            "{table}"
        );
        assert!(
            table.contains("| rslock | 2 | 9000 (8000-10000) | 1.00 | 110 | 1.00 |"),
            "{table}"
        );
        assert!(!table.contains("**S2**"), "{table}");
    }

    #[test]
    fn the_tls_table_has_ratios_tls_over_plain_with_the_pairs_range() {
        let s1 = |variant: &str, ops: f64, p50: f64| {
            row(json!({"ok": true, "scenario": "S1", "variant": variant,
                "ops_per_s": ops, "lat_p50_us": p50, "lat_p99_us": 400.0, "cmds_per_acq": 11.0}))
        };
        let s2 = |variant: &str, acq: f64, p50: f64, p99: f64| {
            row(json!({"ok": true, "scenario": "S2", "variant": variant,
                "acq_per_s": acq, "wait_p50_us": p50, "wait_p99_us": p99,
                "worker_acq_min": 100, "worker_acq_max": 100, "cmds_per_acq": 11.0}))
        };
        let tls = "Lock (TLS)";
        let rows = vec![
            // Pairs (plain, TLS): ops ratios 0.8, 0.9, 0.7.
            s1("Lock", 5000.0, 200.0),
            s1(tls, 4000.0, 250.0),
            s1("Lock", 6000.0, 180.0),
            s1(tls, 5400.0, 200.0),
            s1("Lock", 4000.0, 220.0),
            s1(tls, 2800.0, 300.0),
            s2("Lock", 400.0, 30_000.0, 40_000.0),
            s2(tls, 380.0, 33_000.0, 44_000.0),
            // Not ok: left out.
            row(json!({"ok": false, "scenario": "S2", "variant": tls, "acq_per_s": 1.0})),
        ];
        let table = TLS_TABLE.render(&rows);
        assert!(
            table.contains(
                "| variant | runs | ops/s | x plain | p50 µs | x plain | p99 µs | cmds/op | x plain |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| Lock | 3 | 5000 (4000-6000) | 1.00 | 200 (180-220) | 1.00 | 400 | 11.0 | 1.00 |"
            ),
            "{table}"
        );
        // 4000 / 5000; 250 / 200; pairs 0.8, 0.9, 0.7 and 1.25, 1.11, 1.36.
        assert!(
            table.contains(
                "| Lock (TLS) | 3 | 4000 (2800-5400) | 0.80 (0.70-0.90) | 250 (200-300) \
                 | 1.25 (1.11-1.36) | 400 | 11.0 | 1.00 (1.00-1.00) |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| variant | runs | acq/s | x plain | wait p50 ms | x plain | wait p99 ms | x plain \
                 | per-worker min/max | cmds/acq | x plain |"
            ),
            "{table}"
        );
        // One pair: no range of the pairs.
        assert!(
            table.contains(
                "| Lock (TLS) | 1 | 380 | 0.95 | 33.0 | 1.10 | 44.0 | 1.10 | 1.00 | 11.0 | 1.00 |"
            ),
            "{table}"
        );
        assert!(!table.contains("**S4.1**"), "{table}");
    }

    #[test]
    fn the_s1_table_shows_the_dropped_guard_next_to_the_awaited_one() {
        let s1 = |variant: &str, ops: f64| {
            row(json!({"ok": true, "scenario": "S1", "variant": variant,
                "ops_per_s": ops, "lat_p50_us": 100.0, "lat_p99_us": 400.0, "cmds_per_acq": 10.0}))
        };
        let rows = vec![
            s1("Lock", 7000.0),
            s1("Lock (released by drop)", 8000.0),
            s1("rslock", 4000.0),
        ];
        let table = peer_table(&rows);
        let lines: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
        assert!(
            lines[1].starts_with("| Lock | 1 | 7000 | 1.75 |"),
            "{table}"
        );
        assert!(
            lines[2].starts_with("| Lock (released by drop) | 1 | 8000 | 2.00 |"),
            "{table}"
        );
        assert!(
            lines[3].starts_with("| rslock | 1 | 4000 | 1.00 |"),
            "{table}"
        );
        // No S6 rows: no S6 table.
        assert_eq!(s6_table(&rows), "");
    }

    fn s6(label: &str, variant: &str, acq: f64, min: u64, max: u64) -> Map<String, Value> {
        row(
            json!({"ok": true, "scenario": "S6", "label": label, "variant": variant,
            "duration_s": 5.0, "acq_per_s": acq, "cmds_per_acq": 6.0,
            "worker_acq_min": min, "worker_acq_max": max, "wait_p99_us": 12_345.0}),
        )
    }

    #[test]
    fn the_s6_tables_compare_each_layout_with_rslock_and_with_one_client() {
        let mut rows = Vec::new();
        for (i, k) in [0.0, 20.0, 10.0].into_iter().enumerate() {
            let n = u64::try_from(i).unwrap_or(0);
            rows.extend([
                s6(S6_REFERENCE, "Lock", 400.0 + k, 100, 150),
                s6("S6 16x1", "Lock", 300.0 + k, n, 400),
                s6("S6 16x1", "rslock", 200.0 + k, 10, 300 + n),
                s6("S6 4x4", "Lock", 380.0 + k, 90, 110),
                s6("S6 4x4", "spin", 100.0, 0, 200),
            ]);
        }
        // Not ok: left out (its huge acq/s would move every median).
        let mut bad = s6("S6 16x1", "Lock", 1e9, 0, 0);
        bad.insert("ok".into(), json!(false));
        rows.push(bad);
        // S2 rows do not leak into S6.
        rows.push(row(json!({"ok": true, "scenario": "S2", "variant": "Lock",
            "acq_per_s": 1.0})));
        let table = s6_table(&rows);
        assert!(table.contains("5 s windows"), "{table}");
        // The reference first, then the layouts in the order they ran.
        let reference = table.find("**S6 1x16** (1 client x 16 workers, the reference)");
        let wide = table.find("**S6 16x1** (16 clients x 1 worker)");
        let square = table.find("**S6 4x4** (4 clients x 4 workers)");
        assert!(
            reference < wide && wide < square && reference.is_some(),
            "{table}"
        );
        assert!(
            table.contains("| Lock | 3 | 410 (400-420) | - | 1.00 | 6.00 | 100 / 150 | 12.3 |"),
            "{table}"
        );
        // 310 / 210 and 310 / 410; per-worker: medians of min (0, 1, 2) and max.
        assert!(
            table.contains("| Lock | 3 | 310 (300-320) | 1.48 | 0.76 | 6.00 | 1 / 400 | 12.3 |"),
            "{table}"
        );
        assert!(
            table.contains("| rslock | 3 | 210 (200-220) | 1.00 | 0.51 | 6.00 | 10 / 301 |"),
            "{table}"
        );
        // No rslock in 4x4: no ratio to it.
        assert!(
            table.contains("| Lock | 3 | 390 (380-400) | - | 0.95 |"),
            "{table}"
        );
        assert!(table.contains("| spin | 3 | 100 (100-100) | - | 0.24 | 6.00 | 0 / 200 |"));
        // Without the reference the layouts still print, with no ratio to it.
        let no_ref: Vec<_> = rows
            .iter()
            .filter(|r| scenario_of(r) != Some(S6_REFERENCE))
            .cloned()
            .collect();
        let table = s6_table(&no_ref);
        assert!(!table.contains("**S6 1x16**"), "{table}");
        assert!(
            table.contains("| Lock | 3 | 310 (300-320) | 1.48 | - |"),
            "{table}"
        );
    }

    #[test]
    fn layouts_in_words() {
        assert_eq!(layout_words("S6 16x1"), "16 clients x 1 worker");
        assert_eq!(layout_words("S6 1x16"), "1 client x 16 workers");
        assert_eq!(
            layout_words("S6 16 workers over 3 clients"),
            "S6 16 workers over 3 clients"
        );
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
