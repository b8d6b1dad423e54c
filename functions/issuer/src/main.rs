//! The issuer Lambda: configuration, clients built once per instance, then
//! the runtime loop. Everything else is in the library (`issuer::handle`).

use issuer::{handle, wire, Clients, Config};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    tracing::info!(?config, "starting issuer");
    let issuer = wire(&config, Clients::connect(&config).await);
    let issuer = &issuer;
    run(service_fn(move |event: LambdaEvent<_>| handle(issuer, event))).await
}
