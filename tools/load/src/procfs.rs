//! The server's CPU time and resident memory, read from `/proc/<pid>`.

use crate::Result;

/// Microseconds per `/proc/<pid>/stat` clock tick. The kernel reports these times in
/// USER_HZ, which is 100 on every Linux architecture's user ABI, so this needs no libc.
pub(crate) const TICK_US: f64 = 10_000.0;

/// User plus system CPU time of the whole process (all threads, including exited ones),
/// in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses; fields after the last
    // ')' are plain. utime and stime are fields 14 and 15, i.e. 11 and 12 after it.
    let (_, after) = stat
        .rsplit_once(')')
        .ok_or("unexpected /proc/<pid>/stat format")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| -> Result<u64> {
        Ok(fields
            .get(i)
            .ok_or("short /proc/<pid>/stat")?
            .parse::<u64>()?)
    };
    Ok(field(11)? + field(12)?)
}

/// Resident set size (`VmRSS`) in KiB.
pub(crate) fn rss_kb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .ok_or("no VmRSS in /proc/<pid>/status")?;
    let kb = line.trim().trim_end_matches("kB").trim();
    Ok(kb.parse()?)
}
