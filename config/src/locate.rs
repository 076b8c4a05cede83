//! Finds where a field path such as `targets[0].luns[1].block_size` is written
//! in a YAML text, so that validation errors (found after serde has thrown the
//! positions away) can name a line and column. A heuristic over block-style
//! YAML: it follows keys by indentation and `- ` sequence items, and looks
//! inside one-line flow values (`iscsi: { MaxBurstLength: 1 }`). When it loses
//! its way it returns the deepest position it did find, or `None`.

#[derive(Debug, PartialEq, Eq)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn segments(path: &str) -> Option<Vec<Seg<'_>>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => part.split_at(i),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Seg::Key(key));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            out.push(Seg::Index(r[..end].parse().ok()?));
            rest = &r[end + 1..];
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// One meaningful line: its index, its indentation and the column where its
/// content starts after any `- ` sequence markers.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    no: usize,
    indent: usize,
    text: &'a str,
}

impl<'a> Line<'a> {
    fn content(&self) -> &'a str {
        &self.text[self.indent..]
    }
    fn is_item(&self) -> bool {
        let c = self.content();
        c == "-" || c.starts_with("- ")
    }
    /// Column (0-based) and text after leading `- ` markers.
    fn after_dashes(&self) -> (usize, &'a str) {
        let mut col = self.indent;
        let mut c = self.content();
        while let Some(r) = c.strip_prefix("- ").or_else(|| c.strip_prefix("-\t")) {
            let trimmed = r.trim_start();
            col += c.len() - trimmed.len();
            c = trimmed;
        }
        (col, c)
    }
}

fn key_matches(content: &str, key: &str) -> bool {
    for quoted in [key.to_string(), format!("\"{key}\""), format!("'{key}'")] {
        if let Some(r) = content.strip_prefix(quoted.as_str()) {
            let r = r.trim_start_matches([' ', '\t']);
            if let Some(after) = r.strip_prefix(':') {
                if after.is_empty() || after.starts_with([' ', '\t']) {
                    return true;
                }
            }
        }
    }
    false
}

/// Column (0-based) of `key:` inside a one-line flow mapping on `text`.
fn key_in_flow(text: &str, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find(key) {
        let at = from + i;
        let before_ok = at == 0 || matches!(bytes[at - 1], b'{' | b',' | b' ' | b'"' | b'\'');
        let after = text[at + key.len()..]
            .trim_start_matches(['"', '\''])
            .trim_start();
        if before_ok && after.starts_with(':') {
            return Some(at);
        }
        from = at + key.len();
    }
    None
}

/// 1-based (line, column) of the key or item named by `path` in `text`.
pub(crate) fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let segs = segments(path)?;
    let lines: Vec<Line<'_>> = text
        .lines()
        .enumerate()
        .filter_map(|(no, t)| {
            let indent = t.len() - t.trim_start_matches(' ').len();
            let content = t[indent..].trim_end();
            if content.is_empty() || content.starts_with('#') || content == "---" {
                None
            } else {
                Some(Line {
                    no,
                    indent,
                    text: t,
                })
            }
        })
        .collect();
    // Current region: lines[start..end]; `best` = deepest position found.
    let (mut start, mut end) = (0usize, lines.len());
    let mut best: Option<(usize, usize)> = None;
    // Set when the value we are in is written inline on one line.
    let mut inline: Option<Line<'_>> = None;
    for seg in &segs {
        if let Some(l) = inline {
            if let Seg::Key(k) = seg {
                if let Some(c) = key_in_flow(l.text, k) {
                    best = Some((l.no + 1, c + 1));
                }
            }
            break;
        }
        match *seg {
            Seg::Key(k) => {
                let found = lines[start..end]
                    .iter()
                    .enumerate()
                    .filter_map(|(i, l)| {
                        let (col, c) = l.after_dashes();
                        key_matches(c, k).then_some((i + start, col))
                    })
                    .min_by_key(|&(_, col)| col);
                let Some((i, col)) = found else { break };
                best = Some((lines[i].no + 1, col + 1));
                let (_, c) = lines[i].after_dashes();
                let value = c.split_once(':').map(|(_, v)| v.trim()).unwrap_or("");
                if !value.is_empty() && !value.starts_with('#') {
                    inline = Some(lines[i]);
                    continue;
                }
                let mut j = i + 1;
                while j < end
                    && (lines[j].indent > col || (lines[j].indent == col && lines[j].is_item()))
                {
                    j += 1;
                }
                start = i + 1;
                end = j;
            }
            Seg::Index(n) => {
                let Some(item_col) = lines[start..end]
                    .iter()
                    .find(|l| l.is_item())
                    .map(|l| l.indent)
                else {
                    break;
                };
                let items: Vec<usize> = (start..end)
                    .filter(|&i| lines[i].indent == item_col && lines[i].is_item())
                    .collect();
                let Some(&i) = items.get(n) else { break };
                let (col, _) = lines[i].after_dashes();
                best = Some((lines[i].no + 1, col + 1));
                start = i;
                end = items.get(n + 1).copied().unwrap_or(end);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const Y: &str = "\
# comment
portals:
  - address: 127.0.0.1:3260
  - address: \"[::1]:3260\"
targets:
- iqn: iqn.2026-11.org.numatgt:a
  iscsi: { MaxBurstLength: 100, FirstBurstLength: 1 }
  luns:
    - lun: 1
      path: /a
    - lun: 2
      # note
      path: /b
      block_size: 1000
- iqn: iqn.2026-11.org.numatgt:b
  allow:
    addresses: [10.0.0.0/8, ALL]
    initiators:
      - iqn.x
      - bad name
";

    #[test]
    fn paths_parse() {
        assert_eq!(
            segments("targets[0].luns[12].block_size"),
            Some(vec![
                Seg::Key("targets"),
                Seg::Index(0),
                Seg::Key("luns"),
                Seg::Index(12),
                Seg::Key("block_size")
            ])
        );
        assert_eq!(segments("a[x]"), None);
    }

    #[test]
    fn finds_keys() {
        assert_eq!(locate(Y, "portals"), Some((2, 1)));
        assert_eq!(locate(Y, "portals[1].address"), Some((4, 5)));
        assert_eq!(locate(Y, "portals[1]"), Some((4, 5)));
        assert_eq!(locate(Y, "targets[0].iqn"), Some((6, 3)));
        assert_eq!(locate(Y, "targets[0].luns[1].block_size"), Some((14, 7)));
        assert_eq!(locate(Y, "targets[0].luns[1].path"), Some((13, 7)));
        assert_eq!(locate(Y, "targets[0].luns[0].path"), Some((10, 7)));
        assert_eq!(
            locate(Y, "targets[0].iscsi.FirstBurstLength"),
            Some((7, 33))
        );
        assert_eq!(locate(Y, "targets[1].iqn"), Some((15, 3)));
        assert_eq!(locate(Y, "targets[1].allow.addresses[1]"), Some((17, 5)));
        assert_eq!(locate(Y, "targets[1].allow.initiators[1]"), Some((20, 9)));
        // Missing key: the deepest parent found.
        assert_eq!(locate(Y, "targets[1].luns"), Some((15, 3)));
        assert_eq!(locate(Y, "numa.nodes"), None);
        assert_eq!(locate("", "x"), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "(( |-|- |#|:|\\[|\\]|\\{|,|a|b|\\n|é|'|\")){0,80}", path in "[ab.\\[\\]0-9]{0,12}") {
            let _ = locate(&text, &path);
        }
    }
}
