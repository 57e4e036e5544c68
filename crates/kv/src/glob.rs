//! Redis's glob patterns (KEYS, SCAN MATCH): `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, and `\`
//! escaping the next byte. Bytes, not characters, as Redis matches.

/// Whether `s` matches `pattern`. Iterative with one backtrack point per `*`, so hostile
/// patterns (`*a*a*a*…b`) cost O(len(pattern) × len(s)), not exponential time.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    // Where to resume after the latest `*`: the pattern after it, and the next input byte.
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p + 1, i));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, s[i])
                        && matched
                    {
                        p = next;
                        i += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() && pattern[p + 1] == s[i] => {
                    p += 2;
                    i += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() => {}
                c if c == s[i] => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class opening at `pattern[open]` (`[`); returns whether it matched
/// and where the pattern goes on. An unclosed class runs to the pattern's end, as in Redis.
fn class(pattern: &[u8], open: usize, c: u8) -> Option<(bool, usize)> {
    let mut p = open + 1;
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut matched = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            matched |= pattern[p + 1] == c;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (a, b) = (
                pattern[p].min(pattern[p + 2]),
                pattern[p].max(pattern[p + 2]),
            );
            matched |= (a..=b).contains(&c);
            p += 3;
        } else {
            matched |= pattern[p] == c;
            p += 1;
        }
    }
    let next = (p + 1).min(pattern.len());
    Some((matched != negate, next))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn patterns_match_as_in_redis() {
        let yes = [
            ("*", ""),
            ("*", "abc"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("key:*:x", "key:12:x"),
            ("a\\*b", "a*b"),
            ("*.txt", "notes.txt"),
        ];
        let no = [
            ("h?llo", "hllo"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("a\\*b", "axb"),
            ("key:*:x", "key:12:y"),
            ("", "a"),
        ];
        for (p, s) in yes {
            assert!(glob_match(p.as_bytes(), s.as_bytes()), "{p} ~ {s}");
        }
        for (p, s) in no {
            assert!(!glob_match(p.as_bytes(), s.as_bytes()), "{p} !~ {s}");
        }
    }

    #[test]
    fn a_hostile_pattern_takes_polynomial_time() {
        let p = "*a".repeat(30) + "b";
        let s = "a".repeat(5000);
        assert!(!glob_match(p.as_bytes(), s.as_bytes()));
    }
}
