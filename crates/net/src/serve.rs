//! The accept loop of a TCP server node (REST, SQL): a multi-threaded
//! runtime sized from the CPUs, and connections handed to a handler until
//! SIGTERM or Ctrl-C.

use std::future::Future;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// Worker threads: `threads`, or one per CPU when 0.
pub fn worker_threads(threads: usize) -> usize {
    if threads == 0 {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
    } else {
        threads
    }
}

/// A multi-threaded runtime whose threads carry `name`.
pub fn runtime(threads: usize, name: &str) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// Accepts connections (with TCP_NODELAY) and spawns `handle` for each one
/// until SIGTERM or Ctrl-C.
pub async fn accept_until_stopped<F, Fut>(listener: TcpListener, mut handle: F) -> Result<(), String>
where
    F: FnMut(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot install the SIGTERM handler: {e}"))?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(handle(stream));
                }
                // Out of file descriptors and the like: wait instead of spinning.
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
        }
    }
    Ok(())
}
