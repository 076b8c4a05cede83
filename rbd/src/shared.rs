//! Cluster connections shared by the images that name the same cluster the same way: one
//! `rados_t` per (cluster name, client, conf file, librados settings) in the process,
//! opened by the first image that needs it, kept alive by the images open on it (each holds
//! an `Arc<Cluster>`), closed with the last of them. A connection is its monitor session,
//! its OSD sessions and librados' threads, so a gateway with hundreds of images pays for
//! them once per cluster instead of once per image.
//!
//! The unit that Ceph fences is the connection (a broken exclusive lock blocklists the
//! client's address), so an image that must be fenced alone opens a connection of its own
//! ([`crate::Cluster::connect`]) instead.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::image::Cluster;
use crate::opts::ClusterOptions;

/// What makes two connections the same: every librados setting as applied (the last value
/// of each key wins, as in librados), so the order of `--bsopts` does not matter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    cluster: String,
    client: String,
    conf: Option<PathBuf>,
    settings: BTreeMap<String, String>,
}

impl Key {
    fn of(opts: &ClusterOptions) -> Key {
        Key {
            cluster: opts.cluster.clone().unwrap_or_else(|| "ceph".into()),
            client: opts.client_name(),
            conf: opts.conf.clone(),
            settings: opts.effective_settings().into_iter().collect(),
        }
    }
}

/// One key's connection: `Weak` so that the images alone keep it open; the mutex makes the
/// second image of a cluster wait for the first one's connect instead of opening another.
type Slot = Arc<Mutex<Weak<Cluster>>>;

static SHARED: Mutex<Vec<(Key, Slot)>> = Mutex::new(Vec::new());

/// Connections open now in this process, shared or not.
static OPEN: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn opened() {
    OPEN.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn closed() {
    OPEN.fetch_sub(1, Ordering::Relaxed);
}

/// Cluster connections this process has open now (shared and private).
pub fn connections() -> usize {
    OPEN.load(Ordering::Relaxed)
}

/// The connection for `opts`: the one open already for the same cluster, client, conf and
/// settings, or a new one (which the next image naming them shares).
pub(crate) fn shared(opts: &ClusterOptions) -> io::Result<Arc<Cluster>> {
    let key = Key::of(opts);
    let slot = {
        let mut all = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        // forget the keys whose connection closed (and that nobody is connecting)
        all.retain(|(_, s)| {
            Arc::strong_count(s) > 1 || s.lock().map(|w| w.strong_count() > 0).unwrap_or(false)
        });
        match all.iter().find(|(k, _)| *k == key) {
            Some((_, s)) => Arc::clone(s),
            None => {
                let s: Slot = Arc::new(Mutex::new(Weak::new()));
                all.push((key, Arc::clone(&s)));
                s
            }
        }
    };
    // only this key's openers wait here (for at most one connect: client_mount_timeout)
    let mut current = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = current.upgrade() {
        return Ok(c);
    }
    let c = Cluster::connect(opts)?;
    *current = Arc::downgrade(&c);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ignore_the_order_of_settings_but_not_their_values() {
        let k = |s: &str| Key::of(&ClusterOptions::parse(s, &["cache"]).expect("bsopts"));
        assert_eq!(
            k("conf=/a.conf;id=gw;rados_osd_op_timeout=5;mon_host=x"),
            k("mon_host=x;cache=off;rados_osd_op_timeout=5;id=gw;conf=/a.conf"),
        );
        assert_ne!(k("id=gw"), k("id=other"));
        assert_ne!(k("conf=/a.conf"), k("conf=/b.conf"));
        assert_ne!(k("rados_osd_op_timeout=5"), k("rados_osd_op_timeout=6"));
        // a setting given as its default is the default
        assert_eq!(k("rados_osd_op_timeout=30"), k(""));
        assert_ne!(k("cluster=other"), k(""));
    }
}
