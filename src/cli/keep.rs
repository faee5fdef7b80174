//! `agx checkpoint`, `agx pin`/`unpin`, `agx gc`, and the history part of `agx status`.

use std::path::Path;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::history::{rfc3339, Project};
use crate::control::proto::Request;

/// `agx checkpoint [NAME] [--message TEXT]`, or one of its subcommands.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CheckpointArgs {
    /// A unique name for the point (default: unnamed, known as cp:ID).
    pub name: Option<String>,
    /// What the point is.
    #[arg(long, short = 'm', value_name = "TEXT")]
    pub message: Option<String>,
    #[command(subcommand)]
    pub cmd: Option<CheckpointCmd>,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointCmd {
    /// Checkpoints, oldest first: id, name, point, time, message.
    List {
        /// Also the automatic ones (session start and end, before each tool call).
        #[arg(long)]
        all: bool,
    },
    /// Forget a checkpoint (the history stays; gc may then drop it).
    Delete {
        #[arg(value_name = "NAME|cp:ID")]
        name: String,
    },
}

fn no_progress(_: usize, _: usize) {}

/// The JSON form of a checkpoint (stable field names).
fn checkpoint_json(v: &serde_json::Value) -> serde_json::Value {
    let id = v["id"].as_i64().unwrap_or(0);
    serde_json::json!({
        "id": id,
        "name": v["name"],
        "ref": v["name"].as_str().map(String::from).unwrap_or_else(|| format!("cp:{id}")),
        "seq": v["seq"],
        "time": v["time_ns"].as_i64().map(rfc3339),
        "message": v["message"],
        "auto": v["auto"],
        "session": v["session"],
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

pub fn checkpoint(dir: &Path, args: CheckpointArgs, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    match args.cmd {
        Some(CheckpointCmd::List { all }) => {
            let v = p.request(Request::CheckpointList { all }, &mut no_progress)?;
            let list: Vec<serde_json::Value> = v
                .as_array()
                .map(|a| a.iter().map(checkpoint_json).collect())
                .unwrap_or_default();
            if json {
                return print_json(&serde_json::Value::Array(list));
            }
            if list.is_empty() {
                println!(
                    "no checkpoints{}",
                    if all {
                        ""
                    } else {
                        " (--all shows automatic ones)"
                    }
                );
            }
            for c in &list {
                let time = c["time"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .and_then(|t| t.timestamp_nanos_opt())
                    .map(local_time)
                    .unwrap_or_default();
                let mut line = format!(
                    "cp:{:<5} {:<24} point {:<7} {}",
                    c["id"],
                    c["name"].as_str().unwrap_or("-"),
                    c["seq"],
                    time
                );
                if c["auto"].as_bool() == Some(true) {
                    line.push_str("  [auto]");
                }
                if let Some(s) = c["session"].as_str() {
                    line.push_str(&format!("  session {s}"));
                }
                if let Some(m) = c["message"].as_str() {
                    line.push_str(&format!("  {m}"));
                }
                println!("{line}");
            }
            Ok(())
        }
        Some(CheckpointCmd::Delete { name }) => {
            let v = p.request(Request::CheckpointDelete { name }, &mut no_progress)?;
            let c = checkpoint_json(&v);
            if json {
                return print_json(&c);
            }
            println!(
                "deleted checkpoint {} (cp:{})",
                c["ref"].as_str().unwrap_or("?"),
                c["id"]
            );
            Ok(())
        }
        None => {
            let v = p.request(
                Request::Checkpoint {
                    name: args.name,
                    message: args.message,
                },
                &mut no_progress,
            )?;
            let c = checkpoint_json(&v);
            if json {
                return print_json(&c);
            }
            match c["name"].as_str() {
                Some(n) => println!("{n} (cp:{}) at point {}", c["id"], c["seq"]),
                None => println!("cp:{} at point {}", c["id"], c["seq"]),
            }
            Ok(())
        }
    }
}

fn pin_json(v: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "seq": v["seq"],
        "ref": v["by"],
        "time": v["time_ns"].as_i64().map(rfc3339),
    })
}

/// `agx pin REF`, or `agx pin` alone: the pins.
pub fn pin(dir: &Path, at: Option<String>, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let Some(at) = at else {
        let v = p.request(Request::Pins, &mut no_progress)?;
        let list: Vec<_> = v
            .as_array()
            .map(|a| a.iter().map(pin_json).collect())
            .unwrap_or_default();
        if json {
            return print_json(&serde_json::Value::Array(list));
        }
        if list.is_empty() {
            println!("no pins");
        }
        for x in &list {
            println!(
                "point {:<7} pinned as {}",
                x["seq"],
                x["ref"].as_str().unwrap_or("?")
            );
        }
        return Ok(());
    };
    let v = pin_json(&p.request(Request::Pin { at }, &mut no_progress)?);
    if json {
        return print_json(&v);
    }
    println!(
        "pinned point {} ({}): gc keeps it restorable",
        v["seq"],
        v["ref"].as_str().unwrap_or("?")
    );
    Ok(())
}

pub fn unpin(dir: &Path, at: String, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let v = pin_json(&p.request(Request::Unpin { at }, &mut no_progress)?);
    if json {
        return print_json(&v);
    }
    println!(
        "unpinned point {} ({})",
        v["seq"],
        v["ref"].as_str().unwrap_or("?")
    );
    Ok(())
}

fn bytes(n: u64) -> String {
    let f = n as f64;
    if f < 1024.0 {
        format!("{n} B")
    } else if f < 1024.0 * 1024.0 {
        format!("{:.1} KiB", f / 1024.0)
    } else if f < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", f / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GiB", f / 1024.0 / 1024.0 / 1024.0)
    }
}

pub fn gc(dir: &Path, keep: Option<String>, dry_run: bool, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let v = p.request(Request::Gc { keep, dry_run }, &mut no_progress)?;
    let out = serde_json::json!({
        "dry_run": v["dry_run"],
        "keep": v["keep"],
        "oldest_point_before": v["horizon_before"],
        "oldest_point": v["horizon"],
        "oldest_time": v["horizon_time_ns"].as_i64().map(rfc3339),
        "held_by": v["held_by"],
        "events_deleted": v["events_deleted"],
        "checkpoints_deleted": v["checkpoints_deleted"],
        "objects_deleted": v["objects_deleted"],
        "bytes_freed": v["bytes_freed"],
        "db_bytes_before": v["db_bytes_before"],
        "db_bytes_after": v["db_bytes_after"],
        "branches_dropped": v["branches_dropped"],
        "layer_bytes_freed": v["layer_bytes_freed"],
    });
    if json {
        return print_json(&out);
    }
    let verb = if dry_run { "would drop" } else { "dropped" };
    println!(
        "{verb} {} events, {} automatic checkpoints and {} objects, {} {}",
        out["events_deleted"],
        out["checkpoints_deleted"],
        out["objects_deleted"],
        bytes(v["bytes_freed"].as_u64().unwrap_or(0)),
        if dry_run { "to free" } else { "freed" },
    );
    let when = v["horizon_time_ns"]
        .as_i64()
        .map(local_time)
        .unwrap_or_else(|| "the first event".into());
    let mut line = format!(
        "history kept: the last {}; restorable back to point {} ({when})",
        out["keep"].as_str().unwrap_or("?"),
        out["oldest_point"]
    );
    if let Some(h) = v["held_by"].as_str() {
        line.push_str(&format!(", held back by {h}"));
    }
    println!("{line}");
    let (db0, db1) = (
        v["db_bytes_before"].as_u64().unwrap_or(0),
        v["db_bytes_after"].as_u64().unwrap_or(0),
    );
    if db1 < db0 {
        println!("timeline database: {} -> {}", bytes(db0), bytes(db1));
    }
    let dropped: Vec<&str> = v["branches_dropped"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b.as_str())
        .collect();
    if !dropped.is_empty() {
        println!(
            "deleted branches {verb}: {} (their layers: {})",
            dropped.join(", "),
            bytes(v["layer_bytes_freed"].as_u64().unwrap_or(0))
        );
    }
    Ok(())
}

/// The history part of `agx status` (store size, events, oldest restorable point), when
/// the project has history and it can be read now (not while another command holds it).
pub fn status_history(dir: &Path, mounted: bool) -> Option<serde_json::Value> {
    if !mounted
        && !dir
            .join(crate::sys::path::AGX_DIR_NAME)
            .join("timeline.db")
            .exists()
    {
        return None;
    }
    let p = Project::open(dir).ok()?;
    let v = p.request(Request::Summary, &mut no_progress).ok()?;
    Some(serde_json::json!({
        "events": v["events"],
        "last_event": v["last_event"],
        "store_bytes": v["store_bytes"],
        "oldest_point": v["oldest_point"],
        "oldest_time": v["oldest_time_ns"].as_i64().map(rfc3339),
        "unsaved": v["unsaved"],
        "disk_full": v["disk_full"],
    }))
}

/// Prints the history part of `agx status` in text.
pub fn print_status_history(h: &serde_json::Value) {
    println!("events:     {}", h["events"]);
    println!(
        "store:      {}",
        bytes(h["store_bytes"].as_u64().unwrap_or(0))
    );
    let when = h["oldest_time"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| t.timestamp_nanos_opt())
        .map(local_time);
    match when {
        Some(w) => println!("restorable: back to point {} ({w})", h["oldest_point"]),
        None => println!("restorable: no history yet"),
    }
    let unsaved = h["unsaved"].as_u64().unwrap_or(0);
    if unsaved > 0 {
        println!(
            "disk full:  {unsaved} recorded change(s) wait in the journal for room in the timeline"
        );
    } else if h["disk_full"].as_bool() == Some(true) {
        println!("disk full:  agx used the room it keeps for its records; free some space");
    }
}
