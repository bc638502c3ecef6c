//! The accept loop of a TCP server node (REST, SQL): worker threads sized
//! from the CPUs, each with its own runtime (`serve_per_thread`), and
//! connections handed to a handler until SIGTERM or Ctrl-C.

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

/// Runs a server with one thread per worker, each with its own
/// single-threaded runtime, until SIGTERM or Ctrl-C.
///
/// Worker 0 runs `init` (connect to the cluster, create what the node
/// needs) and listens on `listen`; every other worker then runs `join` with
/// worker 0's state to make its own (typically a sibling cluster client,
/// so that its requests stay on its thread). Once all are ready,
/// `listening` is called with the bound address. Worker 0 accepts and deals
/// connections out in turn; each is served by `serve` on the worker it was
/// dealt to, where it stays: no request crosses threads, and nothing wakes
/// another thread or steals work (on a multi-threaded runtime that cost
/// about a fifth of a REST node's CPU).
pub fn serve_per_thread<St, Init, InitFut, Join, JoinFut, Serve, ServeFut>(
    name: &str,
    threads: usize,
    listen: std::net::SocketAddr,
    init: Init,
    join: Join,
    listening: impl FnOnce(std::net::SocketAddr) -> Result<(), String>,
    serve: Serve,
) -> Result<(), String>
where
    St: Clone + Send + 'static,
    Init: FnOnce() -> InitFut + Send + 'static,
    InitFut: Future<Output = Result<St, String>>,
    Join: Fn(St) -> JoinFut + Clone + Send + 'static,
    JoinFut: Future<Output = Result<St, String>>,
    Serve: Fn(&St, TcpStream) -> ServeFut + Clone + Send + 'static,
    ServeFut: Future<Output = ()> + Send + 'static,
{
    use std::sync::mpsc;
    assert!(threads > 0, "a server needs at least one worker thread");
    // Every worker reports once: ready to serve, or why it cannot.
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let (address_tx, address_rx) = mpsc::channel::<std::net::SocketAddr>();
    let mut hand_offs = Vec::with_capacity(threads - 1);
    let mut states = Vec::with_capacity(threads - 1);
    let mut workers = Vec::with_capacity(threads);
    for index in 1..threads {
        let (hand_off, mut streams) = tokio::sync::mpsc::unbounded_channel::<std::net::TcpStream>();
        hand_offs.push(hand_off);
        let (state_tx, state_rx) = mpsc::channel::<St>();
        states.push(state_tx);
        let (join, serve, ready) = (join.clone(), serve.clone(), ready_tx.clone());
        workers.push(spawn_worker(name, index, move || {
            // Worker 0 failed before sharing its state: nothing to do.
            let Ok(first) = state_rx.recv() else { return Ok(()) };
            let report = reporter(&ready);
            current_thread_runtime().map_err(report)?.block_on(async {
                let state = join(first).await.map_err(report)?;
                let _ = ready.send(Ok(()));
                while let Some(stream) = streams.recv().await {
                    if let Ok(stream) = TcpStream::from_std(stream) {
                        tokio::spawn(serve(&state, stream));
                    }
                }
                Ok(())
            })
        })?);
    }
    let ready = ready_tx;
    workers.insert(
        0,
        spawn_worker(name, 0, move || {
            let report = reporter(&ready);
            current_thread_runtime().map_err(report)?.block_on(async {
                let state = init().await.map_err(report)?;
                let listener = TcpListener::bind(listen)
                    .await
                    .map_err(|e| format!("cannot listen on {listen}: {e}; pick another --port"))
                    .map_err(report)?;
                let address = listener
                    .local_addr()
                    .map_err(|e| format!("cannot read the listening address: {e}"))
                    .map_err(report)?;
                for worker in &states {
                    let _ = worker.send(state.clone());
                }
                drop(states);
                let _ = address_tx.send(address);
                let _ = ready.send(Ok(()));
                let mut next = 0usize;
                accept_until_stopped(listener, |stream| {
                    next = (next + 1) % threads;
                    let mut local = Some(stream);
                    if next > 0 {
                        // A worker that is gone leaves its share to this one.
                        local = match local.take().map(TcpStream::into_std) {
                            Some(Ok(stream)) => match hand_offs[next - 1].send(stream) {
                                Ok(()) => None,
                                Err(back) => TcpStream::from_std(back.0).ok(),
                            },
                            _ => None,
                        };
                    }
                    let connection = local.map(|stream| serve(&state, stream));
                    async move {
                        if let Some(connection) = connection {
                            connection.await
                        }
                    }
                })
                .await
            })
        })?,
    );
    for _ in 0..threads {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            // Returning ends the process, and with it the other workers.
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("a worker thread stopped while starting; see the messages above".into()),
        }
    }
    let address = address_rx.recv().map_err(|_| "the accepting worker stopped while starting".to_string())?;
    listening(address)?;
    let mut result = Ok(());
    for worker in workers {
        let r = worker.join().unwrap_or_else(|_| Err("a worker thread panicked".into()));
        if result.is_ok() {
            result = r;
        }
    }
    result
}

/// Passes a worker's start-up error on to `run`'s caller (and returns it).
fn reporter(ready: &std::sync::mpsc::Sender<Result<(), String>>) -> impl Fn(String) -> String + Copy + '_ {
    move |e: String| {
        let _ = ready.send(Err(e.clone()));
        e
    }
}

/// Writes the listening address to `path` (`--ready-file`), if given.
pub fn write_ready_file(path: Option<&std::path::Path>, address: std::net::SocketAddr) -> Result<(), String> {
    match path {
        Some(path) => {
            std::fs::write(path, address.to_string()).map_err(|e| format!("cannot write {}: {e}", path.display()))
        }
        None => Ok(()),
    }
}

/// Stack of an API node's worker thread. Requests are handled on it, and
/// SQL expressions are bound, evaluated and dropped recursively, about
/// 1 KiB a level: the SQL node refuses expressions that could nest deeper
/// than 8 Ki levels (`latsdb_sql::parse::MAX_EXPRESSION_TOKENS`), which
/// this holds eight times over. Address space only: pages are used as the
/// stack grows.
pub const WORKER_STACK_BYTES: usize = 64 << 20;

fn spawn_worker(
    name: &str,
    index: usize,
    body: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<std::thread::JoinHandle<Result<(), String>>, String> {
    std::thread::Builder::new()
        .name(format!("{name}-{index}"))
        .stack_size(WORKER_STACK_BYTES)
        .spawn(body)
        .map_err(|e| format!("cannot start worker thread {index}: {e}"))
}

fn current_thread_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}
