//! Every relative link in README.md, CHANGELOG.md and docs/ leads somewhere: the file exists,
//! and a `#fragment` names a heading (as GitHub derives its anchor) or an `id="…"` of that page.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files checked, relative to the repository root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(d) = dirs.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(&d))
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .map(|e| d.join(e.expect("dir entry").file_name()))
            .collect();
        entries.sort();
        for p in entries {
            if root.join(&p).is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    out
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers (1-based).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line without its code spans, which hold text such as `a[i](j)` that is not a link.
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of the inline links and images of a line: `[text](target)`, `![alt](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        // Targets may hold balanced parentheses (`#replaying-…-pliant-demo---trace` does not,
        // but a file name could).
        let mut depth = 0;
        let mut end = None;
        for (j, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(j);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's anchor for a heading: its text without markup, lowercased, punctuation other than
/// `-` and `_` dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    // A link in a heading contributes its text only.
    let mut rest = heading;
    while let Some(i) = rest.find("](") {
        text.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        rest = after.find(')').map_or("", |j| &after[j + 1..]);
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a page offers: its headings' (a repeated one gets `-1`, `-2`, …, as on GitHub)
/// and every `id="…"`.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(line[hashes..].trim());
            let n = seen.entry(base.clone()).or_insert(0);
            out.push(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        let mut rest = line;
        while let Some(i) = rest.find("id=\"") {
            let after = &rest[i + 4..];
            let Some(j) = after.find('"') else { break };
            out.push(after[..j].to_string());
            rest = &after[j..];
        }
    }
    out
}

/// `a/b/../c` as `a/c`, without touching the file system (the target may not exist).
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The broken links of the given documents under `root`, one message each, naming file and line.
fn broken_links(root: &Path, docs: &[PathBuf]) -> Vec<String> {
    let mut texts: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut read = |p: &Path| -> Option<String> {
        if !texts.contains_key(p) {
            let t = std::fs::read_to_string(root.join(p)).ok()?;
            texts.insert(p.to_path_buf(), t);
        }
        texts.get(p).cloned()
    };
    let mut broken = Vec::new();
    for doc in docs {
        let text = read(doc).unwrap_or_else(|| panic!("{}: unreadable", doc.display()));
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                    continue;
                }
                let (path, fragment) = match target.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    doc.clone()
                } else {
                    normalise(&doc.parent().unwrap_or(Path::new("")).join(path))
                };
                let at = format!("{}:{n}: ({target})", doc.display());
                if file.starts_with("..") || !root.join(&file).exists() {
                    broken.push(format!("{at}: {} does not exist", file.display()));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                if file.extension().is_none_or(|e| e != "md") || root.join(&file).is_dir() {
                    continue;
                }
                let Some(page) = read(&file) else {
                    broken.push(format!("{at}: {} is unreadable", file.display()));
                    continue;
                };
                if !anchors(&page).iter().any(|a| a == fragment) {
                    broken.push(format!(
                        "{at}: no heading or id \"{fragment}\" in {}",
                        file.display()
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let root = root();
    let docs = documents(&root);
    assert!(docs.len() > 5, "README, CHANGELOG and the guides: {docs:?}");
    let broken = broken_links(&root, &docs);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_finds_a_missing_file_a_missing_anchor_and_reads_past_code() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(d.path().join("docs")).expect("mkdir");
    std::fs::write(
        d.path().join("docs/guide.md"),
        "# How do I run it (`pliant demo --trace`)?\n\n## Setup\n\n## Setup\n\n\
         <a id=\"row-1\"></a>\n",
    )
    .expect("write");
    std::fs::write(
        d.path().join("README.md"),
        "[ok](docs/guide.md#how-do-i-run-it-pliant-demo---trace) [ok](docs/guide.md#setup-1)\n\
         [ok](docs/guide.md#row-1) [ok](https://example.com/x) [ok](#top)\n\
         # Top\n\
         `[not a link](nowhere.md)`\n\
         ```\n[not a link](nowhere.md)\n```\n\
         [bad](docs/missing.md) [bad](docs/guide.md#setup-2) [bad](../outside.md)\n",
    )
    .expect("write");
    let broken = broken_links(d.path(), &[PathBuf::from("README.md")]);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].starts_with("README.md:8: (docs/missing.md)"),
        "{broken:#?}"
    );
    assert!(
        broken[1].contains("no heading or id \"setup-2\""),
        "{broken:#?}"
    );
    assert!(
        broken[2].contains("../outside.md does not exist"),
        "{broken:#?}"
    );
}
