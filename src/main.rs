#![deny(unsafe_code)]

use std::ffi::{OsStr, OsString};

use clap::Parser;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cmd = subcommand(&args);
    let is_hook = cmd == Some(OsStr::new("hook"));
    // The daemon writes to sockets and pipes whose peers may go away, `agx hook` must
    // never die, and `agx run` must outlive its output to end its session: they keep
    // SIGPIPE ignored (Rust's default) and handle EPIPE as an error. Every other command
    // dies of a closed stdout quietly, as git and coreutils do (`agx log | head`),
    // instead of panicking in `println!` (exit 101).
    let daemon = cmd == Some(OsStr::new("mount")) && args.iter().any(|a| a == "--foreground");
    if !(daemon || is_hook || cmd == Some(OsStr::new("run"))) {
        sigpipe::default();
    }
    let cli = match agx::cli::Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // Hooks never fail the agent, not even when called with bad arguments.
        Err(e) if is_hook && e.use_stderr() => {
            say(&format!("agx hook: {}; nothing recorded", first_line(&e)));
            std::process::exit(0);
        }
        Err(e) => e.exit(),
    };
    if is_hook {
        // Not even a bug in agx fails the agent: one line, exit 0.
        std::panic::set_hook(Box::new(|info| {
            let what = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info
                .location()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            say(&format!(
                "agx hook: internal error{at}: {what}; nothing recorded"
            ));
        }));
        let _ = std::panic::catch_unwind(|| agx::cli::run(cli));
        std::process::exit(0);
    }
    if let Err(e) = agx::cli::run(cli) {
        say(&format!("agx: {e}"));
        std::process::exit(1);
    }
}

/// One line on stderr, never a panic (`eprintln!` panics when stderr is a closed pipe
/// and SIGPIPE is ignored).
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The subcommand of a command line, found before clap parses it: the first argument
/// that is not one of the global options (`-C DIR`, `--json`). None when something else
/// comes first (`--help`, `--version`, an unknown option).
fn subcommand(args: &[OsString]) -> Option<&OsStr> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let b = a.as_encoded_bytes();
        if b == b"--json" {
            continue;
        }
        if b == b"-C" {
            it.next();
            continue;
        }
        if b.starts_with(b"-C") || b.starts_with(b"--json=") {
            continue;
        }
        if b.starts_with(b"-") {
            return None;
        }
        return Some(a);
    }
    None
}

/// A clap error's message on one line: its first paragraph (what is wrong, with the
/// argument or the possible values), without "error: ", tips and usage.
fn first_line(e: &clap::Error) -> String {
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return "which agent? (claude, codex, gemini or generic)".into();
    }
    let text = e.render().to_string();
    let para: Vec<&str> = text
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    para.join(" ").trim_start_matches("error: ").to_string()
}

/// The default disposition of SIGPIPE (Rust starts every program with it ignored).
#[allow(unsafe_code)]
mod sigpipe {
    /// Writing to a pipe whose reader is gone then ends the process by SIGPIPE, silently.
    pub fn default() {
        // SAFETY: signal(2) with SIG_DFL installs no handler, so nothing runs in signal
        // context; it is called first thing in main, before any thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}
