//! The `include` pattern matching of targets.conf (what Perl's `glob` does for
//! Config::General's `-IncludeGlob`): `*`, `?` and `[...]` classes (`[a-z]`,
//! `[!x]`) within one path component; matches are sorted; names starting
//! with `.` match only a pattern that starts with `.`. Brace lists and `~`
//! are not expanded.

use std::path::{Component, Path, PathBuf};

/// True when `pattern` has a wildcard (`*`, `?` or `[`).
pub(crate) fn has_magic(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// True when `name` matches the one-component `pattern`.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> bool {
    // Iterative matcher with backtracking on the last `*`.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => Some(pi + 1),
            Some('[') => class(p, pi, n[ni]),
            Some(&c) => (c == n[ni]).then_some(pi + 1),
            None => None,
        };
        match step {
            Some(next) => {
                pi = next;
                ni += 1;
            }
            None => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Matches `c` against the class starting at `p[start] == '['`; returns the
/// index after the class when it matches. An unclosed `[` is a literal.
fn class(p: &[char], start: usize, c: char) -> Option<usize> {
    let mut i = start + 1;
    let negate = matches!(p.get(i), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let first = i;
    let mut hit = false;
    while i < p.len() {
        if p[i] == ']' && i > first {
            return (hit != negate).then_some(i + 1);
        }
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            hit |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    // No closing bracket: `[` is an ordinary character.
    (c == '[').then_some(start + 1)
}

/// Expands an absolute `pattern` against the file system: every existing
/// path that matches, sorted. Unreadable directories match nothing.
pub(crate) fn expand(pattern: &Path) -> Vec<PathBuf> {
    let mut current = vec![PathBuf::new()];
    for comp in pattern.components() {
        let part = match comp {
            Component::Normal(s) => s.to_string_lossy().into_owned(),
            other => {
                for c in &mut current {
                    c.push(other.as_os_str());
                }
                continue;
            }
        };
        let mut next = Vec::new();
        for dir in &current {
            if !has_magic(&part) {
                next.push(dir.join(&part));
                continue;
            }
            let Ok(rd) = std::fs::read_dir(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir.as_path()
            }) else {
                continue;
            };
            let mut names: Vec<String> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| matches(&part, name))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| dir.join(n)));
        }
        current = next;
        if current.len() > 4096 {
            current.truncate(4096);
        }
    }
    current.retain(|p| p.exists());
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(matches("*.conf", "a.conf"));
        assert!(!matches("*.conf", "a.conf~"));
        assert!(!matches("*.conf", ".hidden.conf"));
        assert!(matches(".*.conf", ".hidden.conf"));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("[a-c]x", "bx"));
        assert!(!matches("[!a-c]x", "bx"));
        assert!(matches("[!a-c]x", "dx"));
        assert!(matches("*", "anything"));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
        assert!(matches("[x", "[x"));
        assert!(matches("t[]]", "t]"));
        assert!(has_magic("/etc/tgt/conf.d/*.conf"));
        assert!(!has_magic("/etc/tgt/targets.conf"));
    }
}
