//! `agx branch`: make, list, show, rename and delete branches.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Subcommand;

use super::history::{rfc3339, Project};
use crate::control::proto::Request;

#[derive(Debug, Subcommand)]
pub enum BranchCmd {
    /// Make a branch: a writable copy-on-write view of the project at
    /// .agx/branches/NAME/ (O(1): nothing is copied or scanned).
    Create {
        /// The branch's name (the rules of checkpoint names; not `main`).
        name: String,
        /// Start from this point of the main tree instead of now (a checkpoint, a time
        /// like 10m, event:N, session:ID).
        #[arg(long, value_name = "REF")]
        from: Option<String>,
    },
    /// Branches, oldest first: name, base point, when and by whom made, files changed,
    /// last change.
    List {
        /// Also deleted branches (kept until gc).
        #[arg(long)]
        all: bool,
    },
    /// One branch in full.
    Show { name: String },
    /// Give a branch another name.
    Rename { old: String, new: String },
    /// Delete a branch (refused inside an agent session): it is no longer listed or
    /// reachable; its history and layer stay until gc.
    Delete { name: String },
    /// Serve a branch at a directory of its own too (an empty directory outside the
    /// project), for agents and tools that need their own absolute path. The project's
    /// daemon serves it and records every change there as in .agx/branches/NAME/.
    Mount {
        name: String,
        /// The directory to serve it at.
        #[arg(long, value_name = "DIR")]
        at: PathBuf,
    },
    /// Stop serving the branch mounted at DIR.
    Unmount {
        #[arg(value_name = "DIR")]
        mountpoint: PathBuf,
    },
}

fn no_progress(_: usize, _: usize) {}

/// The JSON form of a branch (stable field names).
fn branch_json(v: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "id": v["id"],
        "name": v["name"],
        "base": v["base"],
        "from": v["from_ref"],
        "created": v["created_ns"].as_i64().map(rfc3339),
        "creator": v["creator"],
        "session": v["session"],
        "deleted": v["deleted_ns"].as_i64().map(rfc3339),
        "note": v["note"],
        "events": v["events"],
        "files_changed": v["files_changed"],
        "last_change": v["last_change_ns"].as_i64().map(rfc3339),
        "path": v["path"],
        "mounted_at": v["mounted_at"],
        "took_us": v["took_us"],
    })
}

fn print_json(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn local_time(ns: i64) -> String {
    use chrono::{Local, TimeZone};
    Local
        .timestamp_nanos(ns)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

fn time_of(v: &serde_json::Value) -> Option<String> {
    v.as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| t.timestamp_nanos_opt())
        .map(local_time)
}

pub fn branch(dir: &Path, cmd: BranchCmd, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    match cmd {
        BranchCmd::Create { name, from } => {
            let v = p.request(Request::BranchCreate { name, from }, &mut no_progress)?;
            let b = branch_json(&v);
            if json {
                return print_json(&b);
            }
            println!(
                "branch {} at point {}: .agx/branches/{}/",
                b["name"].as_str().unwrap_or("?"),
                b["base"],
                b["name"].as_str().unwrap_or("?"),
            );
            Ok(())
        }
        BranchCmd::List { all } => {
            let v = p.request(Request::BranchList { all }, &mut no_progress)?;
            let list: Vec<serde_json::Value> = v
                .as_array()
                .map(|a| a.iter().map(branch_json).collect())
                .unwrap_or_default();
            if json {
                return print_json(&serde_json::Value::Array(list));
            }
            if list.is_empty() {
                println!("no branches (agx branch create NAME makes one)");
            }
            for b in &list {
                let mut line = format!(
                    "{:<24} base {:<7} made {} by {}  {} file(s) changed",
                    b["name"].as_str().unwrap_or("?"),
                    b["base"],
                    time_of(&b["created"]).unwrap_or_default(),
                    b["creator"].as_str().unwrap_or("?"),
                    b["files_changed"],
                );
                if let Some(t) = time_of(&b["last_change"]) {
                    line.push_str(&format!(", last {t}"));
                }
                if let Some(n) = b["note"].as_str() {
                    line.push_str(&format!("  [{n}]"));
                }
                if let Some(t) = time_of(&b["deleted"]) {
                    line.push_str(&format!("  [deleted {t}]"));
                }
                for m in b["mounted_at"].as_array().into_iter().flatten() {
                    line.push_str(&format!("  [mounted at {}]", m.as_str().unwrap_or("?")));
                }
                println!("{line}");
            }
            Ok(())
        }
        BranchCmd::Show { name } => {
            let v = p.request(Request::BranchShow { name }, &mut no_progress)?;
            let b = branch_json(&v);
            if json {
                return print_json(&b);
            }
            println!("branch:   {}", b["name"].as_str().unwrap_or("?"));
            println!("path:     {}/", b["path"].as_str().unwrap_or("?"));
            let from = b["from"]
                .as_str()
                .map(|f| format!(" (from {f})"))
                .unwrap_or_default();
            println!("base:     point {}{from}", b["base"]);
            println!(
                "made:     {} by {}",
                time_of(&b["created"]).unwrap_or_default(),
                b["creator"].as_str().unwrap_or("?")
            );
            println!(
                "changes:  {} event(s), {} file(s){}",
                b["events"],
                b["files_changed"],
                time_of(&b["last_change"])
                    .map(|t| format!(", last {t}"))
                    .unwrap_or_default()
            );
            if let Some(n) = b["note"].as_str() {
                println!("note:     {n}");
            }
            for m in b["mounted_at"].as_array().into_iter().flatten() {
                println!("mounted:  {}", m.as_str().unwrap_or("?"));
            }
            Ok(())
        }
        BranchCmd::Rename { old, new } => {
            let v = p.request(
                Request::BranchRename {
                    old: old.clone(),
                    new,
                },
                &mut no_progress,
            )?;
            let b = branch_json(&v);
            if json {
                return print_json(&b);
            }
            println!("branch {old} is now {}", b["name"].as_str().unwrap_or("?"));
            Ok(())
        }
        BranchCmd::Mount { name, at } => {
            let at = std::path::absolute(&at)?;
            let v = p.request(
                Request::BranchMount {
                    name,
                    at: crate::control::proto::hex(at.as_os_str().as_encoded_bytes()),
                },
                &mut no_progress,
            )?;
            let b = branch_json(&v);
            if json {
                return print_json(&b);
            }
            let mp = b["mounted_at"]
                .as_array()
                .and_then(|a| a.last())
                .and_then(|m| m.as_str())
                .unwrap_or("?")
                .to_string();
            println!(
                "branch {} mounted at {mp} (agx branch unmount {mp} ends it)",
                b["name"].as_str().unwrap_or("?")
            );
            Ok(())
        }
        BranchCmd::Unmount { mountpoint } => {
            let at = std::path::absolute(&mountpoint)?;
            let v = p.request(
                Request::BranchUnmount {
                    at: crate::control::proto::hex(at.as_os_str().as_encoded_bytes()),
                },
                &mut no_progress,
            )?;
            if json {
                return print_json(&branch_json(&v));
            }
            println!(
                "branch {} no longer mounted at {}",
                v["name"].as_str().unwrap_or("?"),
                at.display()
            );
            Ok(())
        }
        BranchCmd::Delete { name } => {
            let v = p.request(Request::BranchDelete { name }, &mut no_progress)?;
            let b = branch_json(&v);
            if json {
                return print_json(&b);
            }
            println!(
                "deleted branch {} (its history and layer stay until gc)",
                b["name"].as_str().unwrap_or("?")
            );
            Ok(())
        }
    }
}

fn progress_printer(what: &'static str) -> impl FnMut(usize, usize) {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    move |d, t| {
        if t > 200 && (d % 100 == 0 || d == t) {
            if tty {
                eprint!("\r{what}: {d}/{t}");
                if d == t {
                    eprintln!();
                }
            } else {
                eprintln!("{what}: {d}/{t}");
            }
        }
    }
}

/// `agx merge NAME`: the choices of the command line, checked.
pub struct MergeArgs {
    pub name: String,
    pub dry_run: bool,
    pub all: Option<&'static str>,
    pub take: Vec<String>,
    pub force: bool,
}

pub fn merge(dir: &Path, a: MergeArgs, json: bool) -> Result<()> {
    let mut paths = std::collections::BTreeMap::new();
    for t in &a.take {
        let Some((path, choice)) = t.rsplit_once('=') else {
            anyhow::bail!("--take {t}: expected PATH=ours, PATH=theirs or PATH=markers");
        };
        if !matches!(choice, "ours" | "theirs" | "markers") {
            anyhow::bail!("--take {t}: '{choice}' is not ours, theirs or markers");
        }
        paths.insert(path.trim_end_matches('/').to_string(), choice.to_string());
    }
    let p = Project::open(dir)?;
    let opts = crate::control::merge::MergeOpts {
        dry_run: a.dry_run,
        all: a.all.map(str::to_string),
        paths,
        force: a.force,
    };
    let mut prog = progress_printer("merging");
    let v = p.request(
        Request::Merge {
            name: a.name.clone(),
            opts,
        },
        &mut prog,
    )?;
    let unresolved = v["unresolved"].as_array().map_or(0, |u| u.len());
    if json {
        print_json(&v)?;
    } else {
        print_merge(&v);
    }
    if unresolved > 0 && !a.dry_run {
        anyhow::bail!(
            "nothing merged: {unresolved} conflict(s) to settle with --ours, --theirs or --markers (for the run, or per path with --take PATH=CHOICE)"
        );
    }
    let failed = v["failed"].as_array().map_or(0, |f| f.len());
    if failed > 0 {
        anyhow::bail!("{failed} change(s) of the merge failed");
    }
    Ok(())
}

fn print_merge(v: &serde_json::Value) {
    let s = |x: &serde_json::Value| x.as_str().unwrap_or("?").to_string();
    let changes = v["changes"].as_array().cloned().unwrap_or_default();
    let conflicts = v["conflicts"].as_array().cloned().unwrap_or_default();
    let dry = v["dry_run"].as_bool().unwrap_or(false);
    println!(
        "merge {} into main (base event:{}): {} change(s), {} conflict(s){}",
        s(&v["branch"]),
        v["base"],
        changes.len(),
        conflicts.len(),
        if dry { " (dry run)" } else { "" }
    );
    for c in changes.iter().take(500) {
        let from = c["from"]
            .as_str()
            .map(|f| format!(" (from {f})"))
            .unwrap_or_default();
        println!("  {:<9} {}{from}", s(&c["action"]), s(&c["path"]));
    }
    if changes.len() > 500 {
        println!("  ... and {} more", changes.len() - 500);
    }
    let settled: std::collections::BTreeMap<String, String> = v["settled"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string())))
        .collect();
    for c in &conflicts {
        let path = s(&c["path"]);
        let how = settled
            .get(&path)
            .map(|h| format!(" (settled: {h})"))
            .unwrap_or_default();
        println!("  conflict  {path}: {}{how}", s(&c["kind"]));
        for h in c["hunks"].as_array().into_iter().flatten() {
            println!("    at line {}:", h["line"]);
            for (label, k) in [("main", "ours"), ("base", "base"), ("branch", "theirs")] {
                for line in h[k].as_str().unwrap_or("").lines() {
                    println!("    {label:<6} | {line}");
                }
            }
        }
    }
    if v["applied"].as_bool() == Some(true) {
        eprintln!("merged {}: {} change(s)", s(&v["branch"]), v["done"]);
        if let Some(n) = v["first_event"].as_i64() {
            eprintln!("to undo this merge: agx restore event:{n}");
        }
    } else if !dry && conflicts.is_empty() && changes.is_empty() {
        eprintln!("nothing to merge: the main tree has every change of the branch");
    }
}

pub fn switch(dir: &Path, name: &str, force: bool, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let mut prog = progress_printer("switching");
    let v = p.request(
        Request::Switch {
            name: name.to_string(),
            force,
        },
        &mut prog,
    )?;
    if json {
        print_json(&v)?;
    } else {
        println!(
            "switched the main tree to {}: {} change(s); the main tree as it was is branch {}",
            v["branch"].as_str().unwrap_or("?"),
            v["changed"],
            v["kept_as"].as_str().unwrap_or("?")
        );
        if let Some(n) = v["first_event"].as_i64() {
            eprintln!(
                "to undo this switch: agx restore event:{n} (or agx switch {})",
                v["kept_as"].as_str().unwrap_or("?")
            );
        }
    }
    let failed = v["failed"].as_array().map_or(0, |f| f.len());
    if failed > 0 {
        anyhow::bail!("{failed} change(s) of the switch failed");
    }
    Ok(())
}
