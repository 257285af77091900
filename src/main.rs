//! The `sluice` binary.

mod security_args;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// mimalloc instead of glibc's malloc: Arrow batches are allocated and freed
/// on every hop, often from different threads; glibc spent ~15 % of a paced
/// Nexmark q0 run in malloc/free/consolidation (perf), mimalloc's per-thread
/// free lists and page reuse avoid most of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long mimalloc waits, after memory is first freed, before it purges
/// the free memory of an arena, unless `MIMALLOC_PURGE_DELAY` says
/// otherwise. Its default (1 s) returned the rows a window or join frees at
/// each firing to the OS, and the next seconds of input faulted them back.
/// At most one purge per arena every 30 s now; each still purges
/// everything free at that moment (mimalloc v3 keeps one deadline per
/// arena), so how a purge returns memory matters too, see
/// [`PURGE_DECOMMITS`].
const PURGE_DELAY_MS: std::ffi::c_long = 30_000;
/// Whether a purge decommits (`MADV_DONTNEED`: the pages go back to the
/// OS at once and the next use faults them in, zeroed) or resets
/// (`MADV_FREE`: the kernel takes them back only when it runs short of
/// memory; until then reusing them costs nothing). Reset, unless
/// `MIMALLOC_PURGE_DECOMMITS` says otherwise: with decommit, a paced
/// Nexmark q7 (a join holding 10 s of bids, freeing and storing ~300 MB/s)
/// took 30–120 k page faults a second with a third of both CPUs in the
/// kernel, and windows came out up to seconds late on this project's VM;
/// with reset, 5–6 k a second (what the 100-ms sampling of `/proc/vmstat`
/// causes on its own), 3 % of the CPUs in the kernel, every measured
/// window under 8 ms. The memory still goes back when the machine needs it; it
/// only stays counted in the RSS until then.
const PURGE_DECOMMITS: std::ffi::c_long = 0;
/// `mi_option_purge_decommits` and `mi_option_purge_delay` in mimalloc
/// v3's `mimalloc.h` (the Rust bindings name no constants for them);
/// `the_option_indices_are_the_ones_mimalloc_reads` checks them against
/// the library.
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Streaming SQL and dataflow server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a master, a worker, the pgwire server and the HTTP server in one process.
    Playground {
        /// Where the catalog is kept.
        #[arg(long, default_value = "./sluice-data")]
        data_dir: PathBuf,
        /// Postgres wire protocol address.
        #[arg(long, default_value = "127.0.0.1:5433")]
        pg_listen: SocketAddr,
        /// HTTP (REST API, health) address.
        #[arg(long, default_value = "127.0.0.1:8090")]
        http_listen: SocketAddr,
        #[command(flatten)]
        security: security_args::SecurityArgs,
    },
    /// Run a cluster master: catalog, planning, pgwire and HTTP; places
    /// pipelines' tasks on the workers that register with it.
    Master {
        /// This master's id.
        #[arg(long, default_value = "m1")]
        id: String,
        /// Control-plane address workers connect to.
        #[arg(long, default_value = "127.0.0.1:7070")]
        listen: SocketAddr,
        /// The masters of the quorum (`m2=HOST:PORT,m3=HOST:PORT`: their
        /// --id and --listen; this master's own entry, if listed, is
        /// skipped, so all can get the same list); a single master needs
        /// none. Three or five masters decide by majority: the catalog is
        /// replicated, the leader runs the pipelines, DDL through any
        /// master.
        #[arg(long, value_delimiter = ',')]
        peers: Vec<String>,
        /// Data-plane address of the master's own worker (tasks whose
        /// state lives in the master: session results, memory streams).
        /// Port 0: any free port.
        #[arg(long)]
        data_listen: Option<SocketAddr>,
        /// The data-plane address workers dial for the master's own worker,
        /// when it differs from --data-listen (e.g. a pod's IP or DNS name).
        #[arg(long)]
        advertise: Option<String>,
        /// Postgres wire protocol address.
        #[arg(long, default_value = "127.0.0.1:5433")]
        pg_listen: SocketAddr,
        /// HTTP (REST API, health, dashboard) address.
        #[arg(long, default_value = "127.0.0.1:8090")]
        http_listen: SocketAddr,
        /// Where the catalog is kept.
        #[arg(long, default_value = "./sluice-master")]
        data_dir: PathBuf,
        /// Where every worker writes task snapshots: a directory all
        /// workers reach (one machine or a shared mount) or
        /// `hdfs://HOST:PORT/DIR`. Default: DATA_DIR/checkpoints.
        #[arg(long)]
        checkpoint_dir: Option<String>,
        /// A worker silent this long is dead: its tasks move (e.g. `5s`).
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        worker_timeout: std::time::Duration,
        /// How tasks are placed: `spread` (an operator's instances over as
        /// many workers as possible) or `pack` (fill a worker first).
        #[arg(long, default_value = "spread")]
        placement: String,
        #[command(flatten)]
        security: security_args::SecurityArgs,
    },
    /// Run a worker: registers with a master and runs the tasks it places here.
    Worker {
        /// This worker's id (unique in the cluster).
        #[arg(long)]
        id: String,
        /// Masters' control addresses (`HOST:PORT[,HOST:PORT…]`).
        #[arg(long, value_delimiter = ',', required = true)]
        masters: Vec<String>,
        /// Data-plane address other workers send rows to.
        #[arg(long, default_value = "127.0.0.1:7171")]
        listen: SocketAddr,
        /// The address other workers dial, when it differs from --listen
        /// (e.g. a pod's DNS name).
        #[arg(long)]
        advertise: Option<String>,
        /// Task slots: how many task instances this worker runs.
        #[arg(long, default_value_t = 4)]
        slots: u32,
        /// Labels placement constraints match (`zone=a,disk=ssd`).
        #[arg(long, value_delimiter = ',')]
        labels: Vec<String>,
        /// Where the worker keeps local data.
        #[arg(long, default_value = "./sluice-worker")]
        data_dir: PathBuf,
    },
}

/// `5s`, `500ms`, `1m`.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    sluice_types::parse_duration_ms(text)
        .map(|ms| std::time::Duration::from_millis(ms.max(1)))
        .ok_or_else(|| format!("'{text}' is not a duration like 5s, 500ms or 1m"))
}

/// `k=v` labels.
fn parse_labels(labels: &[String]) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    labels
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
            None => Err(anyhow::anyhow!("label '{l}' is not key=value")),
        })
        .collect()
}

/// `--peers m2=HOST:PORT,m3=HOST:PORT` → id → address. A quorum has three or
/// five masters: with two, losing either stops every decision, and an even
/// count tolerates no more failures than the odd count below it.
fn parse_peers(me: &str, peers: &[String]) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for p in peers.iter().filter(|p| !p.is_empty()) {
        let Some((id, address)) = p.split_once('=') else {
            anyhow::bail!("--peers: '{p}' is not ID=HOST:PORT (the peer's --id and --listen)");
        };
        let (id, address) = (id.trim(), address.trim());
        // This master's own entry is skipped: every master of a quorum
        // can be given the same list (one argument for a whole StatefulSet).
        if id == me {
            continue;
        }
        if out.insert(id.to_string(), address.to_string()).is_some() {
            anyhow::bail!("--peers: '{id}' is listed twice");
        }
    }
    if !out.is_empty() && out.len() % 2 != 0 {
        anyhow::bail!(
            "--peers: {} masters in all; a quorum needs an odd number (3 or 5): with an even number, as many failures stop it as with one master fewer",
            out.len() + 1
        );
    }
    Ok(out)
}

/// Resolves on SIGTERM or Ctrl-C.
async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Sets mimalloc's purge delay and purge kind ([`PURGE_DELAY_MS`],
/// [`PURGE_DECOMMITS`]) where the environment chose none. The crate's only
/// `unsafe`: mimalloc's options have no safe Rust API.
#[expect(unsafe_code, reason = "mi_option_set is mimalloc's C API; there is no safe wrapper")]
fn keep_freed_memory() {
    for (option, env, value) in [
        (MI_OPTION_PURGE_DELAY, "MIMALLOC_PURGE_DELAY", PURGE_DELAY_MS),
        (MI_OPTION_PURGE_DECOMMITS, "MIMALLOC_PURGE_DECOMMITS", PURGE_DECOMMITS),
    ] {
        if std::env::var_os(env).is_none() {
            // SAFETY: stores one option value (read on each purge); the
            // index is valid (checked by
            // `the_option_indices_are_the_ones_mimalloc_reads`).
            unsafe { libmimalloc_sys::mi_option_set(option, value) };
        }
    }
}

/// Turns transparent huge pages off for this process unless
/// `MIMALLOC_ALLOW_THP` says otherwise (mimalloc asks for them on its
/// arenas; this wins over that). Why: a huge page is zeroed whole when first
/// touched, and on the 2-vCPU VM of the README's Performance section a
/// huge page took 4–47 ms to fault in (2–3 ms per MiB, against 0.4–0.7 ms
/// for 4-KiB pages): a paced Nexmark q7 spent up to a third of its CPU in
/// the kernel zeroing them, and bursts of them stopped both join instances
/// for up to 0.9 s at once. Without them the same run held every window
/// under 10 ms, and q7's full-speed run went from 12.0 to 14.5 M events/s.
/// Databases that care about latency (Redis, MongoDB) advise the same. A
/// failure (an old kernel) leaves the setting as it was.
fn avoid_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        let _ = rustix::thread::disable_transparent_huge_pages(true);
    }
}

/// The runtime every statement and task runs on, with stacks sized for the
/// statement limits ([`sluice_types::limits`]): tokio's default of 2 MiB
/// overflowed on a 500-term `OR`, and an overflow aborts the process; and
/// DataFusion's recursion protection told to keep a red zone deeper than
/// its deepest single step.
fn main() -> anyhow::Result<()> {
    recursive::set_minimum_stack_size(sluice_types::limits::RECURSION_RED_ZONE_BYTES);
    recursive::set_stack_allocation_size(sluice_types::limits::RECURSION_STACK_GROWTH_BYTES);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(sluice_types::limits::WORKER_STACK_BYTES)
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    keep_freed_memory();
    avoid_transparent_huge_pages();
    // sqlparser logs every statement it parses at debug level, passwords of
    // CREATE/ALTER USER included: its debug output stays off whatever
    // RUST_LOG says (docs/security.md, "Secrets").
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info".into())
        .add_directive("sqlparser=info".parse().expect("a valid directive"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Playground {
            data_dir,
            pg_listen,
            http_listen,
            security,
        } => {
            let password = std::env::var(security_args::SUPERUSER_PASSWORD_ENV).ok();
            let config = sluice_server::ServerConfig {
                data_dir: data_dir.clone(),
                pg_addr: pg_listen,
                http_addr: http_listen,
                security: security.config(&[pg_listen, http_listen], password)?,
            };
            let server = sluice_server::start(config).await?;
            println!("Sluice {} playground is running.", env!("CARGO_PKG_VERSION"));
            println!(
                "  SQL:   psql -h {} -p {} -U sluice",
                server.pg_addr.ip(),
                server.pg_addr.port()
            );
            let scheme = if server.engine.tls.is_some() { "https" } else { "http" };
            println!("  HTTP:  {scheme}://{}/health", server.http_addr);
            println!("  data:  {}", data_dir.display());
            println!("Press Ctrl-C to stop.");
            tokio::signal::ctrl_c().await?;
            println!("Shutting down.");
            server.shutdown().await;
        }
        Command::Master {
            id,
            listen,
            peers,
            data_listen,
            advertise,
            pg_listen,
            http_listen,
            data_dir,
            checkpoint_dir,
            worker_timeout,
            placement,
            security,
        } => {
            let peers = parse_peers(&id, &peers)?;
            let checkpoint_dir = match checkpoint_dir {
                Some(d) if d.contains("://") => d,
                Some(d) => std::path::absolute(&d)?.display().to_string(),
                None => std::path::absolute(data_dir.join("checkpoints"))?.display().to_string(),
            };
            let config = sluice_server::MasterConfig {
                id: id.clone(),
                listen,
                data_listen: data_listen.unwrap_or(SocketAddr::new(listen.ip(), 0)),
                advertise,
                pg_addr: pg_listen,
                http_addr: http_listen,
                data_dir: data_dir.clone(),
                checkpoint_dir: checkpoint_dir.clone(),
                worker_timeout,
                placement,
                security: security.config_for_master(std::env::var(security_args::SUPERUSER_PASSWORD_ENV).ok())?,
                peers,
            };
            let server = sluice_server::start_master(config).await?;
            println!("Sluice {} master {id} is running.", env!("CARGO_PKG_VERSION"));
            println!(
                "  workers: sluice worker --masters {}",
                server.control_addr.map(|a| a.to_string()).unwrap_or_default()
            );
            println!(
                "  SQL:     psql -h {} -p {} -U sluice",
                server.pg_addr.ip(),
                server.pg_addr.port()
            );
            println!("  HTTP:    http://{}/health", server.http_addr);
            println!("  checkpoints: {checkpoint_dir}");
            terminated().await;
            println!("Shutting down.");
            server.shutdown().await;
        }
        Command::Worker {
            id,
            masters,
            listen,
            advertise,
            slots,
            labels,
            data_dir,
        } => {
            let config = sluice_server::WorkerConfig {
                id: id.clone(),
                masters,
                listen,
                advertise,
                slots,
                labels: parse_labels(&labels)?,
                data_dir,
            };
            let shutdown = tokio_util::sync::CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                terminated().await;
                tracing::info!("stopping: draining this worker's tasks first");
                stop.cancel();
            });
            println!("Sluice {} worker {id} is running.", env!("CARGO_PKG_VERSION"));
            sluice_server::run_worker(config, shutdown).await?;
            println!("Shutting down.");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_skip_this_masters_own_entry_and_need_an_odd_quorum() {
        let list = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        let all = list("m1=a:1,m2=b:2,m3=c:3");
        let peers = parse_peers("m2", &all).unwrap();
        assert_eq!(peers.keys().collect::<Vec<_>>(), ["m1", "m3"]);
        assert_eq!(
            parse_peers("m1", &list("m2=b:2,m3=c:3")).unwrap(),
            parse_peers("m1", &all).unwrap()
        );
        // Four masters in all: refused.
        let err = parse_peers("m1", &list("m2=b:2,m3=c:3,m4=d:4")).unwrap_err();
        assert!(err.to_string().contains("odd number"), "{err}");
        assert!(
            parse_peers("m1", &list("m2=b:2,m2=c:3"))
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(parse_peers("m1", &list("m2")).is_err());
    }

    #[test]
    fn the_server_turns_transparent_huge_pages_off() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        avoid_transparent_huge_pages();
        assert_eq!(rustix::thread::transparent_huge_pages_are_disabled().ok(), Some(true));
    }

    /// mimalloc reads each option from its `MIMALLOC_…` variable when the
    /// process starts: a copy of this test binary started with distinctive
    /// values for the two variables reports them at the two indices.
    #[test]
    fn the_option_indices_are_the_ones_mimalloc_reads() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::print_purge_options",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MIMALLOC_PURGE_DELAY", "12345")
            .env("MIMALLOC_PURGE_DECOMMITS", "7")
            .env("SLUICE_PRINT_PURGE_OPTIONS", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("purge options: delay 12345 decommits 7"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Half of the test above (prints only when it starts this binary).
    #[test]
    #[expect(unsafe_code, reason = "mi_option_get is mimalloc's C API")]
    fn print_purge_options() {
        if std::env::var_os("SLUICE_PRINT_PURGE_OPTIONS").is_none() {
            return;
        }
        // SAFETY: reads two option values; valid indices.
        let (delay, decommits) = unsafe {
            (
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY),
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DECOMMITS),
            )
        };
        println!("purge options: delay {delay} decommits {decommits}");
    }
}
