//! The `sluice` binary.

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// mimalloc instead of glibc's malloc: Arrow batches are allocated and freed
/// on every hop, often from different threads; glibc spent ~15 % of a paced
/// Nexmark q0 run in malloc/free/consolidation (perf), mimalloc's per-thread
/// free lists and page reuse avoid most of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long mimalloc keeps freed memory before returning it to the OS,
/// unless `MIMALLOC_PURGE_DELAY` says otherwise. Its default (1 s, arenas
/// ten times that) returned the rows a window or join frees at each firing
/// to the OS, and the next ten seconds of input faulted them back in:
/// `perf` of a paced Nexmark q7 showed `clear_page_erms` (the kernel zeroing
/// those pages) at 8.5 % of the server's CPU in steady state, and on this
/// project's VM first-touching memory is slow enough to make a window
/// seconds late. A state's memory is now reused for half a minute (arenas
/// five) before it goes back, as a JVM keeps its heap committed.
const PURGE_DELAY_MS: std::ffi::c_long = 30_000;
/// `mi_option_purge_delay` in mimalloc v3's `mimalloc.h` (the Rust bindings
/// name no constant for it); `purge_delay_is_the_option_mimalloc_reads`
/// checks the index against the library.
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
    },
}

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`] unless the
/// environment chose one. The crate's only `unsafe`: mimalloc's options
/// have no safe Rust API.
#[expect(unsafe_code, reason = "mi_option_set is mimalloc's C API; there is no safe wrapper")]
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: stores one option value (read on each purge); the index is
        // valid (checked by `purge_delay_is_the_option_mimalloc_reads`).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
        } => {
            let config = sluice_server::ServerConfig {
                data_dir: data_dir.clone(),
                pg_addr: pg_listen,
                http_addr: http_listen,
            };
            let server = sluice_server::start(config).await?;
            println!("Sluice {} playground is running.", env!("CARGO_PKG_VERSION"));
            println!(
                "  SQL:   psql -h {} -p {} -U sluice",
                server.pg_addr.ip(),
                server.pg_addr.port()
            );
            println!("  HTTP:  http://{}/health", server.http_addr);
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

    /// Index 15 is the purge delay: mimalloc v3's default for it is 1000 ms
    /// (no other option of v3 defaults to 1000), read before anyone sets it.
    #[test]
    #[expect(unsafe_code, reason = "mi_option_get is mimalloc's C API")]
    fn purge_delay_is_the_option_mimalloc_reads() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads one option value; a valid index.
        let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            value, 1000,
            "option {MI_OPTION_PURGE_DELAY} is not mimalloc's purge delay"
        );
    }
}
