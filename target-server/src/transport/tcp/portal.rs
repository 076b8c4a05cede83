//! Opening a listening TCP socket for a portal: SO_REUSEADDR (as std and tgtd do), and
//! IPV6_V6ONLY on IPv6 sockets so that `[::]:3260` and `0.0.0.0:3260` can both be bound,
//! which is what tgtd listens on when it is given no portal.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, IntoRawFd};

use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage, bind, listen, setsockopt, socket,
    sockopt,
};

/// The listen backlog of every portal.
const BACKLOG: i32 = 1024;

/// A non-blocking listener on `addr`.
pub fn bind_portal(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if addr.is_ipv6() {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(addr),
    )?;
    listen(&fd, Backlog::new(BACKLOG).unwrap_or(Backlog::MAXCONN))?;
    // SAFETY: `into_raw_fd` hands over sole ownership of a valid, listening stream socket.
    Ok(unsafe { TcpListener::from_raw_fd(fd.into_raw_fd()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_and_v6_wildcards_coexist() {
        let v4 = bind_portal("127.0.0.1:0".parse().expect("addr")).expect("v4");
        let port = v4.local_addr().expect("local").port();
        // the same port on ::1 must not clash with the IPv4 socket
        if let Ok(v6) = bind_portal(SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], port))) {
            assert_eq!(v6.local_addr().expect("local").port(), port);
        }
        // a second IPv4 listener on the same port is refused
        assert!(bind_portal(SocketAddr::from(([127, 0, 0, 1], port))).is_err());
    }
}
