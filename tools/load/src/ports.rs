//! Ports for the servers the scripts start.

/// A free TCP port on 127.0.0.1 below the kernel's ephemeral range: a process restarted
/// on it later (the soak's replica B, its Redis) cannot find it taken meanwhile as the
/// source port of some connection, as a port the kernel handed out could be.
pub(crate) fn free_port() -> std::io::Result<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (from, to) = (10_000u16, low.saturating_sub(1).max(10_001));
    // No randomness crate here: the clock and the pid spread concurrent callers apart.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let span = u32::from(to - from);
    for attempt in 0..200u32 {
        let offset = (seed.wrapping_add(attempt.wrapping_mul(7_919))) % span;
        let port = from + offset as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    // The whole range busy: any port the kernel picks.
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
