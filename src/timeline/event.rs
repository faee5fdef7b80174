//! Events: one logical change to one path (or two, for a rename), with the state of what it
//! changed before and after.

use serde::{Deserialize, Serialize};

use crate::ids::{ContentHash, Seq};

/// What a path held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Absent,
    File,
    Dir,
    Symlink,
    /// Fifos, sockets, devices: restored by metadata only.
    Other,
}

/// Extended attributes: (name, value) pairs.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// Metadata of an object (files, directories, symlinks alike).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: u32,
    pub atime: i64,
    pub atime_nsec: u32,
    /// Symlink target bytes (hex).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_opt")]
    pub target: Option<Vec<u8>>,
    /// Extended attributes, name and value bytes (hex).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_pairs")]
    pub xattrs: Xattrs,
    /// Device number for device nodes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rdev: u64,
    /// The backing object's device and inode number, and its link count, when the state
    /// was read (0: not recorded, as in events older than these fields). Names whose
    /// states show one inode were hard links of one file (see `restore/links.rs`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dev: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ino: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nlink: u64,
    /// The object's birth time (nanoseconds since the epoch; 0: not known, as on
    /// filesystems without birth times and in events older than this field).
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub btime: i64,
    /// Inode flags (`FS_IOC_GETFLAGS`: what `lsattr` shows), when read. Reading them takes
    /// an open file, so only a change of them (`chattr`) reads them, before and after;
    /// elsewhere they are None (not known, and a restore leaves them as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<u32>,
    /// Project id (`FS_IOC_FSGETXATTR`), when read (as `flags`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projid: Option<u32>,
}

impl Meta {
    /// The object this state was read from, when recorded.
    pub fn id(&self) -> Option<ObjId> {
        (self.ino != 0).then_some(ObjId {
            dev: self.dev,
            ino: self.ino,
            btime: self.btime,
        })
    }
}

/// Which object a state was read from. An inode number is reused once its object is gone
/// (ext4 hands a freed number out again at once), so the number alone never says two
/// states were of one object: with the birth time it does. Where the filesystem keeps no
/// birth time (or for events recorded before agx read it), `btime` is 0 on every state
/// and the number decides alone, as it can while both objects are alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjId {
    pub dev: u64,
    pub ino: u64,
    pub btime: i64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn is_zero_i64(x: &i64) -> bool {
    *x == 0
}

/// The state of one path at one point: kind, content (files), metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjState {
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<ContentHash>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

impl ObjState {
    pub fn absent() -> ObjState {
        ObjState {
            kind: Kind::Absent,
            hash: None,
            meta: None,
        }
    }

    pub fn size(&self) -> Option<u64> {
        self.meta.as_ref().map(|m| m.size)
    }
}

/// What kind of change an event records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Content written through an open handle (open, writes, close).
    Write,
    Create,
    Mkdir,
    Mknod,
    Symlink,
    Link,
    Unlink,
    Rmdir,
    Rename,
    /// RENAME_EXCHANGE: the two paths swap.
    Exchange,
    Truncate,
    Chmod,
    Chown,
    Utimens,
    Setxattr,
    Removexattr,
    Fallocate,
    /// Inode flags or project id changed (`chattr`, `FS_IOC_SETFLAGS`/`FSSETXATTR`).
    Chattr,
}

impl Op {
    pub fn as_str(&self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Mknod => "mknod",
            Op::Symlink => "symlink",
            Op::Link => "link",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Rename => "rename",
            Op::Exchange => "exchange",
            Op::Truncate => "truncate",
            Op::Chmod => "chmod",
            Op::Chown => "chown",
            Op::Utimens => "utimens",
            Op::Setxattr => "setxattr",
            Op::Removexattr => "removexattr",
            Op::Chattr => "chattr",
            Op::Fallocate => "fallocate",
        }
    }

    pub fn parse(s: &str) -> Option<Op> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
    }
}

/// Who made a change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub pid: u32,
    pub process: String,
    pub exe: String,
    /// The process's agent session (stored as `Event::session`, not in the actor).
    #[serde(skip)]
    pub session: Option<String>,
    /// The session's tool call in progress when the change began (`Event::tool_call`).
    #[serde(skip)]
    pub tool_call: Option<i64>,
    /// The branch the change is made in (`Event::branch`; None: the main tree).
    #[serde(skip)]
    pub branch: Option<crate::ids::BranchId>,
}

/// One recorded change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: Seq,
    /// Nanoseconds since the Unix epoch.
    pub time_ns: i64,
    pub op: Op,
    /// Path relative to the project root (raw bytes).
    #[serde(with = "hex_bytes")]
    pub path: Vec<u8>,
    /// Rename/exchange destination.
    #[serde(default, with = "hex_opt")]
    pub to_path: Option<Vec<u8>>,
    /// State of `path` before the change.
    pub before: ObjState,
    /// State of `path` after the change (for a rename: of `to_path`).
    pub after: ObjState,
    /// State of `to_path` before a rename or exchange.
    #[serde(default)]
    pub target_before: Option<ObjState>,
    /// False when the before content was too large to keep (hashes only).
    pub captured: bool,
    pub actor: Actor,
    pub session: Option<String>,
    /// The agent tool call (reported by a hook) the change was made during.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<i64>,
    /// Why agx itself made this change (restore), if it did.
    #[serde(default)]
    pub note: Option<String>,
    /// The branch the change was made in (None: the main tree). Its path is relative to
    /// the branch's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<crate::ids::BranchId>,
}

impl Event {
    pub fn path_str(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }

    pub fn to_path_str(&self) -> Option<String> {
        self.to_path
            .as_ref()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_hex(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        super::from_hex(&s).ok_or_else(|| serde::de::Error::custom("bad hex"))
    }
}

mod hex_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&super::to_hex(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => super::from_hex(&s)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom("bad hex")),
            None => Ok(None),
        }
    }
}

mod hex_pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &super::Xattrs, s: S) -> Result<S::Ok, S::Error> {
        let pairs: Vec<(String, String)> = v
            .iter()
            .map(|(a, b)| (super::to_hex(a), super::to_hex(b)))
            .collect();
        pairs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::Xattrs, D::Error> {
        let pairs = Vec::<(String, String)>::deserialize(d)?;
        pairs
            .into_iter()
            .map(|(a, b)| match (super::from_hex(&a), super::from_hex(&b)) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err(serde::de::Error::custom("bad hex")),
            })
            .collect()
    }
}

pub fn to_hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Serialize for ContentHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ContentHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ContentHash::from_hex(&s).ok_or_else(|| serde::de::Error::custom("bad content hash"))
    }
}

impl<'de> Deserialize<'de> for Seq {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        i64::deserialize(d).map(Seq)
    }
}
