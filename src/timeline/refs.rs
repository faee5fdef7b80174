//! REF: the one way every command names a point in the timeline (DESIGN.md section 8).
//!
//! - `event:N`: the point just before event N (restoring it undoes N and all after)
//! - a checkpoint's name, or `cp:ID`: the point the checkpoint marks
//! - `session:ID`: the point just before the session's first event (ID: the session's id
//!   or the agent's key for it)
//! - `now`: the latest point
//! - an RFC 3339 time (`2026-11-21T10:00:00Z`): the last point at or before it
//! - a relative time (`30s`, `10m`, `2h`, `3d`, `1w`): that long before now
//!
//! A point is a sequence number P: the tree after every event <= P.

use thiserror::Error;

use super::{Timeline, TimelineError};
use crate::ids::Seq;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ref {
    Event(i64),
    Checkpoint(i64),
    Named(String),
    Session(String),
    Now,
    /// Nanoseconds since the epoch.
    Time(i64),
    /// Nanoseconds before now.
    Ago(i64),
}

#[derive(Debug, Error)]
pub enum RefError {
    #[error("'{0}' is not a REF (use a checkpoint name, cp:ID, event:N, session:ID, now, an RFC 3339 time, or a relative time like 10m, 2h, 3d)")]
    Malformed(String),
    #[error("no event {0} in the timeline")]
    UnknownEvent(i64),
    #[error("no checkpoint cp:{0}")]
    UnknownCheckpoint(i64),
    #[error("'{0}' is not a REF: no checkpoint has that name (other forms: cp:ID, event:N, session:ID, now, an RFC 3339 time, 10m, 2h, 3d)")]
    UnknownName(String),
    #[error("no session '{0}'")]
    UnknownSession(String),
    #[error("'{0}' is in the future")]
    Future(String),
    #[error(
        "'{text}' is before the oldest restorable point ({time}): gc dropped the history before it"
    )]
    BeforeHorizon { text: String, time: String },
    #[error(transparent)]
    Timeline(#[from] TimelineError),
}

// Parsing never slices a `&str` by byte index: a REF comes from anywhere (a command
// line, a lookup under `.agx/at/` on the request path), and a slice off a character
// boundary panics. Prefixes are split off with `strip_prefix`, byte positions are read
// with `get`.

/// A relative time (`10m`: ten minutes before now), in nanoseconds.
fn relative(s: &str) -> Option<i64> {
    // The digits are ASCII, so their count is also the byte offset of the unit.
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let n: i64 = s.get(..digits)?.parse().ok()?;
    let unit = s.get(digits..)?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => return None,
    };
    n.checked_mul(secs)?.checked_mul(1_000_000_000)
}

/// Whether `s` can name a checkpoint: not empty, no '/', no leading '-', no control
/// characters or white space, at most 200 bytes, and not readable as any other form of
/// REF (so a name never shadows, or is shadowed by, another REF).
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && !s.contains('/')
        && !s.starts_with('-')
        && !s.starts_with('.')
        && !s.contains(':')
        && !s.chars().any(|c| c.is_control() || c.is_whitespace())
        && matches!(Ref::parse(s), Ok(Ref::Named(_)))
}

impl Ref {
    pub fn parse(s: &str) -> Result<Ref, RefError> {
        let bad = || RefError::Malformed(s.to_string());
        if s == "now" {
            return Ok(Ref::Now);
        }
        if let Some(n) = s.strip_prefix("cp:") {
            let n: i64 = n.parse().map_err(|_| bad())?;
            return Ok(Ref::Checkpoint(n));
        }
        if let Some(id) = s.strip_prefix("session:") {
            if id.is_empty() {
                return Err(bad());
            }
            return Ok(Ref::Session(id.to_string()));
        }
        if let Some(n) = s.strip_prefix("event:") {
            let n: i64 = n.parse().map_err(|_| bad())?;
            if n < 1 {
                return Err(bad());
            }
            return Ok(Ref::Event(n));
        }
        if let Some(ns) = relative(s) {
            return Ok(Ref::Ago(ns));
        }
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
            return t.timestamp_nanos_opt().map(Ref::Time).ok_or_else(bad);
        }
        // Anything else names a checkpoint, if it could be a name at all.
        let digits_then_unit = s.starts_with(|c: char| c.is_ascii_digit())
            && s.trim_start_matches(|c: char| c.is_ascii_digit())
                .chars()
                .count()
                <= 1;
        let looks_like_time = matches!(s.as_bytes(), [a, b, c, d, b'-', ..]
            if [a, b, c, d].iter().all(|x| x.is_ascii_digit()));
        if s.is_empty()
            || s.contains(['/', ':'])
            || s.starts_with('-')
            || s.chars().any(|c| c.is_control() || c.is_whitespace())
            || digits_then_unit
            || looks_like_time
        {
            return Err(bad());
        }
        Ok(Ref::Named(s.to_string()))
    }

    /// The point this REF names in `timeline`, with `now_ns` as the current time. A point
    /// before the gc horizon is refused (its history is gone); a time at or after the
    /// horizon's time but before the first event left resolves to the horizon.
    pub fn resolve(&self, timeline: &Timeline, now_ns: i64, text: &str) -> Result<Seq, RefError> {
        let p = self.resolve_raw(timeline, now_ns, text)?;
        let Some(h) = timeline.horizon()? else {
            return Ok(p);
        };
        let started_before = match self {
            Ref::Session(id) => timeline
                .find_session(id)?
                .is_some_and(|s| s.start_seq < h.seq),
            _ => false,
        };
        if p >= h.seq && !started_before {
            return Ok(p);
        }
        let at = match self {
            Ref::Time(t) => Some(*t),
            Ref::Ago(d) => Some(now_ns.saturating_sub(*d)),
            _ => None,
        };
        if at.is_some_and(|t| t >= h.time_ns) {
            return Ok(h.seq);
        }
        Err(RefError::BeforeHorizon {
            text: text.to_string(),
            time: chrono::DateTime::from_timestamp_nanos(h.time_ns)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        })
    }

    fn resolve_raw(&self, timeline: &Timeline, now_ns: i64, text: &str) -> Result<Seq, RefError> {
        match self {
            Ref::Now => Ok(timeline.max_seq()?),
            Ref::Event(n) => {
                if timeline.get(Seq(*n))?.is_none() {
                    return Err(RefError::UnknownEvent(*n));
                }
                Ok(Seq(n - 1))
            }
            Ref::Time(t) => {
                if *t > now_ns {
                    return Err(RefError::Future(text.to_string()));
                }
                Ok(timeline.seq_at_time(*t)?)
            }
            Ref::Ago(d) => Ok(timeline.seq_at_time(now_ns.saturating_sub(*d))?),
            Ref::Checkpoint(id) => Ok(timeline
                .checkpoint(*id)?
                .ok_or(RefError::UnknownCheckpoint(*id))?
                .seq),
            Ref::Named(name) => Ok(timeline
                .checkpoint_by_name(name)?
                .ok_or_else(|| RefError::UnknownName(name.clone()))?
                .seq),
            Ref::Session(id) => {
                let s = timeline
                    .find_session(id)?
                    .ok_or_else(|| RefError::UnknownSession(id.clone()))?;
                Ok(timeline.session_point(&s)?)
            }
        }
    }
}

/// Parses and resolves a REF in one step.
pub fn resolve(text: &str, timeline: &Timeline) -> Result<Seq, RefError> {
    Ref::parse(text)?.resolve(timeline, crate::sys::now_ns(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(Ref::parse("now").unwrap(), Ref::Now);
        assert_eq!(Ref::parse("event:42").unwrap(), Ref::Event(42));
        assert_eq!(Ref::parse("10m").unwrap(), Ref::Ago(600_000_000_000));
        assert_eq!(
            Ref::parse("3d").unwrap(),
            Ref::Ago(3 * 86400 * 1_000_000_000)
        );
        assert!(matches!(
            Ref::parse("2026-11-21T10:00:00Z").unwrap(),
            Ref::Time(_)
        ));
        assert!(matches!(
            Ref::parse("2026-11-21T10:00:00.5+02:00").unwrap(),
            Ref::Time(_)
        ));
        assert_eq!(Ref::parse("cp:3").unwrap(), Ref::Checkpoint(3));
        assert_eq!(Ref::parse("session:7").unwrap(), Ref::Session("7".into()));
        assert_eq!(
            Ref::parse("before-refactor").unwrap(),
            Ref::Named("before-refactor".into())
        );
    }

    #[test]
    fn names_never_shadow_other_refs() {
        for ok in ["before-refactor", "v1.2", "m", "yesterday", "now!", "x10m"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "now",
            "10m",
            "3d",
            "event:4",
            "cp:1",
            "session:2",
            "a/b",
            "-x",
            "",
            ".hidden",
            "a b",
            "2026-11-21",
            "10",
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn non_ascii_is_a_name_or_malformed_never_a_panic() {
        for s in [
            "abcé", "é", "2026é", "2026-é", "é-", "10é", "éééé", "event:é", "cp:é",
        ] {
            let _ = Ref::parse(s);
        }
        assert_eq!(Ref::parse("abcé").unwrap(), Ref::Named("abcé".into()));
        assert!(matches!(Ref::parse("2026-é"), Err(RefError::Malformed(_))));
        assert!(matches!(Ref::parse("10é"), Err(RefError::Malformed(_))));
    }

    #[test]
    fn refuses_malformed() {
        for s in [
            "",
            "event:",
            "event:x",
            "event:0",
            "event:-1",
            "10",
            "10y",
            "2026-13-01T00:00:00Z",
            "cp:",
            "cp:x",
            "session:",
            "a/b",
            "-x",
            "two words",
            "x:y",
        ] {
            assert!(matches!(Ref::parse(s), Err(RefError::Malformed(_))), "{s}");
        }
    }
}
