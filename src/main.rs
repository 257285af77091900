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
/// overflowed on a 500-term `OR`, and an overflow aborts the process.
fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(sluice_types::limits::WORKER_STACK_BYTES)
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    keep_freed_memory();
    avoid_transparent_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
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
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
