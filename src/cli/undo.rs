//! `agx oops` and `agx blame`.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail, Result};

use super::history::{rfc3339, Project};
use super::restore::apply_plan;
use crate::control::engine::{OnConflict, RestoreOpts};
use crate::control::proto::{hex, unhex, Request};
use crate::control::undo::OOPS_NOTE;

/// `agx oops`: shows what it undoes (files, lines added and removed), asks, restores.
pub fn oops(dir: &Path, dry_run: bool, yes: bool, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let t = p.request(
        Request::OopsTarget {
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?;
    if t.is_null() {
        bail!("nothing to undo: no changes recorded yet");
    }
    let at = t["at"].as_str().unwrap_or("now").to_string();
    let what = t["what"].as_str().unwrap_or("").to_string();
    let rels: Vec<Vec<u8>> = t["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
        .map(unhex)
        .collect::<Result<_, String>>()
        .map_err(|e| anyhow!(e))?;
    let plan = p.request(
        Request::Plan {
            at: at.clone(),
            paths: rels.iter().map(|r| hex(r)).collect(),
            on_conflict: OnConflict::Refuse,
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?;
    // Lines the oops removes and brings back: the diff from its target point to now.
    let diff = p.request(
        Request::Diff {
            from: Some(at.clone()),
            to: None,
            paths: rels.iter().map(|r| hex(r)).collect(),
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?;
    let files = diff.as_array().cloned().unwrap_or_default();
    let only_session: Option<Vec<String>> = plan["steps"].as_array().map(|s| {
        s.iter()
            .filter_map(|x| x["path"].as_str().map(String::from))
            .collect()
    });
    let (mut add, mut del, mut n) = (0u64, 0u64, 0usize);
    let mut lines = Vec::new();
    for f in &files {
        let path = f["path"].as_str().unwrap_or("?");
        let to = f["to_path"].as_str();
        // For a session oops, only the files the plan touches.
        if t["session"].is_string() {
            let in_plan = only_session
                .as_ref()
                .is_some_and(|ps| ps.iter().any(|p| p == path || Some(p.as_str()) == to));
            if !in_plan {
                continue;
            }
        }
        let a = f["added"].as_u64().unwrap_or(0);
        let r = f["removed"].as_u64().unwrap_or(0);
        add += a;
        del += r;
        n += 1;
        lines.push(format!(
            "  {:<9} {}{}  (-{a} +{r})",
            f["change"].as_str().unwrap_or("modified"),
            path,
            to.map(|t| format!(" -> {t}")).unwrap_or_default()
        ));
    }
    if json {
        let v = serde_json::json!({
            "target": t,
            "files": n,
            "lines_removed": add,
            "lines_added": del,
            "plan": plan,
        });
        if dry_run || plan["steps"].as_array().is_none_or(|s| s.is_empty()) {
            println!("{v}");
            return Ok(());
        }
    } else {
        let mut err = std::io::stderr().lock();
        writeln!(
            err,
            "oops: {what}: {n} file(s), {add} line(s) removed, {del} line(s) brought back"
        )?;
        for l in lines.iter().take(50) {
            writeln!(err, "{l}")?;
        }
        if lines.len() > 50 {
            writeln!(err, "  ... and {} more", lines.len() - 50)?;
        }
        for c in plan["conflicts"].as_array().cloned().unwrap_or_default() {
            writeln!(
                err,
                "  conflict  {}  (changed later by {}; left alone)",
                c["path"].as_str().unwrap_or("?"),
                c["session"]
                    .as_str()
                    .map(|s| format!("session {s}"))
                    .unwrap_or_else(|| c["process"].as_str().unwrap_or("?").to_string())
            )?;
        }
    }
    let conflicts = plan["conflicts"].as_array().map_or(0, |a| a.len());
    if conflicts > 0 && !dry_run {
        let s = t["session"].as_str().unwrap_or("?");
        bail!(
            "{conflicts} file(s) were changed by someone else after session {s}; nothing undone (agx restore session:{s} --skip-conflicts undoes the rest)"
        );
    }
    let skipped = plan["skipped"].as_array().map_or(0, |a| a.len());
    if skipped > 0 && !dry_run {
        let s = &plan["skipped"][0];
        let more = if skipped > 1 {
            format!(" (and {} more path(s))", skipped - 1)
        } else {
            String::new()
        };
        bail!(
            "{} cannot be restored to {at}: {}{more}; nothing undone (`agx restore {at} --skip-missing` undoes the rest)",
            s["path"].as_str().unwrap_or("?"),
            s["reason"].as_str().unwrap_or("?"),
        );
    }
    let opts = RestoreOpts {
        on_conflict: OnConflict::Refuse,
        reason: None,
        note: Some(format!("{OOPS_NOTE}{what} (to {at})")),
        skip_missing: false,
        branch: p.branch.clone(),
    };
    apply_plan(&p, &at, &rels, plan, dry_run, yes, opts, json)?;
    if !dry_run && !json {
        eprintln!("run `agx oops` again to redo");
    }
    Ok(())
}

pub fn blame(dir: &Path, path: &Path, json: bool) -> Result<()> {
    let p = Project::open(dir)?;
    let rel = p.rel(path)?;
    let v = p.request(
        Request::Blame {
            path: hex(&rel),
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?;
    let lines = v.as_array().cloned().unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if json {
        let a: Vec<_> = lines
            .iter()
            .map(|l| {
                serde_json::json!({
                    "line": l["line"],
                    "text": l["text"],
                    "seq": l["seq"],
                    "session": l["session"],
                    "agent": l["agent"],
                    "time": l["time_ns"].as_i64().map(rfc3339),
                    "process": l["process"],
                    "pid": l["pid"],
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&a)?)?;
        return Ok(());
    }
    for l in &lines {
        let who = match (l["seq"].as_i64(), l["session"].as_str()) {
            (None, _) => "(before agx)".to_string(),
            (Some(_), Some(s)) => format!(
                "s{s} {}",
                l["agent"].as_str().or(l["process"].as_str()).unwrap_or("?")
            ),
            (Some(_), None) => l["process"].as_str().unwrap_or("?").to_string(),
        };
        let when = l["time_ns"]
            .as_i64()
            .map(|ns| {
                use chrono::{Local, TimeZone};
                Local
                    .timestamp_nanos(ns)
                    .format("%Y-%m-%d %H:%M")
                    .to_string()
            })
            .unwrap_or_default();
        writeln!(
            out,
            "{:>6} {:<18.18} {:<16} {:>4}| {}",
            l["seq"].as_i64().map(|s| s.to_string()).unwrap_or_default(),
            who,
            when,
            l["line"],
            l["text"].as_str().unwrap_or("")
        )?;
    }
    Ok(())
}
