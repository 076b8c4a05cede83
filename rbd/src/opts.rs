//! What an RBD LUN is told: the image (`[pool/]image[@snap]`, tgt's spelling) and the
//! cluster options (tgt's `--bsopts "conf=…;id=…;cluster=…"`, plus any librados setting).
//! Pure parsing, no Ceph calls.

use std::path::PathBuf;

/// The pool an image name without one lives in (as `rbd` and tgt's bs_rbd).
pub const DEFAULT_POOL: &str = "rbd";

/// librados settings numatgt applies before the caller's own: no client-side cache (the
/// target has its own, and a write acknowledged must be in the cluster), and finite
/// timeouts so a sick cluster answers with errors instead of hanging commands.
pub const DEFAULT_SETTINGS: [(&str, &str); 4] = [
    ("rbd_cache", "false"),
    ("rados_osd_op_timeout", "30"),
    ("rados_mon_op_timeout", "30"),
    ("client_mount_timeout", "10"),
];

/// One image (or snapshot) of one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    pub pool: String,
    pub image: String,
    /// A snapshot: opened read-only.
    pub snap: Option<String>,
}

impl ImageSpec {
    /// Parses `[pool/]image[@snap]`.
    pub fn parse(text: &str) -> Result<ImageSpec, String> {
        let t = text.trim();
        let (rest, snap) = match t.split_once('@') {
            Some((r, s)) => (r, Some(s)),
            None => (t, None),
        };
        let (pool, image) = match rest.split_once('/') {
            Some((p, i)) => (p, i),
            None => (DEFAULT_POOL, rest),
        };
        let bad = |m: &str| format!("rbd image {text:?}: {m} (expected [pool/]image[@snap])");
        if pool.is_empty() {
            return Err(bad("empty pool name"));
        }
        if image.is_empty() || image.contains('/') {
            return Err(bad("bad image name"));
        }
        if snap.is_some_and(|s| s.is_empty() || s.contains('@')) {
            return Err(bad("bad snapshot name"));
        }
        Ok(ImageSpec {
            pool: pool.to_string(),
            image: image.to_string(),
            snap: snap.map(str::to_string),
        })
    }
}

impl std::fmt::Display for ImageSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.pool, self.image)?;
        if let Some(s) = &self.snap {
            write!(f, "@{s}")?;
        }
        Ok(())
    }
}

/// How to reach a cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterOptions {
    /// `conf=`: a ceph.conf; `None` = librados's default search.
    pub conf: Option<PathBuf>,
    /// `id=`: the client id without `client.` (default `admin`).
    pub id: Option<String>,
    /// `cluster=`: the cluster name (default `ceph`).
    pub cluster: Option<String>,
    /// Every other `key=value`: librados settings (`rados_osd_op_timeout=5`,
    /// `mon_host=…`, `keyring=…`), applied after [`DEFAULT_SETTINGS`], so they win.
    pub settings: Vec<(String, String)>,
}

impl ClusterOptions {
    /// Parses tgt's `--bsopts` text: `key=value` pairs separated by `;`. Keys in `skip`
    /// belong to the caller (numatgt's `cache=`) and are left out.
    pub fn parse(text: &str, skip: &[&str]) -> Result<ClusterOptions, String> {
        let mut o = ClusterOptions::default();
        for pair in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(format!("bsopts {pair:?}: expected key=value"));
            };
            let (k, v) = (k.trim(), v.trim());
            if skip.iter().any(|s| s.eq_ignore_ascii_case(k)) {
                continue;
            }
            let value = || {
                if v.is_empty() {
                    Err(format!("bsopts {k}: empty value"))
                } else {
                    Ok(v.to_string())
                }
            };
            match k {
                "conf" => o.conf = Some(PathBuf::from(value()?)),
                "id" => o.id = Some(value()?),
                "cluster" => o.cluster = Some(value()?),
                _ if !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
                {
                    o.settings.push((k.to_string(), v.to_string()));
                }
                _ => return Err(format!("bsopts {k:?}: not an option name")),
            }
        }
        Ok(o)
    }

    /// `client.<id>`, the name librados logs in with.
    pub fn client_name(&self) -> String {
        format!("client.{}", self.id.as_deref().unwrap_or("admin"))
    }

    /// Every librados setting in the order applied: the defaults, then the caller's.
    pub fn effective_settings(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = DEFAULT_SETTINGS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        out.extend(self.settings.iter().cloned());
        out
    }
}

/// `bsopts` fit to show: the value of a secret (`key=`, or a key naming a secret) replaced.
pub fn redact(bsopts: &str) -> String {
    bsopts
        .split(';')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_secret(k.trim()) => format!("{k}=(hidden)"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k == "key" || k.contains("secret") || k.contains("password")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_specs() {
        let s = ImageSpec::parse("img").expect("plain");
        assert_eq!(
            (s.pool.as_str(), s.image.as_str(), s.snap),
            ("rbd", "img", None)
        );
        let s = ImageSpec::parse("tank/disk1@before").expect("full");
        assert_eq!(s.pool, "tank");
        assert_eq!(s.image, "disk1");
        assert_eq!(s.snap.as_deref(), Some("before"));
        assert_eq!(s.to_string(), "tank/disk1@before");
        for bad in ["", "/img", "pool/", "pool/a/b", "img@", "a@b@c"] {
            assert!(ImageSpec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn bsopts_in_tgt_spelling_and_librados_settings() {
        let o = ClusterOptions::parse(
            "conf=/etc/ceph/ceph.conf;id=iscsi; cluster=ceph ;cache=off;rados_osd_op_timeout=5",
            &["cache"],
        )
        .expect("parse");
        assert_eq!(
            o.conf.as_deref(),
            Some(std::path::Path::new("/etc/ceph/ceph.conf"))
        );
        assert_eq!(o.client_name(), "client.iscsi");
        assert_eq!(o.cluster.as_deref(), Some("ceph"));
        assert_eq!(
            o.settings,
            vec![("rados_osd_op_timeout".to_string(), "5".to_string())]
        );
        let eff = o.effective_settings();
        assert_eq!(eff.first().map(|p| p.0.as_str()), Some("rbd_cache"));
        assert_eq!(
            eff.last().map(|p| p.1.as_str()),
            Some("5"),
            "the caller's setting wins"
        );
        assert_eq!(ClusterOptions::default().client_name(), "client.admin");
        assert!(ClusterOptions::parse("conf", &[]).is_err());
        assert!(ClusterOptions::parse("id=", &[]).is_err());
        assert!(ClusterOptions::parse("Bad-Key=1", &[]).is_err());
        assert!(ClusterOptions::parse("cache=off", &[]).is_ok_and(|o| o.settings.len() == 1));
    }

    #[test]
    fn secrets_are_hidden() {
        assert_eq!(
            redact("conf=/c;key=AQBsecret==;id=admin;client_secret=x"),
            "conf=/c;key=(hidden);id=admin;client_secret=(hidden)"
        );
        assert_eq!(redact(""), "");
    }
}
