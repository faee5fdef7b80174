//! The virtual, read-only `.agx` directory shown at the top of the mount in place of agx's
//! physical state directory.

use fuser::{FileAttr, FileType, INodeNo};

use super::AgxFs;
use crate::ids::NodeId;

impl AgxFs {
    pub(super) fn agx_dir_attr(&self) -> FileAttr {
        let (uid, gid) = match rustix::fs::fstat(&*self.root_fd()) {
            Ok(st) => (st.st_uid, st.st_gid),
            Err(_) => (0, 0),
        };
        FileAttr {
            ino: INodeNo(NodeId::AGX_DIR.0),
            size: 0,
            blocks: 0,
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind: FileType::Directory,
            perm: 0o555,
            nlink: 3,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}
