//! The admin Lambda: configuration, clients built once per instance, then
//! the runtime loop. Everything else is in the library (`admin::handle`).

use admin::{handle, wire, Clients, Config};
use lambda_http::{run, service_fn, Error, Request};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    tracing::info!(?config, "starting admin");
    if config.local_mode {
        tracing::warn!("ADMIN_LOCAL_MODE is on: X-Admin-Actor is trusted (local use only)");
    }
    let app = wire(&config, Clients::connect(&config).await?);
    let app = &app;
    run(service_fn(move |req: Request| handle(app, req))).await
}
