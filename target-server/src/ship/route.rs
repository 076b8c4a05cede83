//! Which link a non-owner gateway ships a LUN's media commands over, and how gateways find
//! each other: each gateway that serves an RBD LUN of several gateways publishes where its
//! link server listens and its token as an extended attribute of the LUN's ownership record
//! (`numatgt.ship.<group>` = `ADDRESS TOKEN`; reading it takes the Ceph credentials that
//! reading the image takes). The LUN's ownership thread keeps the route to the current
//! owner ([`refresh`]); the event threads ask [`way`] per command.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::link::Link;
use super::stats::{self, ShipStats};
use super::wire::{self, TOKEN_LEN};

/// This gateway's link server.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    pub addr: SocketAddr,
    pub token: [u8; TOKEN_LEN],
}

/// Starts the link server (once; later calls return it): `ceph_ip` is the address this
/// gateway's Ceph client has, the one to listen on when no portal names a better one.
pub type Starter = fn(ceph_ip: Option<IpAddr>) -> std::io::Result<Local>;

static SERVER: OnceLock<Starter> = OnceLock::new();

/// The runtime names the function that starts the link server.
pub fn set_server(f: Starter) {
    let _ = SERVER.set(f);
}

/// Whether the link server can be started (the daemon serves: LUNs opened at start are
/// published once it does).
pub fn can_publish() -> bool {
    SERVER.get().is_some()
}

/// The extended attribute of the ownership record in which group `group` publishes its
/// link server.
pub fn xattr_key(group: u16) -> String {
    format!("numatgt.ship.{group}")
}

/// After this many failed lookups or connections in a row (one a second) a route gives up
/// and I/O here takes the LUN over (the takeover of before); it is still tried, and
/// serves again once it is made.
const TRIES: u32 = 2;
/// How often a failed route is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// How long commands are answered "transitioning" while a route is being made, before the
/// LUN moves here instead.
const WAIT_MAX: Duration = Duration::from_secs(3);

#[derive(Debug)]
struct Route {
    /// The LUN's shipped-I/O counters (`stats::of` its record, looked up once).
    stats: Arc<ShipStats>,
    /// The owner the route leads to.
    group: u16,
    link: Option<Arc<Link>>,
    /// Failed lookups or connections since the owner changed or the link was last up.
    tries: u32,
    last_try: Option<Instant>,
    /// Since when commands wait for this route.
    waiting_since: Option<Instant>,
}

fn lock<T>(m: &'static OnceLock<Mutex<T>>) -> MutexGuard<'static, T>
where
    T: Default,
{
    m.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

impl Route {
    fn new(record: &str) -> Route {
        Route {
            stats: stats::of(record),
            group: 0,
            link: None,
            tries: 0,
            last_try: None,
            waiting_since: None,
        }
    }

    /// Leads to `group` from now on: everything learnt of the old owner forgotten.
    fn lead_to(&mut self, group: u16) {
        self.group = group;
        self.link = None;
        self.tries = 0;
        self.last_try = None;
        self.waiting_since = None;
    }
}

/// The route of `record`, made on first use.
fn route_of<'a>(routes: &'a mut HashMap<String, Route>, record: &str) -> &'a mut Route {
    if !routes.contains_key(record) {
        routes.insert(record.to_owned(), Route::new(record));
    }
    routes
        .get_mut(record)
        .unwrap_or_else(|| unreachable!("inserted above"))
}

static ROUTES: OnceLock<Mutex<HashMap<String, Route>>> = OnceLock::new();
static LINKS: OnceLock<Mutex<HashMap<SocketAddr, Arc<Link>>>> = OnceLock::new();

/// How a media command of a LUN another gateway owns goes.
pub enum Way {
    /// Over this link to the owner; counted in these counters.
    Ship(Arc<Link>, Arc<ShipStats>),
    /// A route is being made: answer "transitioning" (the initiator retries).
    Wait,
    /// No route: the LUN moves here (takeover).
    Move,
}

/// How a media command of the LUN whose ownership record is `record`, owned by group
/// `owner` (0: not known), goes now.
pub fn way(record: &str, owner: u16) -> Way {
    if owner == 0 {
        return Way::Move;
    }
    let mut routes = lock(&ROUTES);
    let r = route_of(&mut routes, record);
    if r.group == owner
        && let Some(l) = r.link.as_ref().filter(|l| !l.is_dead())
    {
        r.waiting_since = None;
        return Way::Ship(Arc::clone(l), Arc::clone(&r.stats));
    }
    if r.group == owner && r.tries >= TRIES {
        return Way::Move;
    }
    let since = *r.waiting_since.get_or_insert_with(Instant::now);
    if since.elapsed() > WAIT_MAX {
        Way::Move
    } else {
        Way::Wait
    }
}

/// Publishes this gateway's link server for group `group` beside the LUN whose ownership
/// record is `record` (starting the server first). Whether it is published.
pub fn publish(image: &rbd::Image, record: &str, group: u16) -> bool {
    let Some(start) = SERVER.get() else {
        return false;
    };
    let ceph_ip = image.client_addr().ok().and_then(|a| ip_of(&a));
    let local = match start(ceph_ip) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(%record, "no gateway link server: {e}; other gateways move the LUN instead of shipping to it");
            return false;
        }
    };
    let value = format!("{} {}", local.addr, wire::token_hex(&local.token));
    match image.object_set_xattr(record, &xattr_key(group), value.as_bytes()) {
        Ok(()) => {
            tracing::info!(%record, addr = %local.addr, "gateway link published");
            true
        }
        Err(e) => {
            tracing::warn!(%record, "publishing the gateway link: {e}");
            false
        }
    }
}

/// The IP of a Ceph client address (`IP:port/nonce`, IPv6 in brackets).
fn ip_of(addr: &str) -> Option<IpAddr> {
    let hostport = addr.split('/').next()?;
    hostport.parse::<SocketAddr>().ok().map(|a| a.ip())
}

/// Keeps the route of the LUN whose ownership record is `record` leading to the owner,
/// group `owner`: reads the owner's published link server and connects (reusing a link to
/// the same server). Called by the LUN's ownership thread while this gateway does not own
/// the LUN; blocking (Ceph reads, a connect) is fine there.
pub fn refresh(image: &rbd::Image, record: &str, owner: u16) {
    if owner == 0 {
        return;
    }
    {
        let mut routes = lock(&ROUTES);
        let r = route_of(&mut routes, record);
        if r.group != owner {
            r.lead_to(owner);
        }
        let alive = r.link.as_ref().is_some_and(|l| !l.is_dead());
        if alive || r.last_try.is_some_and(|t| t.elapsed() < RETRY) {
            return;
        }
        r.last_try = Some(Instant::now());
    }
    let found = image
        .object_xattr(record, &xattr_key(owner))
        .map_err(|e| format!("reading the owner's link: {e}"))
        .and_then(|v| v.ok_or_else(String::new))
        .and_then(|v| parse_published(&v).ok_or_else(|| "unreadable published link".to_owned()))
        .and_then(|(addr, token)| {
            link_to(addr, token).map_err(|e| format!("connecting to the owner at {addr}: {e}"))
        });
    let mut routes = lock(&ROUTES);
    let r = route_of(&mut routes, record);
    if r.group != owner {
        return; // the owner changed meanwhile
    }
    match found {
        Ok(link) => {
            r.link = Some(link);
            r.tries = 0;
        }
        Err(why) => {
            r.tries += 1;
            r.link = None;
            let why = if why.is_empty() {
                "the owner publishes none (yet): an older numatgtd, or its link server failed"
            } else {
                &why
            };
            if r.tries == TRIES {
                tracing::warn!(%record, owner, "no gateway link ({why}): I/O here takes the LUN over");
            } else {
                tracing::info!(%record, owner, tries = r.tries, "gateway link: {why}");
            }
        }
    }
}

/// `ADDRESS TOKEN` as published.
fn parse_published(v: &[u8]) -> Option<(SocketAddr, [u8; TOKEN_LEN])> {
    let s = std::str::from_utf8(v).ok()?;
    let (addr, token) = s.trim().split_once(' ')?;
    Some((addr.parse().ok()?, wire::parse_token(token)?))
}

/// A live link to `addr` made with `token`, reused or new.
fn link_to(addr: SocketAddr, token: [u8; TOKEN_LEN]) -> std::io::Result<Arc<Link>> {
    if let Some(l) = lock(&LINKS).get(&addr)
        && !l.is_dead()
        && wire::same_token(l.token(), &token)
    {
        return Ok(Arc::clone(l));
    }
    let l = Link::connect(addr, token)?;
    let mut links = lock(&LINKS);
    links.retain(|_, l| !l.is_dead());
    links.insert(addr, Arc::clone(&l));
    Ok(l)
}

/// Forgets the route of a LUN that goes away.
pub fn forget(record: &str) {
    lock(&ROUTES).remove(record);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_links_and_client_addresses_parse() {
        let t = [5; TOKEN_LEN];
        let v = format!("127.0.0.1:4000 {}", wire::token_hex(&t));
        assert_eq!(
            parse_published(v.as_bytes()),
            Some(("127.0.0.1:4000".parse().unwrap(), t))
        );
        assert_eq!(parse_published(b"127.0.0.1:4000"), None);
        assert_eq!(parse_published(b"nonsense zz"), None);
        assert_eq!(
            ip_of("127.0.0.1:0/12345"),
            Some("127.0.0.1".parse().unwrap())
        );
        assert_eq!(ip_of("[::1]:6800/7"), Some("::1".parse().unwrap()));
        assert_eq!(ip_of("garbage"), None);
    }

    #[test]
    fn an_unknown_owner_moves_and_a_new_route_waits_then_moves() {
        assert!(matches!(way("rec-test-a", 0), Way::Move));
        assert!(matches!(way("rec-test-b", 2), Way::Wait));
        lock(&ROUTES).get_mut("rec-test-b").unwrap().waiting_since =
            Some(Instant::now() - WAIT_MAX - Duration::from_secs(1));
        assert!(matches!(way("rec-test-b", 2), Way::Move));
        let mut routes = lock(&ROUTES);
        let r = route_of(&mut routes, "rec-test-c");
        r.group = 3;
        r.tries = TRIES;
        drop(routes);
        assert!(matches!(way("rec-test-c", 3), Way::Move));
    }
}
