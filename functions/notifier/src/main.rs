//! The notifier Lambda: configuration, clients built once per instance,
//! then the runtime loop. Everything else is in the library
//! (`notifier::handle`).

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use notifier::{handle, wire, Clients, Config};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    tracing::info!(?config, "starting notifier");
    let notifier = wire(Clients::connect(&config).await);
    let notifier = &notifier;
    run(service_fn(move |event: LambdaEvent<_>| handle(notifier, event))).await
}
