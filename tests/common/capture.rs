//! Records every `log` record and `tracing` event at warn level or above,
//! process-wide (a logger and a global subscriber, installed once), for
//! tests that check that something logs nothing. Tests that use it take
//! [`serial`] (or [`serial_blocking`]) so that one test's records are not
//! another's.

use std::sync::{Mutex, Once};

/// One record at warn level or above: (level, target, message).
pub type Record = (String, String, String);

static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

fn push(level: &str, target: &str, message: String) {
    let mut records = RECORDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    records.push((level.to_owned(), target.to_owned(), message));
}

/// The records since the last call, taken.
pub fn take_records() -> Vec<Record> {
    std::mem::take(
        &mut *RECORDS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

/// Records `log` records at warn level or above.
struct LogCapture;

impl log::Log for LogCapture {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            push(
                record.level().as_str(),
                record.target(),
                record.args().to_string(),
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: LogCapture = LogCapture;

/// Records `tracing` events at warn level or above.
struct TracingCapture;

fn warn_or_worse(level: tracing::Level) -> bool {
    level == tracing::Level::WARN || level == tracing::Level::ERROR
}

/// Writes an event's fields as `name=value` pairs.
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for TracingCapture {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        warn_or_worse(*metadata.level())
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let metadata = event.metadata();
        if warn_or_worse(*metadata.level()) {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            push(metadata.level().as_str(), metadata.target(), fields.0);
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs both captures (once per process).
fn install_capture() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&LOGGER).expect("no other logger");
        log::set_max_level(log::LevelFilter::Warn);
        tracing::subscriber::set_global_default(TracingCapture).expect("no other subscriber");
    });
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Serializes the tests of a binary (the captures are process-wide) and
/// starts each with no records.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    install_capture();
    let guard = SERIAL.lock().await;
    take_records();
    guard
}

/// [`serial`] for a test without a runtime of its own.
pub fn serial_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    install_capture();
    let guard = SERIAL.blocking_lock();
    take_records();
    guard
}
