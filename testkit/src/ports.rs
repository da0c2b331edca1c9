//! Ports for the servers a test must tell theirs before they start: Tansu advertises the address it is given, and a
//! cluster node records its URL in the routing catalog, so neither can bind port 0 and say which port it got. A test
//! that can lets its server bind port 0 and reads the address it printed; for the others, [`free_a_moment_ago`]
//! picks a port and [`listens`] tells whether the server got it or another process took it first, in which case the
//! test tries another, [`TRIES`] times at most.
//!
//! ```
//! let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//! let port = listener.local_addr().unwrap().port();
//! assert!(testkit::ports::listens(std::process::id(), port));
//! ```

/// Ports tried for one server at most: each was free when picked, and losing it to another process five times in a
/// row means something holds ports on purpose.
pub const TRIES: u32 = 5;

/// A port on `host` that was free a moment ago: no longer reserved once this returns, so whoever starts a server on
/// it must check with [`listens`] that the server got it.
pub fn free_a_moment_ago(host: &str) -> u16 {
    let listener = std::net::TcpListener::bind((host, 0)).unwrap_or_else(|e| panic!("no free port on {host}: {e}"));
    listener.local_addr().expect("a bound listener's address").port()
}

/// Whether process `pid` holds a listening TCP socket on `port` (Linux's `/proc`). A connection accepted on the port
/// proves less: it could be another process's, which took the port first.
pub fn listens(pid: u32, port: u16) -> bool {
    let sockets: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| table.lines().skip(1).filter_map(|line| listening_socket(line, port)).collect::<Vec<_>>())
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| sockets.iter().any(|socket| target.as_os_str() == socket.as_str()))
}

/// The `socket:[INODE]` link of a line of `/proc/net/tcp` when it is a socket listening on `port`.
fn listening_socket(line: &str, port: u16) -> Option<String> {
    const LISTEN: &str = "0A";
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local_port = u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
    (local_port == port && *fields.get(3)? == LISTEN).then(|| format!("socket:[{}]", fields.get(9).unwrap_or(&"")))
}
