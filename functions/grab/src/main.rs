//! The grab Lambda: configuration, clients built once per instance, then the
//! runtime loop. Everything else is in the library (`grab::handle`).

use grab::{handle, wire, Clients, Config};
use lambda_http::{run, service_fn, Error, Request};

#[tokio::main]
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
