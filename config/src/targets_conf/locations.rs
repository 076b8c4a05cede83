//! Where each value of an imported configuration came from: a map from the
//! YAML field path (`targets[0].luns[1].block_size`) to the targets.conf file,
//! line and directive, so that the shared validation reports
//! `FILE:LINE: directive: problem` for imported files too.

use std::cell::RefCell;
use std::collections::HashMap;

use super::syntax::Loc;
use crate::error::ConfigError;

#[derive(Debug, Default)]
pub(crate) struct Locations {
    map: HashMap<String, (Loc, String)>,
    /// File name used when nothing better is known.
    pub origin: String,
    /// The field path of the last error made by [`Locations::error`].
    last_path: RefCell<Option<String>>,
}

impl Locations {
    pub(crate) fn new(origin: &str) -> Self {
        Locations {
            map: HashMap::new(),
            origin: origin.to_string(),
            last_path: RefCell::new(None),
        }
    }

    /// Records that `path` was written by `directive` at `loc` (the last record wins).
    pub(crate) fn set(&mut self, path: String, loc: &Loc, directive: &str) {
        self.map.insert(path, (loc.clone(), directive.to_string()));
    }

    /// The error for `path`: located at the path, or its nearest recorded parent.
    pub(crate) fn error(&self, path: &str, msg: impl Into<String>) -> ConfigError {
        *self.last_path.borrow_mut() = Some(path.to_string());
        let mut p = path;
        loop {
            if let Some((loc, directive)) = self.map.get(p) {
                return ConfigError::new(&loc.file, Some(loc.line), None, directive, msg);
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return ConfigError::new(&self.origin, None, None, path, msg),
            }
        }
    }

    /// The field path of the last error made, once.
    pub(crate) fn take_last_path(&self) -> Option<String> {
        self.last_path.borrow_mut().take()
    }

    /// Forgets target `i` and renumbers the targets after it.
    pub(crate) fn remove_target(&mut self, i: usize) {
        self.renumber(|t, rest| match t.cmp(&i) {
            std::cmp::Ordering::Less => Some(format!("targets[{t}]{rest}")),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(format!("targets[{}]{rest}", t - 1)),
        });
    }

    /// Forgets LUN `j` of target `i` and renumbers the LUNs after it.
    pub(crate) fn remove_lun(&mut self, i: usize, j: usize) {
        self.renumber(|t, rest| {
            if t != i {
                return Some(format!("targets[{t}]{rest}"));
            }
            let Some((l, tail)) = index_after(rest, ".luns[") else {
                return Some(format!("targets[{t}]{rest}"));
            };
            match l.cmp(&j) {
                std::cmp::Ordering::Less => Some(format!("targets[{t}].luns[{l}]{tail}")),
                std::cmp::Ordering::Equal => None,
                std::cmp::Ordering::Greater => Some(format!("targets[{t}].luns[{}]{tail}", l - 1)),
            }
        });
    }

    fn renumber(&mut self, f: impl Fn(usize, &str) -> Option<String>) {
        let old = std::mem::take(&mut self.map);
        for (k, v) in old {
            match index_after(&k, "targets[") {
                Some((t, rest)) => {
                    if let Some(nk) = f(t, rest) {
                        self.map.insert(nk, v);
                    }
                }
                None => {
                    self.map.insert(k, v);
                }
            }
        }
    }
}

/// For `s` = `PREFIX N]rest`, returns (N, rest).
fn index_after<'a>(s: &'a str, prefix: &str) -> Option<(usize, &'a str)> {
    let r = s.strip_prefix(prefix)?;
    let end = r.find(']')?;
    Some((r[..end].parse().ok()?, &r[end + 1..]))
}

/// The (target, LUN) indexes a validation error path points into.
pub(crate) fn element_of(path: &str) -> Option<(usize, Option<usize>)> {
    let (t, rest) = index_after(path, "targets[")?;
    Some((t, index_after(rest, ".luns[").map(|(l, _)| l)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn nearest_parent_and_renumbering() {
        let loc = |line| Loc {
            file: Rc::from("t.conf"),
            line,
        };
        let mut l = Locations::new("t.conf");
        l.set("targets[0]".into(), &loc(1), "target");
        l.set("targets[1]".into(), &loc(5), "target");
        l.set("targets[1].luns[0]".into(), &loc(6), "backing-store");
        l.set("targets[1].luns[1]".into(), &loc(7), "backing-store");
        let e = l.error("targets[1].luns[1].block_size", "bad");
        assert_eq!(e.to_string(), "t.conf:7: backing-store: bad");
        assert_eq!(
            l.error("accounts[0]", "x").to_string(),
            "t.conf: accounts[0]: x"
        );
        l.remove_lun(1, 0);
        assert_eq!(l.error("targets[1].luns[0]", "m").line(), Some(7));
        l.remove_target(0);
        assert_eq!(l.error("targets[0].luns[0]", "m").line(), Some(7));
        assert_eq!(element_of("targets[3].luns[2].path"), Some((3, Some(2))));
        assert_eq!(element_of("targets[3].iqn"), Some((3, None)));
        assert_eq!(element_of("accounts[0]"), None);
    }
}
