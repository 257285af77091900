//! This process's resource use, for heartbeats and `/metrics`: resident
//! memory and CPU time, read from `/proc/self` (Linux; zeros elsewhere).

use sluice_proto::v1 as pb;

/// Resident set size in bytes and CPU time (user + system) in ns.
pub fn usage() -> (u64, u64) {
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map_or(0, |pages| pages * page_size());
    // Fields 14 and 15 of /proc/self/stat (utime, stime) in clock ticks,
    // counted after the command name's closing parenthesis.
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .map_or(0, |ticks| ticks * (1_000_000_000 / clock_ticks()));
    (rss, cpu)
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

fn clock_ticks() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// The process part of a heartbeat, with its data plane's counters.
pub fn metrics(data: &sluice_net::DataPlaneMetrics) -> pb::ProcessMetrics {
    let (rss_bytes, cpu_ns) = usage();
    pb::ProcessMetrics {
        rss_bytes,
        cpu_ns,
        data_bytes_sent: data.bytes_sent,
        data_bytes_received: data.bytes_received,
        credit_waits_ns: data.credit_wait_ns,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_running_process_has_memory_and_cpu_time() {
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let (rss, cpu) = super::usage();
        assert!(rss > 1 << 20, "rss {rss}");
        assert!(cpu > 0, "cpu {cpu}");
    }
}
