//! `agx restore`: the plan, the questions and refusals around it, and the report. A
//! mounted project is restored by its daemon; one that is not mounted, directly.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::history::Project;
use crate::control::engine::{OnConflict, RestoreOpts};
use crate::control::proto::{hex, Request};
use crate::restore::Report;

fn progress_printer() -> impl FnMut(usize, usize) {
    let tty = std::io::stderr().is_terminal();
    move |d, t| {
        if t > 200 && (d % 100 == 0 || d == t) {
            if tty {
                eprint!("\rrestoring: {d}/{t}");
                if d == t {
                    eprintln!();
                }
            } else {
                eprintln!("restoring: {d}/{t}");
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn restore(
    dir: &Path,
    at: &str,
    paths: &[PathBuf],
    dry_run: bool,
    yes: bool,
    opts: RestoreOpts,
    json: bool,
) -> Result<()> {
    let p = Project::open(dir)?;
    let rels: Vec<Vec<u8>> = paths.iter().map(|x| p.rel(x)).collect::<Result<_>>()?;
    let plan_json = p.request(
        Request::Plan {
            at: at.to_string(),
            paths: rels.iter().map(|r| hex(r)).collect(),
            on_conflict: opts.on_conflict,
            branch: p.branch.clone(),
        },
        &mut |_, _| {},
    )?;
    let skipped = skipped_of(&plan_json);
    if !dry_run && !opts.skip_missing {
        refuse_missing(&skipped, at)?;
    }
    if !json {
        print_plan(&plan_json, at);
    }
    apply_plan(&p, at, &rels, plan_json, dry_run, yes, opts, json)
}

/// The paths a plan cannot restore, with why.
fn skipped_of(plan_json: &serde_json::Value) -> Vec<(String, String)> {
    plan_json["skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let text = |k: &str| s[k].as_str().unwrap_or("?").to_string();
            (text("path"), text("reason"))
        })
        .collect()
}

/// A restore that cannot bring some paths back changes nothing unless told to skip them
/// (`--skip-missing`): one line naming the first of them.
fn refuse_missing(skipped: &[(String, String)], at: &str) -> Result<()> {
    match skipped.first() {
        Some((path, why)) => {
            let e = crate::control::restore::unrestorable(path, why, skipped.len(), at);
            bail!("{e}")
        }
        None => Ok(()),
    }
}

/// Asks (unless `yes`), then carries out the restore whose plan is `plan_json`.
#[allow(clippy::too_many_arguments)]
pub fn apply_plan(
    p: &Project,
    at: &str,
    rels: &[Vec<u8>],
    plan_json: serde_json::Value,
    dry_run: bool,
    yes: bool,
    opts: RestoreOpts,
    json: bool,
) -> Result<()> {
    let steps = plan_json["steps"].as_array().map(|a| a.len()).unwrap_or(0);
    let conflicts = plan_json["conflicts"]
        .as_array()
        .map(|a| a.len())
        .unwrap_or(0);
    let skipped = skipped_of(&plan_json);
    let refuse = conflicts > 0 && opts.on_conflict == OnConflict::Refuse;
    // Paths the plan cannot restore: refused unless the user said to leave them.
    let missing = !skipped.is_empty() && !opts.skip_missing;
    if steps == 0 || dry_run || refuse || missing {
        if json {
            println!(
                "{}",
                serde_json::json!({ "plan": plan_json, "report": null })
            );
        } else if steps == 0 && !refuse && skipped.is_empty() {
            eprintln!("nothing to do: the tree already matches {at}");
        }
        if refuse && !dry_run {
            bail!(
                "{conflicts} path(s) were changed by someone else after the session began; nothing restored (--skip-conflicts restores the rest, --force restores them too)"
            );
        }
        if missing && !dry_run {
            refuse_missing(&skipped, at)?;
        }
        if !skipped.is_empty() && !dry_run && !json {
            report_skipped(&skipped);
        }
        return Ok(());
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!("not on a terminal: pass --yes to restore without asking (or --dry-run to see the plan)");
        }
        eprint!("Restore {steps} change(s) to {at}? [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            bail!("restore cancelled; nothing changed");
        }
    }
    let mut prog = progress_printer();
    let opts = RestoreOpts {
        branch: p.branch.clone(),
        ..opts
    };
    let v = p.request(
        Request::Restore {
            at: at.to_string(),
            paths: rels.iter().map(|r| hex(r)).collect(),
            opts,
        },
        &mut prog,
    )?;
    let r = &v["report"];
    let report = Report {
        first_event: r["first_event"].as_i64().map(crate::ids::Seq),
        done: r["done"].as_u64().unwrap_or(0) as usize,
        failed: serde_json::from_value(r["failed"].clone()).unwrap_or_default(),
        touched: Vec::new(),
        inodes: Vec::new(),
    };
    if json {
        println!(
            "{}",
            serde_json::json!({ "plan": plan_json, "report": report })
        );
    } else {
        eprintln!("restored {} change(s) to {at}", report.done);
        if let Some(first) = report.first_event {
            eprintln!("to undo this restore: agx restore event:{}", first.0);
        }
    }
    if !json {
        report_skipped(&skipped);
    }
    if !report.failed.is_empty() {
        for (p, e) in &report.failed {
            eprintln!("agx: could not restore {p}: {e}");
        }
        bail!("{} change(s) failed", report.failed.len());
    }
    Ok(())
}

/// What a restore run with `--skip-missing` left alone, one line each.
fn report_skipped(skipped: &[(String, String)]) {
    for (path, why) in skipped {
        eprintln!("not restored: {path}: {why}");
    }
}

fn action(s: &serde_json::Value) -> &'static str {
    match (
        s["action"].as_str().unwrap_or(""),
        s["dir"].as_bool(),
        s["replace"].as_bool(),
    ) {
        ("remove", Some(true), _) => "rmdir",
        ("remove", _, _) => "delete",
        ("write", _, Some(true)) => "restore",
        ("write", _, _) => "recreate",
        ("mkdir", _, _) => "mkdir",
        ("symlink", _, _) => "symlink",
        ("mknod", _, _) => "mknod",
        ("link", _, _) => "link",
        ("meta", _, _) => "metadata",
        _ => "?",
    }
}

fn print_plan(v: &serde_json::Value, at: &str) {
    let mut err = std::io::stderr().lock();
    let steps = v["steps"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        err,
        "restore to {at} (point {}): {} change(s)",
        v["point"],
        steps.len()
    );
    for s in steps.iter().take(200) {
        let _ = writeln!(
            err,
            "  {:<9} {}{}",
            action(s),
            s["path"].as_str().unwrap_or("?"),
            s["from"]
                .as_str()
                .map(|f| format!(" (one file with {f})"))
                .unwrap_or_default()
        );
    }
    if steps.len() > 200 {
        let _ = writeln!(err, "  ... and {} more", steps.len() - 200);
    }
    for c in v["conflicts"].as_array().cloned().unwrap_or_default() {
        let _ = writeln!(
            err,
            "  conflict  {}  (changed later by {} in event {})",
            c["path"].as_str().unwrap_or("?"),
            match c["session"].as_str() {
                Some(s) => format!("session {s}"),
                None => format!(
                    "{} outside any session",
                    c["process"].as_str().unwrap_or("?")
                ),
            },
            c["seq"]
        );
    }
    for s in v["skipped"].as_array().cloned().unwrap_or_default() {
        let _ = writeln!(
            err,
            "  cannot restore {}: {}",
            s["path"].as_str().unwrap_or("?"),
            s["reason"].as_str().unwrap_or("?")
        );
    }
}
