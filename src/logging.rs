//! A small logger: one line per record on stderr (the daemon's stderr is its log file).
//! The level comes from `AGX_LOG` (error, warn, info, debug, trace).

use std::io::Write;

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{now} {:5} {}: {}", r.level(), r.target(), r.args());
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

pub fn init(default: log::LevelFilter) {
    let level = std::env::var("AGX_LOG")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
