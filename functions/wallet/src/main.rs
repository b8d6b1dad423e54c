//! The wallet Lambda: configuration, clients built once per instance, then
//! the runtime loop. Everything else is in the library (`wallet::handle`).

use lambda_http::{run, service_fn, Error, Request};
use wallet::{handle, wire, Clients, Config};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    tracing::info!(?config, "starting wallet");
    let wallet = wire(&config, Clients::connect(&config).await?);
    let wallet = &wallet;
    run(service_fn(move |req: Request| handle(wallet, req))).await
}
