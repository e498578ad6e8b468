//! What a run did and found ([`Summary`]), and how it prints.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::Config;
use crate::checker::{Report, Violation};
use crate::faults::{FaultKind, FaultRecord};
use crate::history::Kind;
use crate::workload::Counts;

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// Its settings.
    pub config: Config,
    /// Per kind, both processes together.
    pub counts: BTreeMap<Kind, Counts>,
    /// Some error messages per kind.
    pub errors: BTreeMap<Kind, Vec<String>>,
    /// Sections recorded per process (`"p0"`, `"p1"`).
    pub sections_by_process: BTreeMap<String, usize>,
    /// Grants (sections valid at their start) per kind.
    pub grants: BTreeMap<Kind, usize>,
    /// Every fault.
    pub faults: Vec<FaultRecord>,
    /// The checker's report; its violations include check (d).
    pub report: Report,
    /// Calls per operation and ending, both processes together.
    pub coverage: crate::Coverage,
}

impl Summary {
    /// Every violation found (must be empty).
    pub fn violations(&self) -> &[Violation] {
        &self.report.violations
    }

    /// Faults of `kind` injected successfully.
    pub fn faults_of(&self, kind: FaultKind) -> usize {
        self.faults
            .iter()
            .filter(|f| f.kind == kind && f.error.is_none())
            .count()
    }

    /// Acquisitions of `kind` (both processes).
    pub fn acquisitions(&self, kind: Kind) -> u64 {
        self.counts.get(&kind).map_or(0, |c| c.acquired)
    }

    /// Grants of `kind` in the history (both processes).
    pub fn grants_of(&self, kind: Kind) -> usize {
        self.grants.get(&kind).copied().unwrap_or(0)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "redisync torture: {:.1} s, lease {} ms, seed {}, 2 processes x 4 client sets (direct, proxied, restart-guarded, replica-synced) x {} tasks per family, {}% of sections end by dropping their guards",
            self.elapsed.as_secs_f64(),
            c.lease.as_millis(),
            c.seed,
            c.tasks_per_family,
            c.drop_percent
        )?;
        writeln!(
            f,
            "per kind: grants (sections valid at their start), acquisitions, busy (wait ran out), cancelled, errors, failed releases, re-entries, extends, guards moved to another task (run-locked: stalls of the runtime thread in the work), downgrades (rw-read) / upgrades refused (rw-write) / holds force-unlocked, hand-offs (lock) / hand-offs (fair-lock) / works cancelled or lost at end (run-locked) / job runs (leader):"
        )?;
        for kind in Kind::ALL {
            let n = self.counts.get(&kind).copied().unwrap_or_default();
            writeln!(
                f,
                "  {:<11} {:>6} grants {:>6} acq {:>5} busy {:>5} cancelled {:>5} errors {:>5} failed-rel {:>5} re-entered {:>5} extended {:>4} moved {}",
                kind.name(),
                self.grants_of(kind),
                n.acquired,
                n.busy,
                n.cancelled,
                n.errors,
                n.release_failed,
                n.reentered,
                n.extended,
                n.moved,
                match kind {
                    Kind::RwRead => format!("{} downgrades", n.special),
                    Kind::RwWrite => format!("{} upgrades refused", n.special),
                    Kind::Lock => format!("{} holds force-unlocked, {} handed off", n.special, n.handed_off),
                    Kind::FairLock => format!("{} handed off", n.handed_off),
                    Kind::RunLocked => format!("{} cancelled or lost at end", n.special),
                    Kind::Leader => format!("{} job runs", n.special),
                    _ => String::new(),
                }
            )?;
        }
        let by_process: Vec<String> = self
            .sections_by_process
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect();
        let r = &self.report;
        writeln!(
            f,
            "sections: {} ({}), {} grants, {} lost before their end",
            r.sections,
            by_process.join(", "),
            r.grants,
            r.lost
        )?;
        let faults: Vec<String> = FaultKind::ALL
            .iter()
            .map(|k| format!("{} {}", k, self.faults_of(*k)))
            .collect();
        let failed = self.faults.iter().filter(|f| f.error.is_some()).count();
        writeln!(
            f,
            "faults injected: {} ({failed} failed to inject)",
            faults.join(", ")
        )?;
        writeln!(
            f,
            "fencing: {} stale writes rejected, {} late writes accepted before any newer grant, {} write-side writes fenced by their own downgrade",
            r.stale_writes_rejected, r.late_writes_accepted, r.downgrade_writes_rejected
        )?;
        writeln!(
            f,
            "excused (a restart that lost data, within the first holder's lease; documented): {} overlaps, {} rejected valid writes",
            r.excused_overlaps, r.excused_rejections
        )?;
        writeln!(
            f,
            "bounded calls (f): {} try_lock(ZERO) and Client::shutdown checked, {} slow ones excused (a fault, a frozen process)",
            r.probes, r.excused_slow
        )?;
        writeln!(
            f,
            "work under a lock (run_locked sections, leader job runs): {} runs, {} steps checked against the holder's lease clock (e); force-unlocks excused {} overlaps, {} rejected valid writes",
            r.works, r.steps, r.forced_overlaps, r.forced_rejections
        )?;
        for (kind, samples) in &self.errors {
            for e in samples.iter().take(2) {
                writeln!(f, "  e.g. {kind} error: {e}")?;
            }
        }
        writeln!(f, "operations (calls per ending):")?;
        write!(f, "{}", self.coverage)?;
        write_violations(f, &r.violations)
    }
}

/// Violations per class ("(a)", "(b)", ..., "(run)"): how many, and the
/// first few of each.
fn write_violations(f: &mut fmt::Formatter<'_>, violations: &[Violation]) -> fmt::Result {
    let mut classes: BTreeMap<String, Vec<&Violation>> = BTreeMap::new();
    for v in violations {
        let text = v.to_string();
        let class = text.split_whitespace().next().unwrap_or("?").to_owned();
        classes.entry(class).or_default().push(v);
    }
    let per_class: Vec<String> = classes
        .iter()
        .map(|(c, vs)| format!("{c} {}", vs.len()))
        .collect();
    writeln!(
        f,
        "violations: {} ({})",
        violations.len(),
        per_class.join(", ")
    )?;
    for vs in classes.values() {
        for v in vs.iter().take(5) {
            writeln!(f, "  {v}")?;
        }
    }
    Ok(())
}
