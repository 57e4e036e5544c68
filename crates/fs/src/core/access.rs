//! Who may use the mount: the check the kernel cannot make.
//!
//! The kernel checks permissions (`default_permissions`) against the backing directory's modes
//! and owners, which the attributes pass through. What it cannot see are the directories above
//! the backing directory: a user who may not traverse them must not reach the backing tree
//! through the mount (DataWarp's hole). Every request from a user other than the mount's owner
//! and root is checked against them first ([`Gate::admits`]).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

use super::{Caller, lock, want};

/// Who may use the mount beyond its owner.
#[derive(Debug, Clone)]
pub struct Access {
    /// The daemon's user: always allowed.
    pub owner: u32,
    /// The directories above the backing directory: `(mode, uid, gid)` of each.
    pub ancestors: Vec<(u32, u32, u32)>,
    /// Files created for other users get their owner (only meaningful run as root).
    pub chown_new: bool,
}

impl Access {
    /// Reads the modes of the backing directory's ancestors.
    pub fn for_backing(backing: &Path, chown_new: bool) -> std::io::Result<Self> {
        let mut ancestors = Vec::new();
        let mut p = backing.parent();
        while let Some(dir) = p {
            let m = std::fs::metadata(dir)?;
            ancestors.push((m.mode(), m.uid(), m.gid()));
            p = dir.parent();
        }
        Ok(Self {
            owner: nix::unistd::getuid().as_raw(),
            ancestors,
            chown_new,
        })
    }

    /// Whether `caller` may search every directory above the backing directory.
    pub fn may_traverse(&self, caller: &Caller) -> bool {
        caller.uid == self.owner
            || self
                .ancestors
                .iter()
                .all(|&(mode, uid, gid)| caller.may(mode, uid, gid, want::EXEC))
    }
}

/// [`Access`] with its answers kept per user and group: a check reads `/proc` for the caller's
/// groups, and every request of a user other than the owner asks. Only answers that do not
/// depend on supplementary groups are kept: a process's groups are its own (one login of a user
/// may be in a group another is not), and a process gone before its groups were read has none
/// to go by; those answers are worked out for each request.
#[derive(Debug)]
pub struct Gate {
    access: Access,
    traversal: Mutex<HashMap<(u32, u32), bool>>,
}

impl Gate {
    /// The gate of `access`.
    pub fn new(access: Access) -> Self {
        Self {
            access,
            traversal: Mutex::new(HashMap::new()),
        }
    }

    /// The rules it applies.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Whether user `uid` of group `gid` may use the mount; `groups` gives the asking process's
    /// supplementary groups (`None`: they could not be read), asked only when the answer is not
    /// kept.
    pub fn admits(&self, uid: u32, gid: u32, groups: impl FnOnce() -> Option<Vec<u32>>) -> bool {
        if uid == 0 || uid == self.access.owner {
            return true;
        }
        if let Some(&known) = lock(&self.traversal).get(&(uid, gid)) {
            return known;
        }
        let alone = self.access.may_traverse(&Caller {
            uid,
            gid,
            groups: Vec::new(),
        });
        // In every group the directories above belong to: if that changes nothing, no
        // supplementary group can, and the answer is the user's whatever process asks.
        let in_all = self.access.may_traverse(&Caller {
            uid,
            gid,
            groups: self.access.ancestors.iter().map(|a| a.2).collect(),
        });
        if in_all == alone {
            lock(&self.traversal).insert((uid, gid), alone);
            return alone;
        }
        match groups() {
            Some(groups) => self.access.may_traverse(&Caller { uid, gid, groups }),
            None => alone,
        }
    }

    /// Whether `uid` may use the verbs that change the mount for every user: the owner and
    /// root.
    pub fn owns(&self, uid: u32) -> bool {
        uid == 0 || uid == self.access.owner
    }

    /// The owner files created by `uid` and `gid` get, when the mount gives them theirs.
    pub fn new_owner(&self, uid: u32, gid: u32) -> Option<(u32, u32)> {
        self.access.chown_new.then_some((uid, gid))
    }
}

/// Supplementary groups of a process, from `/proc/PID/status` (`None` if they cannot be read:
/// the process is gone, or hidden from the daemon).
pub fn groups_of(pid: u32) -> Option<Vec<u32>> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Groups:").map(|g| {
                    g.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::libc_mode::S_IFDIR;

    fn gate(ancestors: Vec<(u32, u32, u32)>) -> Gate {
        Gate::new(Access {
            owner: 1000,
            ancestors,
            chown_new: false,
        })
    }

    #[test]
    fn a_user_who_may_not_search_a_directory_above_the_backing_one_is_kept_out() {
        // /home/alice (0700 alice) above the backing directory, / (0755 root).
        let g = gate(vec![(S_IFDIR | 0o700, 1000, 1000), (S_IFDIR | 0o755, 0, 0)]);
        assert!(g.admits(1000, 1000, || Some(Vec::new())), "the owner");
        assert!(g.admits(0, 0, || Some(Vec::new())), "root");
        assert!(!g.admits(2000, 2000, || Some(Vec::new())), "another user");
        let g = gate(vec![(S_IFDIR | 0o710, 1000, 50), (S_IFDIR | 0o755, 0, 0)]);
        assert!(
            !g.admits(2000, 2000, || Some(Vec::new())),
            "not in the group"
        );
        assert!(
            g.admits(2000, 50, || Some(Vec::new())),
            "the group by its primary group"
        );
        assert!(
            g.admits(3000, 3000, || Some(vec![7, 50])),
            "by a supplementary group"
        );
        let g = gate(vec![(S_IFDIR | 0o701, 1000, 50)]);
        assert!(
            g.admits(2000, 2000, || Some(Vec::new())),
            "others may search"
        );
        assert!(
            !g.admits(2001, 50, || Some(Vec::new())),
            "the group's bits decide for its members"
        );
    }

    #[test]
    fn only_answers_no_group_could_change_are_kept() {
        let g = gate(vec![(S_IFDIR | 0o710, 1000, 50)]);
        let mut asked = 0;
        // Refused whatever the groups (others may not search): kept, the groups never read.
        let g2 = gate(vec![(S_IFDIR | 0o700, 1000, 50)]);
        assert!(!g2.admits(3000, 3000, || {
            asked += 1;
            Some(vec![50])
        }));
        assert!(!g2.admits(3000, 3000, || {
            asked += 1;
            Some(Vec::new())
        }));
        assert_eq!(asked, 0);
        // Let in by a supplementary group: not kept, so a login of the same user outside the
        // group is refused, and one whose groups could not be read is judged without them.
        assert!(g.admits(3000, 3000, || Some(vec![50])));
        assert!(!g.admits(3000, 3000, || Some(Vec::new())));
        assert!(!g.admits(3000, 3000, || None));
        assert!(g.admits(3000, 3000, || Some(vec![50])));
        assert!(g.owns(1000) && g.owns(0) && !g.owns(3000));
        assert_eq!(g.new_owner(3000, 3000), None);
    }

    #[test]
    fn a_process_groups_are_read_from_proc() {
        let mine = groups_of(std::process::id()).expect("our own groups");
        let expected: Vec<u32> = nix::unistd::getgroups()
            .expect("getgroups")
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        assert_eq!(mine, expected);
        assert_eq!(groups_of(u32::MAX), None, "no such process");
    }
}
