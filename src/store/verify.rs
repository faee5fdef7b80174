//! Checking objects one by one, and moving corrupt ones aside.

use rustix::fs::{Mode, RenameFlags};

use super::{rel, rio, Store, StoreError};
use crate::ids::ContentHash;

/// What reading one object found.
#[derive(Debug)]
pub enum ObjectCheck {
    Ok,
    /// The object's own bytes are bad (not an object, undecodable, or not its hash).
    Corrupt(String),
    /// The object is a patch whose base (or one further down its chain) is missing or
    /// corrupt: its own bytes may be fine, but it cannot be read.
    BrokenBase(String),
    /// Reading failed for another reason (permissions, I/O).
    Unreadable(String),
}

impl Store {
    /// Reads and decodes `h` whole (following its patch chain) and compares with its hash.
    pub fn check(&self, h: &ContentHash) -> ObjectCheck {
        match self.get(h) {
            Ok(_) => ObjectCheck::Ok,
            Err(StoreError::Corrupt { hash, reason }) if hash == *h => {
                if reason.starts_with("its base object") {
                    ObjectCheck::BrokenBase(reason)
                } else {
                    ObjectCheck::Corrupt(reason)
                }
            }
            Err(StoreError::Corrupt { hash, reason }) => {
                ObjectCheck::BrokenBase(format!("its base chain is broken at {hash}: {reason}"))
            }
            Err(StoreError::Missing(_)) => ObjectCheck::Unreadable("vanished while checked".into()),
            Err(e) => ObjectCheck::Unreadable(e.to_string()),
        }
    }

    /// Moves object `h` into `quarantine/` next to `objects/` (named by its hash), out of
    /// every reader's way. Nothing is deleted.
    pub fn quarantine(&self, h: &ContentHash) -> Result<(), StoreError> {
        match rustix::fs::mkdirat(&self.dir, "../quarantine", Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(rio("creating .agx/quarantine")(e)),
        }
        let to = format!("../quarantine/{}", h.to_hex());
        rustix::fs::renameat_with(&self.dir, rel(h), &self.dir, to, RenameFlags::NOREPLACE)
            .map_err(rio("moving an object to .agx/quarantine"))
    }
}
