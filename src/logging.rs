//! A small logger: one line per record on stderr (the daemon's stderr is its log file).
//! The level comes from `AGX_LOG` (error, warn, info, debug, trace).

use std::io::Write;

use std::sync::atomic::{AtomicBool, Ordering};

struct Logger;

/// Set once anything at warning level or above was logged.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Whether a warning or error was logged in this process.
pub fn warned() -> bool {
    WARNED.load(Ordering::Relaxed)
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        // fuser unmounts again when its session ends; after `agx unmount` that second
        // attempt fails harmlessly (EINVAL: nothing mounted there any more).
        if r.target() == "fuser::session" && r.args().to_string().starts_with("Failed to umount") {
            return;
        }
        if r.level() <= log::Level::Warn {
            WARNED.store(true, Ordering::Relaxed);
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
