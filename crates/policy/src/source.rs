//! Policy source code in its two styles, and how files on disk map onto them.

use std::path::{Path, PathBuf};

use crate::PolicyError;

/// The four decisions a policy can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Callback {
    /// Compute this server's load (`servers[whoami]["load"]`).
    Load,
    /// Should the service act now? A boolean.
    When,
    /// Where to send load: a `targets` table `{[server_id] = amount}`.
    Where,
    /// How much to act by: a number or a table.
    HowMuch,
}

impl Callback {
    /// All callbacks, in evaluation order.
    pub const ALL: [Callback; 4] = [Self::Load, Self::When, Self::Where, Self::HowMuch];

    /// The callback's Lua name (`howmuch`), which is also its chunk file stem.
    pub fn name(self) -> &'static str {
        match self {
            Self::Load => "load",
            Self::When => "when",
            Self::Where => "where",
            Self::HowMuch => "howmuch",
        }
    }

    fn from_stem(stem: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == stem)
    }
}

impl std::fmt::Display for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One piece of Lua source with the name it is reported under in errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Shown in errors and tracebacks (`policies/x/when.lua`).
    pub name: String,
    /// The Lua source.
    pub code: String,
}

/// How a policy's callbacks are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Style {
    /// One chunk defining global functions `load()`, `when()`, `where(targets)`, `howmuch()`.
    Functions(Chunk),
    /// Mantle-library style: one chunk per callback, each returning its decision. The `load`
    /// chunk, if any, runs before each of the others.
    Chunks(Vec<(Callback, Chunk)>),
}

impl Style {
    /// `functions` or `chunks`, as the CLI and logs name the style.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Functions(_) => "functions",
            Self::Chunks(_) => "chunks",
        }
    }
}

/// A policy as written: a name (which also keys its persisted state) and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySource {
    /// The policy's name: the file stem, or the directory name for chunk-style policies.
    pub name: String,
    /// The source.
    pub style: Style,
}

impl PolicySource {
    /// A function-style policy from a string.
    pub fn functions(name: impl Into<String>, code: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            style: Style::Functions(Chunk {
                name: format!("{name}.lua"),
                code: code.into(),
            }),
            name,
        }
    }

    /// A chunk-style policy from `(callback, code)` pairs.
    pub fn chunks<'a>(
        name: impl Into<String>,
        parts: impl IntoIterator<Item = (Callback, &'a str)>,
    ) -> Self {
        let chunks = parts
            .into_iter()
            .map(|(cb, code)| {
                (
                    cb,
                    Chunk {
                        name: format!("{cb}.lua"),
                        code: code.to_string(),
                    },
                )
            })
            .collect();
        Self {
            name: name.into(),
            style: Style::Chunks(chunks),
        }
    }

    /// A policy as a user names one: a file, chunk files or a chunk directory (as
    /// [`from_paths`](Self::from_paths)), or, when one path names nothing on disk, the shipped
    /// policy of that name (see [`shipped`](crate::shipped)).
    pub fn resolve(paths: &[PathBuf]) -> Result<Self, PolicyError> {
        if let [one] = paths
            && !one.exists()
        {
            return one
                .to_str()
                .and_then(crate::shipped::get)
                .ok_or_else(|| PolicyError::NotFound { path: one.clone() });
        }
        Self::from_paths(paths)
    }

    /// Loads a policy from files, recognising the style:
    ///
    /// - one directory: its `load.lua`, `when.lua`, `where.lua`, `howmuch.lua` (chunk style), or
    ///   its single `.lua` file (function style);
    /// - files all named `load.lua` / `when.lua` / `where.lua` / `howmuch.lua`: chunk style, named
    ///   after their directory;
    /// - one other `.lua` file: function style, named after the file.
    pub fn from_paths(paths: &[PathBuf]) -> Result<Self, PolicyError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| PolicyError::Read {
                path: p.to_path_buf(),
                source,
            })
        };
        match paths {
            [] => Err(PolicyError::Shape("no policy files given".into())),
            [one] if one.is_dir() => {
                let mut files: Vec<PathBuf> = std::fs::read_dir(one)
                    .map_err(|source| PolicyError::Read {
                        path: one.clone(),
                        source,
                    })?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "lua"))
                    .collect();
                files.sort();
                if files.is_empty() {
                    return Err(PolicyError::Shape(format!(
                        "{} holds no .lua files",
                        one.display()
                    )));
                }
                Self::from_paths(&files)
            }
            _ => {
                let stems: Vec<Option<Callback>> = paths
                    .iter()
                    .map(|p| {
                        p.file_stem()
                            .and_then(|s| s.to_str())
                            .and_then(Callback::from_stem)
                    })
                    .collect();
                if stems.iter().all(Option::is_some) {
                    let mut chunks: Vec<(Callback, Chunk)> = Vec::new();
                    for (p, cb) in paths.iter().zip(stems.into_iter().flatten()) {
                        if chunks.iter().any(|(c, _)| *c == cb) {
                            return Err(PolicyError::Shape(format!(
                                "two {cb}.lua chunks given ({})",
                                p.display()
                            )));
                        }
                        chunks.push((
                            cb,
                            Chunk {
                                name: p.display().to_string(),
                                code: read(p)?,
                            },
                        ));
                    }
                    chunks.sort_by_key(|(cb, _)| *cb);
                    let dir = paths[0]
                        .canonicalize()
                        .ok()
                        .and_then(|p| p.parent().map(Path::to_path_buf))
                        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                        .unwrap_or_else(|| "policy".to_string());
                    Ok(Self {
                        name: dir,
                        style: Style::Chunks(chunks),
                    })
                } else if let [one] = paths {
                    let name = one
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_else(|| "policy".to_string());
                    Ok(Self {
                        name,
                        style: Style::Functions(Chunk {
                            name: one.display().to_string(),
                            code: read(one)?,
                        }),
                    })
                } else {
                    Err(PolicyError::Shape(format!(
                        "several files given, but not all are named load.lua, when.lua, where.lua \
                         or howmuch.lua: {}",
                        paths
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        }
    }

    /// Splits paths naming several policies (as `pliant policy check` takes them) into one list
    /// per policy, for [`from_paths`](Self::from_paths): chunk files (existing files named
    /// `load.lua`, `when.lua`, `where.lua` or `howmuch.lua`) group by directory, at the place of
    /// their directory's first file; anything else (a function-style file, a chunk directory, a
    /// name that is not a file) stands alone.
    pub fn group_paths(paths: &[PathBuf]) -> Vec<Vec<PathBuf>> {
        let is_chunk = |p: &Path| {
            p.is_file()
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(Callback::from_stem)
                    .is_some()
        };
        let mut groups: Vec<Vec<PathBuf>> = Vec::new();
        let mut by_dir: Vec<(PathBuf, usize)> = Vec::new();
        for p in paths {
            if !is_chunk(p) {
                groups.push(vec![p.clone()]);
                continue;
            }
            let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
            match by_dir.iter().find(|(d, _)| *d == dir) {
                Some(&(_, i)) => groups[i].push(p.clone()),
                None => {
                    by_dir.push((dir, groups.len()));
                    groups.push(vec![p.clone()]);
                }
            }
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_of_chunks_is_chunk_style_named_after_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pol = dir.path().join("greedy");
        std::fs::create_dir(&pol).expect("mkdir");
        std::fs::write(pol.join("when.lua"), "return true").expect("write");
        std::fs::write(pol.join("load.lua"), "return 1").expect("write");
        let src = PolicySource::from_paths(&[pol]).expect("policy");
        assert_eq!(src.name, "greedy");
        let Style::Chunks(chunks) = src.style else {
            panic!("expected chunk style")
        };
        let cbs: Vec<_> = chunks.iter().map(|(c, _)| *c).collect();
        assert_eq!(cbs, [Callback::Load, Callback::When]);
    }

    #[test]
    fn single_file_is_function_style() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("mine.lua");
        std::fs::write(&f, "function when() return true end").expect("write");
        let src = PolicySource::from_paths(&[f]).expect("policy");
        assert_eq!(src.name, "mine");
        assert!(matches!(src.style, Style::Functions(_)));
    }

    #[test]
    fn mixed_files_are_rejected_with_names() {
        let e = PolicySource::from_paths(&["a/when.lua".into(), "a/other.lua".into()])
            .expect_err("mixed");
        assert!(e.to_string().contains("other.lua"), "{e}");
    }

    #[test]
    fn chunk_files_group_by_directory_and_the_rest_stand_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir(d).expect("mkdir");
            for f in ["load.lua", "when.lua", "howmuch.lua"] {
                std::fs::write(d.join(f), "return 1").expect("write");
            }
        }
        std::fs::write(dir.path().join("f.lua"), "").expect("write");
        let paths: Vec<PathBuf> = vec![
            a.join("when.lua"),
            dir.path().join("f.lua"),
            b.join("load.lua"),
            a.join("load.lua"),
            "static-limit".into(),
            b.join("howmuch.lua"),
            // Not a file: a name like any other, alone.
            a.join("where.lua"),
            b.clone(),
        ];
        let p = |i: usize| paths[i].clone();
        assert_eq!(
            PolicySource::group_paths(&paths),
            [
                vec![p(0), p(3)],
                vec![p(1)],
                vec![p(2), p(5)],
                vec![p(4)],
                vec![p(6)],
                vec![p(7)],
            ]
        );
        assert!(PolicySource::group_paths(&[]).is_empty());
    }
}
