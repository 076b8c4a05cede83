//! systemd's readiness protocol (sd_notify(3)) without libsystemd: when `NOTIFY_SOCKET` is
//! set, state lines (`READY=1`, `RELOADING=1`, `STOPPING=1`, `STATUS=…`) are sent as one
//! datagram to that AF_UNIX socket (a path, or an abstract name written `@name`). Without
//! the variable every call does nothing, so numatgtd runs the same outside systemd.

use std::os::unix::net::UnixDatagram;

/// Send `state` (newline-separated `KEY=value` lines) to the service manager, if any.
/// Failures are logged, never fatal: the daemon serves whether or not systemd listens.
pub fn notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&target, state) {
        tracing::warn!(socket = ?target, "sd_notify `{}` failed: {e}", state.replace('\n', " "));
    }
}

fn send(target: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let sock = UnixDatagram::unbound()?;
    let bytes = target.as_bytes();
    match bytes.first() {
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(&bytes[1..])?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        }
        Some(b'/') => {
            sock.send_to(state.as_bytes(), std::path::Path::new(target))?;
        }
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "NOTIFY_SOCKET is neither an absolute path nor an @abstract name",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let rx = UnixDatagram::bind(&path).expect("bind");
        send(path.as_os_str(), "READY=1\nSTATUS=serving").expect("send");
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("numatgt-test-{}", std::process::id());
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract");
        let rx = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        send(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").expect("send");
        let n = rx.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"STOPPING=1");

        assert!(send(std::ffi::OsStr::new("relative"), "X=1").is_err());
    }
}
