//! Which operations the workload called, and how each call ended.
//!
//! An operation is a public async method, named `Type::method`. Every call
//! of the workload goes through one wrapper ([`Recorded`]), so the ending
//! of a call is classified in one place: `reply` (it returned `Ok`, or a
//! value for a method without errors), `error` (it returned `Err`),
//! `timeout` (cut by the caller's `tokio::time::timeout` or the workload's
//! deadline), `dropped` (its future dropped after it was polled at least
//! once, unfinished).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ending {
    /// It returned `Ok` (or a value, for a method without errors).
    Reply,
    /// It returned `Err`.
    Error,
    /// Cut by a timeout of the caller.
    Timeout,
    /// Dropped after being polled at least once, unfinished.
    Dropped,
}

impl Ending {
    /// Every ending, in table order.
    pub const ALL: [Ending; 4] = [
        Ending::Reply,
        Ending::Error,
        Ending::Timeout,
        Ending::Dropped,
    ];

    /// The name in tables and lines.
    pub fn name(self) -> &'static str {
        match self {
            Ending::Reply => "reply",
            Ending::Error => "error",
            Ending::Timeout => "timeout",
            Ending::Dropped => "dropped",
        }
    }

    fn parse(s: &str) -> Option<Ending> {
        Ending::ALL.into_iter().find(|e| e.name() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Calls per operation and ending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    ops: BTreeMap<String, [u64; 4]>,
}

impl Coverage {
    /// Counts one call of `op` that ended `ending`.
    pub fn add(&mut self, op: &str, ending: Ending, n: u64) {
        if let Some(counts) = self.ops.get_mut(op) {
            counts[ending.index()] += n;
        } else {
            let mut counts = [0; 4];
            counts[ending.index()] = n;
            self.ops.insert(op.to_owned(), counts);
        }
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Coverage) {
        for (op, counts) in &other.ops {
            for e in Ending::ALL {
                self.add(op, e, counts[e.index()]);
            }
        }
    }

    /// Calls of `op` that ended `ending`.
    pub fn count(&self, op: &str, ending: Ending) -> u64 {
        self.ops.get(op).map_or(0, |c| c[ending.index()])
    }

    /// The operations called at least once (any ending), sorted.
    pub fn operations(&self) -> impl Iterator<Item = &str> {
        self.ops.keys().map(String::as_str)
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// One line per operation and ending with a count:
    /// `"O\t<op>\t<ending>\t<count>"` (how a worker process hands its
    /// counts to the coordinator).
    pub fn to_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (op, counts) in &self.ops {
            for e in Ending::ALL {
                if counts[e.index()] > 0 {
                    lines.push(format!("O\t{op}\t{e}\t{}", counts[e.index()]));
                }
            }
        }
        lines
    }

    /// Adds a line of [`Coverage::to_lines`]; `false` when it is not one.
    pub fn add_line(&mut self, line: &str) -> bool {
        let mut parts = line.split('\t');
        let (Some("O"), Some(op), Some(ending), Some(n), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return false;
        };
        let (Some(ending), Ok(n)) = (Ending::parse(ending), n.parse()) else {
            return false;
        };
        self.add(op, ending, n);
        true
    }
}

/// The table: one row per operation, one column per ending.
impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.ops.keys().map(String::len).max().unwrap_or(9).max(9);
        write!(f, "  {:<width$}", "operation")?;
        for e in Ending::ALL {
            write!(f, " {:>8}", e.name())?;
        }
        writeln!(f)?;
        for (op, counts) in &self.ops {
            write!(f, "  {op:<width$}")?;
            for c in counts {
                write!(f, " {c:>8}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Shared counts of one process.
#[derive(Debug, Default)]
pub(crate) struct Recorder(Mutex<Coverage>);

impl Recorder {
    pub(crate) fn record(&self, op: &str, ending: Ending) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(op, ending, 1);
    }

    pub(crate) fn snapshot(&self) -> Coverage {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What a finished call counts as.
pub(crate) trait Ended {
    fn ending(&self) -> Ending;
}

impl<T, E> Ended for Result<T, E> {
    fn ending(&self) -> Ending {
        if self.is_ok() {
            Ending::Reply
        } else {
            Ending::Error
        }
    }
}

/// A method without errors (`Leadership::lost`).
impl Ended for redisync::ConnectionState {
    fn ending(&self) -> Ending {
        Ending::Reply
    }
}

impl Ended for () {
    fn ending(&self) -> Ending {
        Ending::Reply
    }
}

/// A call being counted: its ending when it finishes, or `cut` when it is
/// dropped unfinished after a poll (by a timeout, or by whoever held it).
pub(crate) struct Recorded<F: Future> {
    fut: Pin<Box<F>>,
    op: &'static str,
    recorder: Arc<Recorder>,
    cut: Ending,
    polled: bool,
    done: bool,
}

impl<F: Future> Recorded<F>
where
    F::Output: Ended,
{
    pub(crate) fn new(recorder: &Arc<Recorder>, op: &'static str, fut: F, cut: Ending) -> Self {
        Recorded {
            fut: Box::pin(fut),
            op,
            recorder: recorder.clone(),
            cut,
            polled: false,
            done: false,
        }
    }
}

impl<F: Future> Future for Recorded<F>
where
    F::Output: Ended,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polled = true;
        let out = self.fut.as_mut().poll(cx);
        if let Poll::Ready(v) = &out {
            self.done = true;
            self.recorder.record(self.op, v.ending());
        }
        out
    }
}

impl<F: Future> Drop for Recorded<F> {
    fn drop(&mut self) {
        if self.polled && !self.done {
            self.recorder.record(self.op, self.cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_the_table() {
        let mut c = Coverage::default();
        c.add("Lock::try_lock", Ending::Reply, 3);
        c.add("Lock::try_lock", Ending::Dropped, 1);
        c.add("Semaphore::force_release", Ending::Error, 2);
        let mut back = Coverage::default();
        for line in c.to_lines() {
            assert!(back.add_line(&line), "{line}");
        }
        assert_eq!(back, c);
        assert!(!back.add_line("C\tlock\t1"));
        back.merge(&c);
        assert_eq!(back.count("Lock::try_lock", Ending::Reply), 6);
        assert!(c.to_string().contains("Semaphore::force_release"));
    }

    #[tokio::test(start_paused = true)]
    async fn endings_are_told_apart() {
        let r = Arc::new(Recorder::default());
        let ok = Recorded::new(&r, "a", async { Ok::<_, ()>(()) }, Ending::Dropped);
        let _ = ok.await;
        let err = Recorded::new(&r, "a", async { Err::<(), _>(()) }, Ending::Dropped);
        let _ = err.await;
        let slow = || async {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            Ok::<_, ()>(())
        };
        let cut = Recorded::new(&r, "a", slow(), Ending::Timeout);
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), cut).await;
        let mut dropped = Box::pin(Recorded::new(&r, "a", slow(), Ending::Dropped));
        let _ = futures_poll_once(dropped.as_mut()).await;
        drop(dropped);
        // Never polled: not a call.
        drop(Recorded::new(&r, "a", slow(), Ending::Dropped));
        let c = r.snapshot();
        for e in Ending::ALL {
            assert_eq!(c.count("a", e), 1, "{e}");
        }
    }

    async fn futures_poll_once<F: Future + ?Sized>(mut f: Pin<&mut F>) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await
    }
}
