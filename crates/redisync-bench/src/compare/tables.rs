//! The markdown tables: per scenario and variant, medians with their
//! min-max and ratios to a reference variant (`--compare` against rslock,
//! `--tls` against plain TCP), and S6's one table per client layout.

use serde_json::{Map, Value};
use std::fmt::Write as _;

use super::{
    by_variant, median, median_of, ratio, runs_of, scenario_of, value_of, FAIRNESS, S6_REFERENCE,
};

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
    use crate::compare::tests::row;
    use serde_json::json;

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
}
