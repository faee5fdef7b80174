//! One request, answered by the engine: the same code serves the daemon's control socket
//! and a command run on a project that is not mounted.

use std::os::unix::ffi::OsStringExt;

use super::engine::Engine;
use super::proto::{unhex, Request};
use crate::ids::SessionId;
use crate::timeline::Actor;

type Value = serde_json::Value;

fn paths(v: &[String]) -> Result<Vec<Vec<u8>>, String> {
    v.iter().map(|p| unhex(p)).collect()
}

fn json<T: serde::Serialize>(v: T) -> Result<Value, String> {
    serde_json::to_value(v).map_err(|e| e.to_string())
}

/// Answers `req` from `caller`; `progress` sees (done, total) of long operations.
pub fn handle(
    req: Request,
    engine: &Engine,
    caller: &Actor,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Value, String> {
    let e = |x: super::engine::EngineError| x.to_string();
    match req {
        Request::Flush => {
            engine.recorder.flush();
            Ok(Value::Null)
        }
        Request::Summary => json(engine.summary().map_err(e)?),
        Request::Log {
            path,
            since,
            limit,
            branch,
        } => {
            let path = path.map(|p| unhex(&p)).transpose()?;
            json(
                engine
                    .log(path, since.as_deref(), limit, branch.as_deref())
                    .map_err(e)?,
            )
        }
        Request::Show { at, path, branch } => {
            let bytes = engine
                .show(&at, &unhex(&path)?, branch.as_deref())
                .map_err(e)?;
            Ok(Value::String(super::proto::hex(&bytes)))
        }
        Request::Diff {
            from,
            to,
            paths: ps,
            branch,
        } => json(
            engine
                .diff(
                    from.as_deref(),
                    to.as_deref(),
                    &paths(&ps)?,
                    branch.as_deref(),
                )
                .map_err(e)?,
        ),
        Request::Plan {
            at,
            paths: ps,
            on_conflict,
            branch,
        } => json(
            engine
                .plan(&at, &paths(&ps)?, on_conflict, branch.as_deref())
                .map_err(e)?,
        ),
        Request::Restore {
            at,
            paths: ps,
            opts,
        } => {
            let (plan, report) = engine
                .restore(&at, &paths(&ps)?, &opts, caller.clone(), progress)
                .map_err(e)?;
            engine.after_restore_in(opts.branch.as_deref(), &report);
            Ok(serde_json::json!({ "plan": plan, "report": report }))
        }
        Request::OopsTarget { branch } => {
            let t = engine.oops_target(branch.as_deref()).map_err(e)?;
            Ok(match t {
                Some(t) => {
                    let mut v = json(&t)?;
                    v["paths"] = t.paths.iter().map(|p| super::proto::hex(p)).collect();
                    v
                }
                None => Value::Null,
            })
        }
        Request::Blame { path, branch } => {
            json(engine.blame(&unhex(&path)?, branch.as_deref()).map_err(e)?)
        }
        Request::SessionStart(r) => json(engine.session_start(&r).map_err(e)?),
        Request::SessionEnd { id } => json(engine.session_end(id.as_deref(), caller).map_err(e)?),
        Request::SessionList => json(engine.session_list().map_err(e)?),
        Request::SessionShow { id } => json(engine.session_show(&id).map_err(e)?),
        Request::Whoami => Ok(serde_json::json!({
            "pid": caller.pid,
            "process": caller.process,
            "session": caller.session,
            "tool_call": caller.tool_call,
        })),
        Request::ToolStart {
            session,
            tool,
            tool_use_id,
        } => json(
            engine
                .tool_start(SessionId(session), &tool, tool_use_id.as_deref())
                .map_err(e)?,
        ),
        Request::ToolEnd {
            session,
            tool_use_id,
        } => json(
            engine
                .tool_end(SessionId(session), tool_use_id.as_deref())
                .map_err(e)?,
        ),
        Request::Prompt { session, text } => {
            json(engine.prompt(SessionId(session), &text).map_err(e)?)
        }
        Request::Verify { repair } => json(engine.verify_all(repair).map_err(e)?),
        Request::Hook(r) => json(engine.hook(&r).map_err(e)?),
        Request::Checkpoint { name, message } => json(
            engine
                .checkpoint_create(name.as_deref(), message.as_deref(), caller)
                .map_err(e)?,
        ),
        Request::CheckpointList { all } => json(engine.checkpoint_list(all).map_err(e)?),
        Request::CheckpointDelete { name } => {
            json(engine.checkpoint_delete(&name, caller).map_err(e)?)
        }
        Request::Pin { at } => json(engine.pin(&at).map_err(e)?),
        Request::Unpin { at } => json(engine.unpin(&at, caller).map_err(e)?),
        Request::Pins => json(engine.pins().map_err(e)?),
        Request::Gc { keep, dry_run } => {
            json(engine.gc(keep.as_deref(), dry_run, caller).map_err(e)?)
        }
        Request::BranchCreate { name, from } => {
            let t0 = std::time::Instant::now();
            let b = engine
                .branch_create(&name, from.as_deref(), caller)
                .map_err(e)?;
            // What making it cost the engine (for the benchmarks: it must not grow with
            // the tree).
            let mut v = json(b)?;
            v["took_us"] = (t0.elapsed().as_micros() as u64).into();
            Ok(v)
        }
        Request::BranchList { all } => json(engine.branch_list(all).map_err(e)?),
        Request::BranchShow { name } => json(engine.branch_show(&name).map_err(e)?),
        Request::BranchRename { old, new } => json(engine.branch_rename(&old, &new).map_err(e)?),
        Request::BranchDelete { name } => json(engine.branch_delete(&name, caller).map_err(e)?),
        Request::BranchMount { name, at } => {
            let at = std::path::PathBuf::from(std::ffi::OsString::from_vec(unhex(&at)?));
            json(engine.branch_mount(&name, &at).map_err(e)?)
        }
        Request::BranchUnmount { at } => {
            let at = std::path::PathBuf::from(std::ffi::OsString::from_vec(unhex(&at)?));
            json(engine.branch_unmount(&at).map_err(e)?)
        }
        Request::Merge { name, opts } => {
            let (report, _) = engine.merge(&name, &opts, caller, progress).map_err(e)?;
            json(report)
        }
        Request::Switch { name, force } => {
            let (report, _) = engine.switch(&name, force, caller, progress).map_err(e)?;
            json(report)
        }
        Request::Unmount { lazy } => {
            engine.refuse_to_agents(caller, "agx unmount").map_err(e)?;
            crate::mount::stop::unmount_requested(lazy).map_err(|x| x.to_string())?;
            Ok(Value::Null)
        }
    }
}
