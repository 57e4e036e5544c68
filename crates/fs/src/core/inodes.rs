//! The inode table: the numbers the kernel knows the mount's files by, and the names each
//! stands for now. The cache works by name (every name is in the backing directory), the kernel
//! by number, so a rename re-paths every number under the old name, and a number lives as long
//! as the kernel holds a reference (`lookup` counts one, `forget` gives them back). A file with
//! several names (hard links) has one number for all of them, as on the backing directory:
//! `stat` shows one `st_ino`, and the kernel keeps one page cache for the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The mount's root directory, whose path is the empty one.
pub const ROOT: u64 = 1;

/// A number the kernel holds.
#[derive(Debug)]
struct Node {
    /// Its names; requests by number use the first.
    names: Vec<PathBuf>,
    /// References the kernel holds.
    refs: u64,
    /// A file's backing identity (device, inode), by which its other names find this number.
    ident: Option<(u64, u64)>,
}

/// Inode numbers and the names they stand for (see the module doc).
#[derive(Debug, Default)]
pub struct Inodes {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    by_ident: HashMap<(u64, u64), u64>,
    /// The highest number given out.
    next: u64,
    /// A number follows its file to a name found by lookup when its own names no longer lead
    /// to it (a striped mount: other mounts rename). Off, such a file gets a new number, since
    /// its inode number may have been reused by another file and the kernel may hold pages of
    /// the old one under the old number; a striped mount keeps no pages (`direct_io`).
    follow_renames: bool,
}

impl Inodes {
    /// A striped mount's table (see `follow_renames`).
    pub fn following_renames() -> Self {
        Self {
            follow_renames: true,
            ..Self::default()
        }
    }

    /// The path `ino` stands for now, if the kernel still holds it.
    pub fn path(&self, ino: u64) -> Option<PathBuf> {
        if ino == ROOT {
            return Some(PathBuf::new());
        }
        self.nodes.get(&ino).and_then(|n| n.names.first().cloned())
    }

    /// The number of `path`, if the kernel holds one for it (the root always).
    pub fn ino(&self, path: &Path) -> Option<u64> {
        if path.as_os_str().is_empty() {
            return Some(ROOT);
        }
        self.by_path.get(path).copied()
    }

    /// The backing identity (device, inode) `ino` was given for, if it is a file's.
    pub fn ident(&self, ino: u64) -> Option<(u64, u64)> {
        self.nodes.get(&ino).and_then(|n| n.ident)
    }

    /// The number of `path`, counting one more kernel reference.
    pub fn lookup(&mut self, path: &Path) -> u64 {
        self.lookup_file(path, None, |_| false)
    }

    /// [`lookup`](Self::lookup) of a file whose backing identity is `ident` (device, inode):
    /// if it has `links` names and another of them has a number, that is this name's number
    /// too, provided `same(other name)` says the other name still leads to the file (a file
    /// removed behind the cache's back leaves its inode number to be reused).
    pub fn lookup_file(
        &mut self,
        path: &Path,
        file: Option<((u64, u64), u32)>,
        same: impl Fn(&Path) -> bool,
    ) -> u64 {
        if path.as_os_str().is_empty() {
            return ROOT;
        }
        if let Some(&ino) = self.by_path.get(path) {
            let known = self.nodes.get(&ino).and_then(|n| n.ident);
            match (file, known) {
                // The name leads to another file than its number's now: it was renamed or
                // unlinked elsewhere (another mount of a striped cache, or behind the cache's
                // back). The name stops standing for that number, which keeps its other names.
                (Some((ident, _)), Some(k)) if k != ident => self.unname(ino, path),
                _ => {
                    if let Some(n) = self.nodes.get_mut(&ino) {
                        n.refs += 1;
                        // Requests by number use the first name: the one just found to lead
                        // to the file, since another may have gone elsewhere (another mount
                        // of a striped cache unlinked it) and even lead to another file now.
                        if let Some(i) = n.names.iter().position(|p| p == path)
                            && i > 0
                        {
                            let name = n.names.remove(i);
                            n.names.insert(0, name);
                        }
                    }
                    return ino;
                }
            }
        }
        if let Some((ident, links)) = file
            && let Some(&ino) = self.by_ident.get(&ident)
            && let Some(n) = self.nodes.get_mut(&ino)
        {
            let first_leads_there = n.names.first().is_some_and(|p| same(p));
            if links > 1 && first_leads_there {
                n.names.push(path.to_path_buf());
                n.refs += 1;
                self.by_path.insert(path.to_path_buf(), ino);
                return ino;
            }
            if !first_leads_there && self.follow_renames {
                // The file's number stands for names that no longer lead to it (the file was
                // renamed elsewhere): the number follows the file, as a rename here would
                // have it, and requests by number reach it under this name.
                let old = std::mem::replace(&mut n.names, vec![path.to_path_buf()]);
                n.refs += 1;
                for p in old {
                    if self.by_path.get(&p) == Some(&ino) {
                        self.by_path.remove(&p);
                    }
                }
                self.by_path.insert(path.to_path_buf(), ino);
                return ino;
            }
        }
        // Numbers are never reused in a mount: the kernel may still hold a forgotten one.
        self.next = self.next.max(ROOT) + 1;
        let ino = self.next;
        let ident = file.map(|(i, _)| i);
        self.nodes.insert(
            ino,
            Node {
                names: vec![path.to_path_buf()],
                refs: 1,
                ident,
            },
        );
        self.by_path.insert(path.to_path_buf(), ino);
        if let Some(i) = ident {
            self.by_ident.insert(i, ino);
        }
        ino
    }

    /// `new` was made another name of `ino` (a hard link through the mount), counting one
    /// more kernel reference.
    pub fn linked(&mut self, ino: u64, new: &Path) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.names.push(new.to_path_buf());
            n.refs += 1;
            self.by_path.insert(new.to_path_buf(), ino);
        }
    }

    /// The kernel gave back `n` references to `ino`; at none, the number is gone.
    pub fn forget(&mut self, ino: u64, n: u64) {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.refs = node.refs.saturating_sub(n);
        if node.refs > 0 {
            return;
        }
        if let Some(node) = self.nodes.remove(&ino) {
            for p in node.names {
                if self.by_path.get(&p) == Some(&ino) {
                    self.by_path.remove(&p);
                }
            }
            if let Some(i) = node.ident
                && self.by_ident.get(&i) == Some(&ino)
            {
                self.by_ident.remove(&i);
            }
        }
    }

    /// `path` no longer stands for `ino` (it leads to another file now): removed from the
    /// number's names; a number left with none keeps a name that resolves to nothing.
    fn unname(&mut self, ino: u64, path: &Path) {
        if self.by_path.get(path) == Some(&ino) {
            self.by_path.remove(path);
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.names.retain(|p| p != path);
            if n.names.is_empty() {
                // NUL never occurs in a path: this name resolves to nothing in the backing tree.
                n.names
                    .push(PathBuf::from(format!("\0renamed-elsewhere-{ino}")));
            }
        }
    }

    /// `path` was removed. A number with other names keeps them; one with none keeps the old
    /// name for its requests (an open file reads on), but the name no longer leads to it: a
    /// file made under it later gets a number of its own.
    pub fn unlinked(&mut self, path: &Path) {
        let Some(ino) = self.by_path.remove(path) else {
            return;
        };
        if let Some(n) = self.nodes.get_mut(&ino)
            && n.names.len() > 1
        {
            n.names.retain(|p| p != path);
        }
    }

    /// `from` was renamed to `to` (or, with `exchange`, the two swapped): every number at or
    /// under either follows its file. A file `to` replaced loses that name; with no other, it
    /// keeps its number under no name, for as long as the kernel holds it (an open file of it
    /// still reads through it).
    pub fn renamed(&mut self, from: &Path, to: &Path, exchange: bool) {
        let swap = |base: &Path, rest: &Path| {
            if rest.as_os_str().is_empty() {
                base.to_path_buf()
            } else {
                base.join(rest)
            }
        };
        if !exchange
            && let Some(ino) = self.by_path.remove(to)
            && let Some(n) = self.nodes.get_mut(&ino)
        {
            n.names.retain(|p| p != to);
            if n.names.is_empty() {
                // NUL never occurs in a path: this name resolves to nothing in the backing tree.
                n.names.push(PathBuf::from(format!("\0replaced-{ino}")));
            }
        }
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from) || (exchange && p.starts_with(to)))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, _) in &moved {
            self.by_path.remove(p);
        }
        for (p, ino) in moved {
            let new = match (p.strip_prefix(from), p.strip_prefix(to)) {
                (Ok(rest), _) => swap(to, rest),
                (_, Ok(rest)) => swap(from, rest),
                _ => continue,
            };
            if let Some(n) = self.nodes.get_mut(&ino)
                && let Some(name) = n.names.iter_mut().find(|x| **x == p)
            {
                *name = new.clone();
            }
            self.by_path.insert(new, ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn a_number_lives_while_the_kernel_holds_it_and_is_never_given_again() {
        let mut t = Inodes::default();
        assert_eq!(t.path(ROOT), Some(PathBuf::new()));
        assert_eq!(t.lookup(Path::new("")), ROOT);
        let a = t.lookup(&p("a"));
        assert_ne!(a, ROOT);
        assert_eq!(t.lookup(&p("a")), a, "the same path, the same number");
        t.forget(a, 1);
        assert_eq!(t.path(a), Some(p("a")), "one reference is left");
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_eq!(t.ino(&p("a")), None);
        let again = t.lookup(&p("a"));
        assert!(
            again > a,
            "a forgotten number is not reused ({again} after {a})"
        );
        t.forget(again, 5);
        assert_eq!(
            t.path(again),
            None,
            "more references given back than held: gone"
        );
    }

    #[test]
    fn a_rename_repaths_the_tree_under_it_and_a_replaced_file_keeps_its_number_nameless() {
        let mut t = Inodes::default();
        let d = t.lookup(&p("d"));
        let f = t.lookup(&p("d/sub/f"));
        let other = t.lookup(&p("dx"));
        let victim = t.lookup(&p("e"));
        t.renamed(&p("d"), &p("e"), false);
        assert_eq!(t.path(d), Some(p("e")));
        assert_eq!(t.path(f), Some(p("e/sub/f")));
        assert_eq!(
            t.path(other),
            Some(p("dx")),
            "a name that only starts alike stays"
        );
        let gone = t.path(victim).expect("still held by the kernel");
        assert!(gone.as_os_str().to_string_lossy().starts_with('\0'));
        assert_eq!(t.ino(&p("e")), Some(d));
        assert_eq!(t.ino(&p("d")), None);
        // Forgetting the replaced number must not drop the name its old path now belongs to.
        t.forget(victim, 1);
        assert_eq!(t.ino(&p("e")), Some(d));
    }

    #[test]
    fn an_exchange_swaps_both_trees() {
        let mut t = Inodes::default();
        let a = t.lookup(&p("a"));
        let a1 = t.lookup(&p("a/1"));
        let b = t.lookup(&p("b"));
        let b2 = t.lookup(&p("b/2"));
        t.renamed(&p("a"), &p("b"), true);
        assert_eq!(t.path(a), Some(p("b")));
        assert_eq!(t.path(a1), Some(p("b/1")));
        assert_eq!(t.path(b), Some(p("a")));
        assert_eq!(t.path(b2), Some(p("a/2")));
        assert_eq!(t.ino(&p("a/2")), Some(b2));
    }

    #[test]
    fn a_name_that_leads_to_another_file_now_stops_standing_for_its_old_number() {
        for mut t in [Inodes::default(), Inodes::following_renames()] {
            let a = t.lookup_file(&p("a"), Some(((7, 1), 1)), |_| true);
            // Another mount renamed another file over "a": the name is that file's now.
            let b = t.lookup_file(&p("a"), Some(((7, 2), 1)), |_| true);
            assert_ne!(a, b);
            assert_eq!(t.ino(&p("a")), Some(b));
            assert_ne!(
                t.path(a),
                Some(p("a")),
                "requests by the old number reach the new file"
            );
        }
    }

    #[test]
    fn requests_by_number_use_the_name_last_found_to_lead_to_the_file() {
        let mut t = Inodes::following_renames();
        let a = t.lookup_file(&p("a"), Some(((7, 1), 2)), |_| true);
        t.linked(a, &p("b"));
        assert_eq!(t.path(a), Some(p("a")));
        // "a" was unlinked through another mount (and may be another file now): "b" is found.
        assert_eq!(t.lookup_file(&p("b"), Some(((7, 1), 1)), |_| true), a);
        assert_eq!(t.path(a), Some(p("b")));
    }

    #[test]
    fn on_a_striped_mount_a_number_follows_its_file_renamed_through_another_mount() {
        let mut t = Inodes::following_renames();
        let a = t.lookup_file(&p("a"), Some(((7, 1), 1)), |_| true);
        // Renamed to "z" elsewhere: "a" leads nowhere, and "z" is found with the same identity.
        let z = t.lookup_file(&p("z"), Some(((7, 1), 1)), |q| q == Path::new("z"));
        assert_eq!(z, a);
        assert_eq!(t.path(a), Some(p("z")));
        assert_eq!(t.ino(&p("a")), None);
        // Without following, such a file gets a number of its own (its inode may be a reused one).
        let mut t = Inodes::default();
        let a = t.lookup_file(&p("a"), Some(((7, 1), 1)), |_| true);
        let z = t.lookup_file(&p("z"), Some(((7, 1), 1)), |q| q == Path::new("z"));
        assert_ne!(z, a);
    }

    #[test]
    fn the_names_of_one_file_share_its_number_while_they_last() {
        let mut t = Inodes::default();
        let ident = (7, 42);
        let a = t.lookup_file(&p("a"), Some((ident, 1)), |_| true);
        // Linked through the mount.
        t.linked(a, &p("b"));
        assert_eq!(t.ino(&p("b")), Some(a));
        // Linked behind the mount's back, found by identity.
        let c = t.lookup_file(&p("c"), Some((ident, 3)), |q| q == Path::new("a"));
        assert_eq!(c, a);
        // A file that no longer is what its first name leads to: a number of its own.
        let d = t.lookup_file(&p("d"), Some((ident, 4)), |_| false);
        assert_ne!(d, a);
        // One name goes: the others still lead to the number, and requests use one of them.
        t.unlinked(&p("a"));
        assert_eq!(t.ino(&p("a")), None);
        assert_eq!(t.path(a), Some(p("b")));
        t.renamed(&p("b"), &p("e"), false);
        assert_eq!(t.path(a), Some(p("e")));
        assert_eq!(t.ino(&p("c")), Some(a));
        // A rename over a name of it takes only that name.
        let f = t.lookup(&p("f"));
        t.renamed(&p("f"), &p("c"), false);
        assert_eq!(t.ino(&p("c")), Some(f));
        assert_eq!(t.path(a), Some(p("e")));
        // Two lookups and a link: three references.
        t.forget(a, 2);
        assert_eq!(t.path(a), Some(p("e")));
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_eq!(t.ino(&p("e")), None);
        // The identity now leads to the number that took it last, never to a forgotten one.
        let g = t.lookup_file(&p("g"), Some((ident, 2)), |_| true);
        assert_eq!(g, d);
    }
}
