//! Integration tests against a real redis-server and a local AWS endpoint
//! (moto server or LocalStack). Start them with `make stack` (or let
//! `make test` do it). Each test isolates itself with its own Redis key
//! prefix, queue and coupon ids, so the tests run in parallel.

mod support;

mod admin;
mod admission;
mod bad_input;
mod bodies;
mod center;
mod cluster;
mod devices;
mod dry_run;
mod elasticache;
mod explore;
mod failover;
mod flash_sale;
mod hostile;
mod identity;
mod issuance;
mod lottery;
mod notify;
mod preheat;
mod reconcile;
mod redemption;
mod refill;
mod reminders;
mod risk;
mod rules;
mod sale;
mod sqs_down;
mod wallet;
mod waves;
mod waves_restarts;
