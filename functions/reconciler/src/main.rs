//! The reconciler Lambda: configuration, clients built once per instance
//! (finding Redis through ElastiCache when no URL is configured), then the
//! runtime loop. Everything else is in the library (`reconciler::handle`).

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use reconciler::{handle, wire, Clients, Config};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    tracing::info!(?config, "starting reconciler");
    let app = wire(&config, Clients::connect(&config).await?);
    let app = &app;
    run(service_fn(move |event: LambdaEvent<_>| handle(app, event))).await
}
