//! Network namespaces that make separate hosts on one machine
//! (scripts/netns.sh; needs root and iproute2).

/// Network namespaces for one test (scripts/netns.sh), removed on drop.
/// Tests that use them run one at a time (they share the namespace names
/// of this process, and the harness runs tests in parallel).
pub struct Hosts {
    name: String,
    /// (host, address, link)
    hosts: Vec<(String, String, String)>,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static NAMESPACES: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Hosts {
    pub fn up(name: &str, hosts: &[&str]) -> Hosts {
        let one_at_a_time = NAMESPACES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/netns.sh");
        let _ = std::process::Command::new(script)
            .arg("down")
            .arg(name)
            .args(hosts)
            .status();
        let out = std::process::Command::new(script)
            .arg("up")
            .arg(name)
            .args(hosts)
            .output()
            .expect("scripts/netns.sh (needs root and iproute2)");
        assert!(
            out.status.success(),
            "netns up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hosts = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[0].to_string(), f[1].to_string(), f[2].to_string())
            })
            .collect();
        Hosts {
            name: name.to_string(),
            hosts,
            _one_at_a_time: one_at_a_time,
        }
    }

    pub fn get(&self, host: &str) -> &(String, String, String) {
        self.hosts.iter().find(|h| h.0 == host).expect("host")
    }

    pub fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.name)
    }

    pub fn ip(&self, host: &str) -> String {
        self.get(host).1.clone()
    }

    /// Pulls (false) or plugs (true) the host's cable.
    pub fn link(&self, host: &str, up: bool) {
        let status = std::process::Command::new("ip")
            .args(["link", "set", &self.get(host).2, if up { "up" } else { "down" }])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Drops (true) or passes again (false) every packet between hosts
    /// `a` and `b`: a blackhole route on each side, so no reset comes from
    /// the peer; the link breaks on the local route error TCP meets when
    /// it sends, or on the keepalive, whichever comes first.
    pub fn partition(&self, a: &str, b: &str, cut: bool) {
        for (from, to) in [(a, b), (b, a)] {
            let status = std::process::Command::new("ip")
                .args(["-n", &self.ns(from), "route", if cut { "add" } else { "del" }])
                .args(["blackhole", &format!("{}/32", self.ip(to))])
                .status()
                .unwrap();
            assert!(status.success(), "blackhole {from} -> {to}");
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/netns.sh");
        let hosts: Vec<&str> = self.hosts.iter().map(|h| h.0.as_str()).collect();
        let _ = std::process::Command::new(script)
            .arg("down")
            .arg(&self.name)
            .args(hosts)
            .status();
    }
}
