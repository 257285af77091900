//! The `sluice` binary.

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's malloc: Arrow batches are allocated and freed
/// on every hop, often from different threads; glibc spent ~15 % of a paced
/// Nexmark q0 run in malloc/free/consolidation (perf), mimalloc's per-thread
/// free lists and page reuse avoid most of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::net::SocketAddr;
use std::path::PathBuf;

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
