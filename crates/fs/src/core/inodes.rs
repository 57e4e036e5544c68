//! The inode table: the numbers the kernel knows the mount's files by, and the path each stands
//! for now. The cache works by path (every name is in the backing directory), the kernel by
//! number, so a rename re-paths every number under the old name, and a number lives as long as
//! the kernel holds a reference (`lookup` counts one, `forget` gives them back).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The mount's root directory, whose path is the empty one.
pub const ROOT: u64 = 1;

/// Inode numbers and the paths they stand for (see the module doc).
#[derive(Debug, Default)]
pub struct Inodes {
    /// Number → (path, references the kernel holds).
    paths: HashMap<u64, (PathBuf, u64)>,
    by_path: HashMap<PathBuf, u64>,
    /// The highest number given out.
    next: u64,
}

impl Inodes {
    /// The path `ino` stands for now, if the kernel still holds it.
    pub fn path(&self, ino: u64) -> Option<PathBuf> {
        if ino == ROOT {
            return Some(PathBuf::new());
        }
        self.paths.get(&ino).map(|(p, _)| p.clone())
    }

    /// The number of `path`, if the kernel holds one for it (the root always).
    pub fn ino(&self, path: &Path) -> Option<u64> {
        if path.as_os_str().is_empty() {
            return Some(ROOT);
        }
        self.by_path.get(path).copied()
    }

    /// The number of `path`, counting one more kernel reference.
    pub fn lookup(&mut self, path: &Path) -> u64 {
        if path.as_os_str().is_empty() {
            return ROOT;
        }
        if let Some(&ino) = self.by_path.get(path) {
            if let Some(e) = self.paths.get_mut(&ino) {
                e.1 += 1;
            }
            return ino;
        }
        // Numbers are never reused in a mount: the kernel may still hold a forgotten one.
        self.next = self.next.max(ROOT) + 1;
        let ino = self.next;
        self.paths.insert(ino, (path.to_path_buf(), 1));
        self.by_path.insert(path.to_path_buf(), ino);
        ino
    }

    /// The kernel gave back `n` references to `ino`; at none, the number is gone.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if let Some(e) = self.paths.get_mut(&ino) {
            e.1 = e.1.saturating_sub(n);
            if e.1 == 0 {
                let (p, _) = self.paths.remove(&ino).unwrap_or_default();
                if self.by_path.get(&p) == Some(&ino) {
                    self.by_path.remove(&p);
                }
            }
        }
    }

    /// `from` was renamed to `to` (or, with `exchange`, the two swapped): every number at or
    /// under either follows its file. A file `to` replaced keeps its number, under no name, for
    /// as long as the kernel holds it (an open file of it still reads through it).
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
            && let Some(e) = self.paths.get_mut(&ino)
        {
            // NUL never occurs in a path: this name resolves to nothing in the backing tree.
            e.0 = PathBuf::from(format!("\0replaced-{ino}"));
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
            if let Some(e) = self.paths.get_mut(&ino) {
                e.0 = new.clone();
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
}
