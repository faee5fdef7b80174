//! `agx verify [--json] [--repair]`.

use std::path::Path;

use anyhow::{bail, Result};

use super::history::Project;
use crate::control::proto::Request;

pub fn verify(dir: &Path, repair: bool, json: bool) -> Result<()> {
    // A timeline that lost history is opened to be reported (or, with --repair, the
    // loss accepted) rather than refused.
    let how = crate::control::engine::Opening {
        check_integrity: false,
        tolerate_loss: true,
    };
    let project = Project::open_with(dir, how)?;
    let v = project.request(Request::Verify { repair }, &mut |_, _| {})?;
    let problems = v["problems"].as_array().cloned().unwrap_or_default();
    if json {
        println!("{v}");
    } else {
        for p in &problems {
            let mut line = p["kind"].as_str().unwrap_or("problem").replace('-', " ");
            if let Some(h) = p["object"].as_str() {
                line.push_str(&format!(" {h}"));
            }
            line.push_str(&format!(": {}", p["detail"].as_str().unwrap_or("")));
            if let Some(evs) = p["events"].as_array() {
                let evs: Vec<String> = evs.iter().map(|e| format!("event:{e}")).collect();
                line.push_str(&format!(" (needed by {})", evs.join(", ")));
            }
            if p["quarantined"].as_bool() == Some(true) {
                line.push_str("; moved to .agx/quarantine/");
            }
            println!("{line}");
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in {} objects and {} events",
            problems.len(),
            v["objects"],
            v["events"]
        );
    }
    if !json {
        eprintln!(
            "agx: verified {} objects and {} events (schema {}): no problems",
            v["objects"], v["events"], v["schema_version"]
        );
    }
    Ok(())
}
