//! The command line: clap definitions, each command a thin layer over the library.
//! Exit codes: 0 success, 1 user error (one line naming what was wrong), 2 usage error.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

mod branches;
mod history;
mod hooks;
mod keep;
mod restore;
mod sessions;
mod undo;
mod verify;

use crate::control::engine::{OnConflict, RestoreOpts};

use crate::mount::{self, MountRequest};

#[derive(Debug, Parser)]
#[command(name = "agx", version, about = "Undoable, attributable, branchable agent work on a project", long_about = None)]
pub struct Cli {
    /// Run as if started in DIR (default: the project containing the current directory).
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print one JSON document on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// The branch a history command is about (log, show, diff, restore, oops, blame,
    /// checkpoint; default: the branch whose view .agx/branches/NAME/ the command runs in,
    /// else the main tree); for `run`, the branch the command runs in.
    #[arg(long, global = true, value_name = "NAME")]
    pub branch: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Put agx in front of a project directory (in place, unless --at is given).
    Mount {
        /// The project directory (default: the current directory).
        dir: Option<PathBuf>,
        /// Serve the project at MOUNTPOINT instead of over the project itself.
        #[arg(long, value_name = "MOUNTPOINT")]
        at: Option<PathBuf>,
        /// Stay in the foreground (logs on stderr) instead of detaching.
        #[arg(long)]
        foreground: bool,
        /// Let other users' processes use the mount (the default as root).
        #[arg(long, overrides_with = "no_allow_other")]
        allow_other: bool,
        /// Only the mounting user may use the mount.
        #[arg(long, hide = true)]
        no_allow_other: bool,
    },
    /// Flush, unmount and stop the daemon.
    Unmount {
        /// The project or mountpoint (default: the current project).
        dir: Option<PathBuf>,
        /// Detach now even if processes still use the mount; the daemon exits after them.
        #[arg(long)]
        lazy: bool,
    },
    /// Whether the project is mounted, by which daemon, since when, in which mode.
    Status,
    /// Recorded changes, newest first.
    Log {
        /// Only changes to this path (or below it).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Only changes after this REF.
        #[arg(long, value_name = "REF")]
        since: Option<String>,
        /// At most N changes.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// A file's bytes at REF, on stdout.
    Show {
        #[arg(value_name = "REF")]
        at: String,
        path: PathBuf,
    },
    /// Differences between two points (FROM: the mount's start; TO: now).
    Diff {
        /// FROM and TO.
        #[arg(value_name = "REF", num_args = 0..=2)]
        refs: Vec<String>,
        /// Limit to these paths (after --).
        #[arg(last = true)]
        paths: Vec<PathBuf>,
        /// Only a summary of changed files and lines.
        #[arg(long)]
        stat: bool,
    },
    /// Run CMD in a new agent session: every change it and its descendants make belongs
    /// to the session. Returns CMD's exit code. With --branch NAME, CMD runs in the
    /// branch's view (.agx/branches/NAME/), at the same place relative to the project.
    Run {
        /// The agent's name (default: the command's name).
        #[arg(long)]
        agent: Option<String>,
        /// A name for the session.
        #[arg(long)]
        name: Option<String>,
        /// The command and its arguments (after --).
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// Agent sessions.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Check every stored object against its hash, every event's references and the
    /// timeline's schema; exit 1 when anything is wrong.
    Verify {
        /// Move corrupt objects to .agx/quarantine/ (nothing is deleted).
        #[arg(long)]
        repair: bool,
    },
    /// Record one agent hook event (run by the agent's hook settings; never fails).
    #[command(subcommand)]
    Hook(hooks::HookCmd),
    /// Add or remove agx's entries in an agent's hook settings.
    #[command(subcommand)]
    Hooks(hooks::HooksCmd),
    /// Bring the tree (or PATHS) back to REF; the restore itself can be undone.
    Restore {
        #[arg(value_name = "REF")]
        at: String,
        paths: Vec<PathBuf>,
        /// Show the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Why (recorded with the restore's events).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// session:ID: restore the paths nobody else changed since, leave the others.
        #[arg(long, conflicts_with = "force")]
        skip_conflicts: bool,
        /// session:ID: restore also the paths someone else changed since.
        #[arg(long)]
        force: bool,
        /// Leave alone the paths that cannot be restored (their content at REF was not
        /// kept, or their current content is over the capture size limit and could not
        /// be kept) and restore the rest. Without it such a restore changes nothing.
        #[arg(long)]
        skip_missing: bool,
    },
    /// Undo the latest agent session (or burst of changes); run again right after, redo it.
    Oops {
        /// Show what it would do and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Who last changed each line of a file: event, session, agent, time.
    Blame { path: PathBuf },
    /// Mark the current point with a name (O(1): nothing is copied or scanned); `list`
    /// and `delete` manage checkpoints.
    Checkpoint(keep::CheckpointArgs),
    /// Branches: writable copy-on-write views of the project under .agx/branches/NAME/.
    #[command(subcommand)]
    Branch(branches::BranchCmd),
    /// Bring a branch's changes into the main tree: a three-way merge per file (base: the
    /// branch's base point). Conflicts are listed with their hunks and nothing changes
    /// until each has a choice. One recorded operation: the `agx restore event:N` it
    /// prints undoes it.
    Merge {
        /// The branch (NAME or branch:NAME).
        name: String,
        /// Show what would change and the conflicts; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Settle every conflict with the main tree's version.
        #[arg(long, conflicts_with_all = ["theirs", "markers"])]
        ours: bool,
        /// Settle every conflict with the branch's version.
        #[arg(long, conflicts_with = "markers")]
        theirs: bool,
        /// Settle text conflicts by writing both versions with conflict markers, as git
        /// does (other conflicts still need --ours or --theirs).
        #[arg(long)]
        markers: bool,
        /// Settle one path's conflict: PATH=ours, PATH=theirs or PATH=markers (repeat
        /// for more paths; wins over --ours/--theirs/--markers for that path).
        #[arg(long = "take", value_name = "PATH=CHOICE")]
        take: Vec<String>,
        /// Merge even while files are open for writing in the main tree.
        #[arg(long)]
        force: bool,
    },
    /// Make the main tree equal to a branch, whole. The main tree as it was is kept as a
    /// new branch (printed); other changes wait while it runs. One recorded operation:
    /// switch back, or the `agx restore event:N` it prints, undoes it.
    Switch {
        /// The branch (NAME or branch:NAME).
        name: String,
        /// Switch even while files are open for writing in the main tree.
        #[arg(long)]
        force: bool,
    },
    /// Keep the point REF restorable in full whatever gc does (alone: list the pins).
    Pin {
        #[arg(value_name = "REF")]
        at: Option<String>,
    },
    /// Remove a pin (refused inside an agent session).
    Unpin {
        #[arg(value_name = "REF")]
        at: String,
    },
    /// Drop history older than the window, except pinned points and checkpoints (refused
    /// inside an agent session).
    Gc {
        /// The window to keep (default: history.keep in .agx/config.toml, else 30d).
        #[arg(long, value_name = "DURATION")]
        keep: Option<String>,
        /// Report what would be dropped and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Start a session rooted at a process (default: the calling shell); prints its id.
    Start {
        /// The agent's name (claude, codex, ...).
        #[arg(long)]
        agent: Option<String>,
        /// A name for the session.
        #[arg(long)]
        name: Option<String>,
        /// The root process: it and everything it starts belong to the session.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// End a session (default: the one this process belongs to).
    End { id: Option<String> },
    /// Every session: id, agent, name, start, end, events, files changed.
    List,
    /// One session in full: files changed, prompts.
    Show { id: String },
}

/// The project a command is about: -C, else the nearest ancestor of the current
/// directory that has an agx mount (live or dead) or a `.agx` directory, else the current
/// directory.
fn project_dir(cli_dir: Option<&Path>) -> PathBuf {
    if let Some(d) = cli_dir {
        return d.to_path_buf();
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    for a in cwd.ancestors() {
        if mount::known(a) || a.join(crate::sys::path::AGX_DIR_NAME).is_dir() {
            return a.to_path_buf();
        }
        // A branch mounted on its own (`agx branch mount`): its project.
        if let Some(st) = mount::branchmount::at(a) {
            return st.project;
        }
    }
    cwd
}

/// Whether a command reports, before it runs, a daemon of its project that stopped
/// without `agx unmount` (`mount::record`). `mount`, `unmount` and `status` report it
/// themselves; hooks never write to the agent's terminal.
fn warns_first(cmd: &Cmd) -> bool {
    !matches!(
        cmd,
        Cmd::Mount { .. } | Cmd::Unmount { .. } | Cmd::Status | Cmd::Hook(_) | Cmd::Hooks(_)
    )
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    history::set_branch_flag(cli.branch.clone());
    if warns_first(&cli.cmd) {
        mount::record::warn(&project_dir(cli.dir.as_deref()));
    }
    match cli.cmd {
        Cmd::Run { agent, name, cmd } => {
            crate::logging::init(log::LevelFilter::Warn);
            let dir = project_dir(cli.dir.as_deref());
            let code = sessions::run(&dir, agent, name, &cmd, cli.json)?;
            std::process::exit(code);
        }
        Cmd::Session(sc) => {
            crate::logging::init(log::LevelFilter::Warn);
            let dir = project_dir(cli.dir.as_deref());
            match sc {
                SessionCmd::Start { agent, name, pid } => {
                    sessions::session_start(&dir, agent, name, pid, cli.json)
                }
                SessionCmd::End { id } => sessions::session_end(&dir, id, cli.json),
                SessionCmd::List => sessions::session_list(&dir, cli.json),
                SessionCmd::Show { id } => sessions::session_show(&dir, &id, cli.json),
            }
        }
        Cmd::Verify { repair } => {
            crate::logging::init(log::LevelFilter::Warn);
            verify::verify(&project_dir(cli.dir.as_deref()), repair, cli.json)
        }
        Cmd::Hook(hc) => hooks::hook(cli.dir.as_deref(), hc, cli.json),
        Cmd::Hooks(hc) => {
            crate::logging::init(log::LevelFilter::Warn);
            hooks::hooks(&project_dir(cli.dir.as_deref()), hc, cli.json)
        }
        Cmd::Log { path, since, limit } => {
            crate::logging::init(log::LevelFilter::Warn);
            let dir = project_dir(cli.dir.as_deref());
            history::log(&dir, path.as_deref(), since.as_deref(), limit, cli.json)
        }
        Cmd::Show { at, path } => {
            crate::logging::init(log::LevelFilter::Warn);
            history::show(&project_dir(cli.dir.as_deref()), &at, &path)
        }
        Cmd::Diff { refs, paths, stat } => {
            crate::logging::init(log::LevelFilter::Warn);
            history::diff(
                &project_dir(cli.dir.as_deref()),
                &refs,
                &paths,
                stat,
                cli.json,
            )
        }
        Cmd::Restore {
            at,
            paths,
            dry_run,
            yes,
            reason,
            skip_conflicts,
            force,
            skip_missing,
        } => {
            crate::logging::init(log::LevelFilter::Warn);
            let on_conflict = if force {
                OnConflict::Force
            } else if skip_conflicts {
                OnConflict::Skip
            } else {
                OnConflict::Refuse
            };
            restore::restore(
                &project_dir(cli.dir.as_deref()),
                &at,
                &paths,
                dry_run,
                yes,
                RestoreOpts {
                    on_conflict,
                    reason,
                    note: None,
                    skip_missing,
                    branch: None,
                },
                cli.json,
            )
        }
        Cmd::Oops { dry_run, yes } => {
            crate::logging::init(log::LevelFilter::Warn);
            undo::oops(&project_dir(cli.dir.as_deref()), dry_run, yes, cli.json)
        }
        Cmd::Blame { path } => {
            crate::logging::init(log::LevelFilter::Warn);
            undo::blame(&project_dir(cli.dir.as_deref()), &path, cli.json)
        }
        Cmd::Checkpoint(args) => {
            crate::logging::init(log::LevelFilter::Warn);
            keep::checkpoint(&project_dir(cli.dir.as_deref()), args, cli.json)
        }
        Cmd::Branch(cmd) => {
            crate::logging::init(log::LevelFilter::Warn);
            branches::branch(&project_dir(cli.dir.as_deref()), cmd, cli.json)
        }
        Cmd::Merge {
            name,
            dry_run,
            ours,
            theirs,
            markers,
            take,
            force,
        } => {
            crate::logging::init(log::LevelFilter::Warn);
            let all = if ours {
                Some("ours")
            } else if theirs {
                Some("theirs")
            } else if markers {
                Some("markers")
            } else {
                None
            };
            branches::merge(
                &project_dir(cli.dir.as_deref()),
                branches::MergeArgs {
                    name,
                    dry_run,
                    all,
                    take,
                    force,
                },
                cli.json,
            )
        }
        Cmd::Switch { name, force } => {
            crate::logging::init(log::LevelFilter::Warn);
            branches::switch(&project_dir(cli.dir.as_deref()), &name, force, cli.json)
        }
        Cmd::Pin { at } => {
            crate::logging::init(log::LevelFilter::Warn);
            keep::pin(&project_dir(cli.dir.as_deref()), at, cli.json)
        }
        Cmd::Unpin { at } => {
            crate::logging::init(log::LevelFilter::Warn);
            keep::unpin(&project_dir(cli.dir.as_deref()), at, cli.json)
        }
        Cmd::Gc { keep: k, dry_run } => {
            crate::logging::init(log::LevelFilter::Warn);
            keep::gc(&project_dir(cli.dir.as_deref()), k, dry_run, cli.json)
        }
        Cmd::Mount {
            dir,
            at,
            foreground,
            allow_other,
            no_allow_other,
        } => {
            crate::logging::init(if foreground {
                log::LevelFilter::Info
            } else {
                log::LevelFilter::Warn
            });
            let dir = dir
                .or(cli.dir)
                .unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| ".".into()));
            let req = MountRequest {
                dir,
                at,
                foreground,
                allow_other: if allow_other {
                    Some(true)
                } else if no_allow_other {
                    Some(false)
                } else {
                    None
                },
            };
            let prepared = mount::prepare(&req)?;
            // Reported once: this mount's daemon replaces the record.
            if let Some(i) = &prepared.interrupted {
                eprintln!("agx: warning: {}", i.message);
            }
            if !foreground {
                let users = mount::procs::with_cwd_inside(&prepared.mountpoint);
                if !users.is_empty() {
                    eprintln!(
                        "agx: warning: these processes have their working directory inside {} and bypass agx until they cd there again: {}",
                        prepared.mountpoint.display(),
                        mount::procs::list(&users)
                    );
                }
            }
            // One line per dead mount replaced: the journal and staging it left are
            // finished by the new daemon before it reports ready.
            let recovered: Vec<String> = prepared
                .recovered
                .iter()
                .map(|r| {
                    let pid = r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
                    format!(
                        "recovered from a crashed daemon{pid}: removed its dead mount at {}; the changes it had in flight are recorded",
                        r.mountpoint.display()
                    )
                })
                .collect();
            if foreground {
                for line in &recovered {
                    eprintln!("agx: {line}");
                }
                let notify = std::env::var_os("AGX_READY_STDOUT").is_some();
                mount::serve(&prepared, notify)?;
                return Ok(());
            }
            let st = mount::spawn(&prepared)?;
            if cli.json {
                let mut v = serde_json::to_value(&st)?;
                v["recovered"] = serde_json::to_value(&prepared.recovered)?;
                v["interrupted"] = serde_json::to_value(&prepared.interrupted)?;
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for line in &recovered {
                    println!("{line}");
                }
                println!(
                    "mounted {} (daemon pid {}, {})",
                    st.mountpoint.display(),
                    st.pid,
                    st.mode
                );
            }
            Ok(())
        }
        Cmd::Unmount { dir, lazy } => {
            crate::logging::init(log::LevelFilter::Warn);
            let dir = dir.unwrap_or_else(|| project_dir(cli.dir.as_deref()));
            let msg = mount::unmount(&dir, lazy)?;
            // A dead mount removed: its daemon's record is readable now.
            mount::record::warn(&dir);
            if cli.json {
                println!("{}", serde_json::json!({ "ok": true, "message": msg }));
            } else {
                println!("{msg}");
            }
            Ok(())
        }
        Cmd::Status => {
            crate::logging::init(log::LevelFilter::Warn);
            let dir = project_dir(cli.dir.as_deref());
            let st = mount::status(&dir)?;
            let hist = if st.dead {
                None
            } else {
                keep::status_history(&st.project, st.mounted)
            };
            if cli.json {
                let mut v = serde_json::to_value(&st)?;
                if let Some(h) = &hist {
                    for k in [
                        "events",
                        "store_bytes",
                        "oldest_point",
                        "oldest_time",
                        "unsaved",
                        "disk_full",
                    ] {
                        v[k] = h[k].clone();
                    }
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if st.mounted {
                println!("project:    {}", st.project.display());
                println!(
                    "mounted at: {}",
                    st.mountpoint.as_deref().unwrap_or(Path::new("?")).display()
                );
                println!("daemon pid: {}", st.pid.unwrap_or(0));
                println!("since:      {}", st.since.as_deref().unwrap_or("?"));
                println!("mode:       {}", st.mode.as_deref().unwrap_or("?"));
                if let Some(l) = &st.log {
                    println!("log:        {}", l.display());
                }
                if let Some(h) = &hist {
                    keep::print_status_history(h);
                }
            } else if st.dead {
                println!(
                    "{}: dead mount at {}: its daemon died without unmounting (every access fails with \"transport endpoint is not connected\"); `agx mount` recovers it, losing nothing recorded, or `agx unmount` removes it",
                    st.project.display(),
                    st.mountpoint.as_deref().unwrap_or(Path::new("?")).display()
                );
            } else {
                println!("{}: not mounted", st.project.display());
                if let Some(h) = &hist {
                    keep::print_status_history(h);
                }
            }
            if let (Some(i), false) = (&st.interrupted, cli.json) {
                println!("warning:    {}", i.message);
            }
            Ok(())
        }
    }
}
