//! Text and JSON renderings of inspections (the JSON schema is in
//! docs/operating.md, "JSON output").

use std::fmt::Write as _;
use std::time::Duration;

use redisync::inspect::{HoldMode, Holder, Inspection, LockKind, Waiter};
use serde_json::{json, Value};

/// A duration for people: `850 ms`, `28.3 s`, `12 min`.
fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 600_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} min", d.as_secs() / 60)
    }
}

fn lease(d: Option<Duration>) -> String {
    d.map_or("no TTL".to_owned(), |d| {
        if d.is_zero() {
            "lease ended (reclaimed by the next acquisition)".to_owned()
        } else {
            format!("lease {} left", human(d))
        }
    })
}

fn mode_word(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Read => "reader",
        HoldMode::Write => "writer",
        _ => "holder",
    }
}

fn holder_line(h: &Holder) -> String {
    let mut line = format!("  {:<8} {}", mode_word(h.mode), h.owner);
    if let HoldMode::Permits(n) = h.mode {
        let _ = write!(line, "  permits {n}");
    } else {
        let _ = write!(line, "  holds {}", h.holds);
    }
    if let Some(t) = h.token {
        let _ = write!(line, "  token {t}");
    }
    let _ = write!(line, "  {}", lease(h.lease_left));
    line
}

fn waiter_line(n: usize, w: &Waiter) -> String {
    let what = if w.mode == HoldMode::Write {
        "writer waiting"
    } else {
        "waiting"
    };
    format!(
        "  {:<8} #{n} {}  ({what}; place expires in {} unless it asks again)",
        "waiter",
        w.owner,
        human(w.expires_in)
    )
}

/// `inspect`'s text: a block per kind.
pub(crate) fn inspections_text(found: &[Inspection]) -> String {
    let mut out = String::new();
    for i in found {
        let _ = writeln!(out, "{} {}", i.kind, i.name);
        let state = if let Some(n) = i.count {
            latch_state(n, i.lease_left)
        } else if i.is_held() {
            match i.kind {
                LockKind::Semaphore => "permits held".to_owned(),
                _ => format!("held ({})", lease(i.lease_left)),
            }
        } else {
            "free".to_owned()
        };
        let _ = writeln!(out, "  state    {state}");
        if let Some(who) = &i.identity {
            let _ = writeln!(out, "  identity {who}");
        }
        if let Some(p) = i.permits {
            let _ = writeln!(out, "  permits  {} of {} in use", p.in_use, p.total);
        }
        if let Some(t) = i.last_token {
            let _ = writeln!(out, "  tokens   newest issued {t}");
        }
        for h in &i.holders {
            let _ = writeln!(out, "{}", holder_line(h));
        }
        for (n, w) in i.waiters.iter().enumerate() {
            let _ = writeln!(out, "{}", waiter_line(n + 1, w));
        }
        if i.contended && i.waiters.is_empty() {
            let _ = writeln!(
                out,
                "  note     a task of another client asked while it was taken (its waiters wait in their client)"
            );
        }
        if i.left_out > 0 {
            let _ = writeln!(out, "  note     {} more entries not shown", i.left_out);
        }
    }
    out.trim_end().to_owned()
}

/// A count-down latch's state: its count left and when it ends.
fn latch_state(count: u64, ttl: Option<Duration>) -> String {
    let ends = ttl.map_or("no TTL".to_owned(), |d| format!("ends in {}", human(d)));
    if count == 0 {
        format!("open ({ends})")
    } else {
        format!("counting down, {count} to go ({ends})")
    }
}

/// One line of `list`.
fn summary(i: &Inspection) -> String {
    if let Some(n) = i.count {
        return latch_state(n, i.lease_left);
    }
    let mut s = match (i.kind, i.holders.as_slice()) {
        (LockKind::Semaphore, holders) => {
            let p = i.permits.map_or("?".to_owned(), |p| {
                format!("{}/{} permits in use", p.in_use, p.total)
            });
            format!("{p}, {} holder(s)", holders.len())
        }
        (_, []) => "free".to_owned(),
        (_, [h]) => format!(
            "{} {} ({} hold{}), {}",
            if h.mode == HoldMode::Read {
                "read by"
            } else {
                "held by"
            },
            h.owner,
            h.holds,
            if h.holds == 1 { "" } else { "s" },
            lease(h.lease_left)
        ),
        (_, many) => format!("read by {} owners", many.len()),
    };
    if let Some(t) = i.token {
        let _ = write!(s, ", token {t}");
    }
    if !i.waiters.is_empty() {
        let _ = write!(s, ", {} waiting", i.waiters.len());
    }
    s
}

/// `list`'s text: one line per lock.
pub(crate) fn list_text(found: &[Inspection]) -> String {
    if found.is_empty() {
        return "no redisync lock matches".to_owned();
    }
    let width = found.iter().map(|i| i.name.len()).max().unwrap_or(0);
    found
        .iter()
        .map(|i| format!("{:<9} {:<width$}  {}", i.kind, i.name, summary(i)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `unlock --force`'s text.
pub(crate) fn removed_text(removed: &[Inspection]) -> String {
    removed
        .iter()
        .map(|i| format!("removed {} {}: was {}", i.kind, i.name, summary(i)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ms(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| {
        json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    })
}

fn mode_json(mode: HoldMode) -> (&'static str, Value) {
    match mode {
        HoldMode::Read => ("read", Value::Null),
        HoldMode::Write => ("write", Value::Null),
        HoldMode::Permits(n) => ("permits", json!(n)),
        _ => ("exclusive", Value::Null),
    }
}

/// One inspection as JSON.
fn inspection_json(i: &Inspection) -> Value {
    let holders: Vec<Value> = i
        .holders
        .iter()
        .map(|h| {
            let (mode, permits) = mode_json(h.mode);
            json!({
                "owner": h.owner,
                "client_id": h.client_id.map(|u| u.to_string()),
                "mode": mode,
                "permits": permits,
                "holds": h.holds,
                "token": h.token,
                "lease_left_ms": ms(h.lease_left),
            })
        })
        .collect();
    let waiters: Vec<Value> = i
        .waiters
        .iter()
        .map(|w| {
            json!({
                "owner": w.owner,
                "client_id": w.client_id.map(|u| u.to_string()),
                "mode": mode_json(w.mode).0,
                "expires_in_ms": ms(Some(w.expires_in)),
            })
        })
        .collect();
    json!({
        "kind": i.kind.as_str(),
        "name": i.name,
        "exists": i.exists,
        "held": i.is_held(),
        "lease_left_ms": ms(i.lease_left),
        "token": i.token,
        "last_token": i.last_token,
        "permits": i.permits.map(|p| json!({"total": p.total, "in_use": p.in_use})),
        "count": i.count,
        "contended": i.contended,
        "identity": i.identity,
        "holders": holders,
        "waiters": waiters,
        "left_out": i.left_out,
    })
}

/// `inspect --json` and `list --json`: `{"locks": [...]}`.
pub(crate) fn inspections_json(found: &[Inspection]) -> String {
    json!({ "locks": found.iter().map(inspection_json).collect::<Vec<_>>() }).to_string()
}

/// `unlock --force --json`: `{"removed": [...]}` (the state before).
pub(crate) fn removed_json(removed: &[Inspection]) -> String {
    json!({ "removed": removed.iter().map(inspection_json).collect::<Vec<_>>() }).to_string()
}

/// Any error with `--json`: `{"error": {"kind": ..., "message": ...}}`.
pub(crate) fn error_json(kind: &str, message: &str) -> String {
    json!({ "error": { "kind": kind, "message": message } }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human(Duration::from_millis(850)), "850 ms");
        assert_eq!(human(Duration::from_millis(28_340)), "28.3 s");
        assert_eq!(human(Duration::from_secs(1800)), "30 min");
        assert_eq!(lease(None), "no TTL");
        assert_eq!(
            latch_state(3, Some(Duration::from_secs(60))),
            "counting down, 3 to go (ends in 60.0 s)"
        );
        assert_eq!(latch_state(0, None), "open (no TTL)");
    }
}
