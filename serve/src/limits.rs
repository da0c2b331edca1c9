//! The open-file limit, raised at start, and the bound of connections sized to it: every connection takes a file
//! descriptor, and a server out of them can accept nobody (not even `/healthz`) until a client leaves.

use crate::ServeError;

/// Largest request body accepted: a check is about 200 bytes.
pub const BODY_LIMIT_BYTES: usize = 16 * 1024;
/// Largest body of `POST /v1/events`: room for [`crate::EVENTS_PER_REQUEST_MAX`] events of 1.3 KB each, where one
/// with a few attributes is about 300 bytes. Only that route's bodies may be this large, so the bound of memory the
/// connections hold ([`CONNECTIONS_MAX_DEFAULT`]) counts on [`BODY_LIMIT_BYTES`] for all the others.
pub const EVENTS_BODY_LIMIT_BYTES: usize = 128 * 1024;

/// Most descriptors kept for everything but connections: the ledger's files (database, write-ahead log, shared
/// memory, lock) for the writer, the publisher and the reads at start, librdkafka's socket to each broker and its
/// wake-up pipes, the runtime's and the signal handlers'. 19 without brokers (counted in /proc), about 40 with a
/// three-broker cluster; the rest is room for a large cluster.
pub const FILES_RESERVED: u64 = 256;
/// Fewest descriptors kept so: a quarter of the open-file limit is kept between the two, so that a small limit (256)
/// still leaves most of it to connections.
pub const FILES_RESERVED_MIN: u64 = 64;
/// Largest default bound of connections, whatever the open-file limit (often a million in containers): an idle
/// kept-alive connection holds hyper's buffers and a task, 16 KB (23 KB over TLS: measured as serve's resident memory
/// over 2,000 of them), and one reading a body up to 16 KB more, so 10,000 stay within about 400 MB; a hook deciding
/// a few thousand requests a second per core is not helped by more connections waiting on it. Beyond, connections
/// wait in the backlog; `--connections-max` raises it.
pub const CONNECTIONS_MAX_DEFAULT: usize = 10_000;

/// Raises the soft limit of open files to the hard limit (the soft one is often 1,024, far below what a server of
/// many connections needs, while the hard one is what the administrator allows) and answers the soft limit then.
/// A failure leaves the limit as it was, said on stderr.
pub(crate) fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives on this stack frame.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "serve: cannot read the open-file limit");
        return FILES_RESERVED * 4;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads the struct it is given, which lives on this stack frame.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        } else {
            tracing::warn!(
                from = limit.rlim_cur,
                to = limit.rlim_max,
                error = %std::io::Error::last_os_error(),
                "serve: cannot raise the open-file limit"
            );
        }
    }
    limit.rlim_cur
}

/// Descriptors kept for everything but connections under an open-file limit of `files_limit`: a quarter of it,
/// between [`FILES_RESERVED_MIN`] and [`FILES_RESERVED`].
pub(crate) fn files_reserved(files_limit: u64) -> u64 {
    (files_limit / 4).clamp(FILES_RESERVED_MIN, FILES_RESERVED)
}

/// The bound of connections: the one asked for, refused if the open-file limit cannot hold it besides
/// [`files_reserved`]; else the room the limit leaves, at most [`CONNECTIONS_MAX_DEFAULT`], at least 1.
pub(crate) fn connections_max(asked: Option<usize>, files_limit: u64) -> Result<usize, ServeError> {
    let reserved = files_reserved(files_limit);
    match asked {
        Some(asked) => {
            let needed = (asked as u64).saturating_add(reserved);
            if asked == 0 || needed > files_limit {
                return Err(ServeError::TooManyConnections { asked, needed, reserved, limit: files_limit });
            }
            Ok(asked)
        }
        None => {
            let room = usize::try_from(files_limit.saturating_sub(reserved)).unwrap_or(usize::MAX);
            Ok(room.clamp(1, CONNECTIONS_MAX_DEFAULT))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves that the default bound follows the open-file limit less what the rest of the server needs (a quarter of
    // it, within [64, 256]), within [1, CONNECTIONS_MAX_DEFAULT], and that a bound the limit cannot hold is refused
    // naming both.
    #[test]
    fn the_bound_of_connections_fits_the_open_file_limit() {
        assert_eq!(connections_max(None, 1_024).unwrap(), 1_024 - 256);
        assert_eq!(connections_max(None, 4_096).unwrap(), 4_096 - 256);
        assert_eq!(connections_max(None, 256).unwrap(), 256 - 64, "a small limit keeps most of it for connections");
        assert_eq!(connections_max(None, 1_048_576).unwrap(), CONNECTIONS_MAX_DEFAULT);
        assert_eq!(connections_max(None, 40).unwrap(), 1);
        assert_eq!(connections_max(Some(500), 1_024).unwrap(), 500);
        let refused = connections_max(Some(1_000), 1_024).unwrap_err().to_string();
        assert!(
            refused.contains("--connections-max 1000 needs 1256") && refused.contains("limit is 1024"),
            "{refused}"
        );
        assert!(connections_max(Some(0), 1_024).is_err());
    }
}
