//! The grab Lambda: configuration, clients built once per instance, then the
//! runtime loop. Everything else is in the library (`grab::handle`).

use grab::{handle, wire, Clients, Config};
use lambda_http::{run, service_fn, Error, Request};

/// Every press allocates a few dozen small objects (the event, the
/// request id, the keys, the reply); mimalloc serves them from per-thread
/// pages, measurably cheaper than the system allocator on the one-caller
/// path (docs/performance.md). The benchmark uses it too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// One thread: a Lambda instance serves one request at a time, so the
// handler, the Redis connection's driver and the SDK share one thread and
// a reply never waits for a wake-up on another (the benchmark drives the
// handler the same way).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    tracing::info!(?config, "starting grab");
    if config.http.trust_identity_headers {
        tracing::warn!("TRUST_IDENTITY_HEADERS is on: callers choose their identity (local use only)");
    }
    let app = wire(&config, Clients::connect(&config).await?);
    let app = &app;
    run(service_fn(move |req: Request| handle(app, req))).await
}
