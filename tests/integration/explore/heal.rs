//! The explorer's faults between two steps, the healing after the
//! schedule, and the judgement of the promise.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use coupon_adapters::dynamodb::{DynamoEntries, DynamoFacts, DynamoIssueLedger};
use coupon_domain::clock::Clock;
use coupon_domain::ids::{CouponId, UserId};
use coupon_domain::issuance::IssueLedger;
use coupon_domain::lottery::ports::Entries;
use coupon_domain::reconcile::ports::DurableFacts;
use lambda_runtime::LambdaEvent;

use super::actors::{delete, receive, summary};
use super::sched::{ActorId, Rng};
use super::world::{user_name, Role, World, SEND_WINDOW_MS};
use crate::support::sqs_event;

/// Deletes every Redis key of `shard` (its node lost its data).
pub(super) async fn flush_shard(world: &World, shard: u32) -> usize {
    let tag = world.h.redis.keys().shard(&world.def.coupon_id, shard).meta();
    let tag = tag.trim_end_matches(":meta");
    let mut conn = world.h.redis.connection();
    let keys = crate::support::keys_matching(&mut conn, &format!("{tag}*")).await;
    for key in &keys {
        let _: Result<(), _> = redis::cmd("DEL").arg(key).query_async(&mut conn).await;
    }
    world.nodes.lost(shard);
    keys.len()
}

/// A fault before the chosen step (of `actor`); its name.
pub(super) async fn fault(world: &World, rng: &mut Rng, actor: ActorId) -> String {
    let is_user = world
        .tasks
        .lock()
        .unwrap()
        .get(&actor)
        .is_some_and(|(role, _)| matches!(role, Role::User(_) | Role::Twin(_)));
    match rng.below(5) {
        0 => {
            let shard = rng.below(world.def.shards as u64) as u32;
            let n = flush_shard(world, shard).await;
            world
                .sched
                .tell(format!("FAULT: shard {shard}'s node loses its data ({n} keys)"));
            "shard_lost".into()
        }
        1 if is_user => "crash".into(),
        2 => {
            let taken = receive(&world.h, 1).await;
            if let Some(m) = taken.first() {
                delete(&world.h, m).await;
                let (group, body) = group_and_body(m);
                world.sched.tell(format!(
                    "FAULT: a message leaves the queue until a re-drive: {}",
                    body.chars().take(100).collect::<String>()
                ));
                world.held_back.lock().unwrap().push((body, group));
            }
            "message_held_back".into()
        }
        3 => {
            *world.skip_deletes.lock().unwrap() += 1;
            world
                .sched
                .tell("FAULT: the issuer's next batch dies after its writes, before its deletes".into());
            "issuer_dies_before_delete".into()
        }
        _ => {
            let jump = rng.between(500, 5_000);
            world.h.clock.advance(jump);
            world.sched.tell(format!("FAULT: the clock jumps {jump} ms"));
            "clock_jump".into()
        }
    }
}

/// A received message's group and body, to send it again as it was.
fn group_and_body(m: &aws_sdk_sqs::types::Message) -> (String, String) {
    let group = m
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId))
        .cloned()
        .unwrap_or_else(|| "explore".into());
    (group, m.body().unwrap_or_default().to_owned())
}

/// A fault of the shards' nodes or of SQS's delivery, before a step; its
/// name (`nodes.rs` says what each models) and the shard whose node it hit.
pub(super) async fn node_fault(world: &World, rng: &mut Rng) -> (String, u32) {
    let shard = rng.below(world.def.shards as u64) as u32;
    // On the Serverless stand-in a sixth kind, the replica catching up, and
    // no restart from a snapshot (nodes.rs says why): a failover instead.
    let pick = match (
        world.nodes.asynchronous,
        rng.below(if world.nodes.asynchronous { 6 } else { 5 }),
    ) {
        (true, 5) => {
            let n = world.nodes.caught_up(shard).await;
            world.sched.tell(format!(
                "shard {shard}'s replica catches up with its primary ({n} keys)"
            ));
            return ("replica_caught_up".into(), shard);
        }
        (true, 3) => 2,
        (_, pick) => pick,
    };
    let name = match pick {
        0 | 1 => {
            let n = world.nodes.save(shard).await;
            world
                .sched
                .tell(format!("shard {shard}'s node saves a snapshot ({n} keys)"));
            "snapshot_saved".into()
        }
        2 => {
            let (kept, lost) = world.nodes.fail_over(shard).await;
            world.sched.tell(format!(
                "FAULT: shard {shard}'s node fails over to its replica ({kept} keys as last acknowledged; \
                 {lost} written since are gone)"
            ));
            "failover".into()
        }
        3 => {
            let (kept, lost) = world.nodes.restart(shard).await;
            world.sched.tell(format!(
                "FAULT: shard {shard}'s node restarts from its last snapshot ({kept} keys; {lost} written since \
                 are gone; a new replication history)"
            ));
            "restart_from_snapshot".into()
        }
        _ => {
            // SQS delivers at least once: a message comes again beside
            // the one still on the queue (a new message, the same body).
            let taken = receive(&world.h, 1).await;
            if let Some(m) = taken.first() {
                let (group, body) = group_and_body(m);
                let _ = world
                    .h
                    .stack
                    .sqs
                    .send_message()
                    .queue_url(&world.h.queue_url)
                    .message_body(&body)
                    .message_group_id(group)
                    .message_deduplication_id(format!("again-{}", m.message_id().unwrap_or_default()))
                    .send()
                    .await;
                let _ = world
                    .h
                    .stack
                    .sqs
                    .change_message_visibility()
                    .queue_url(&world.h.queue_url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .visibility_timeout(0)
                    .send()
                    .await;
                world.sched.tell(format!(
                    "FAULT: a message is delivered twice: {}",
                    body.chars().take(100).collect::<String>()
                ));
            }
            "message_duplicated".into()
        }
    };
    (name, shard)
}

/// Every fault heals: the clients finish their presses (the same request
/// ids), the queue drains through the issuer, the reconciler passes with
/// its grace over until the coupon is quiet.
pub(super) async fn heal(world: &World) {
    // The messages a fault took off the queue come back (as a re-drive of
    // the dead-letter queue sends them: new messages, the same bodies).
    let held: Vec<(String, String)> = std::mem::take(&mut *world.held_back.lock().unwrap());
    for (n, (body, group)) in held.iter().enumerate() {
        let _ = world
            .h
            .stack
            .sqs
            .send_message()
            .queue_url(&world.h.queue_url)
            .message_body(body)
            .message_group_id(group)
            .message_deduplication_id(format!("redriven-{n}-{}", body.len()))
            .send()
            .await;
    }
    if !held.is_empty() {
        world
            .sched
            .tell(format!("heal: {} held-back message(s) re-driven", held.len()));
    }
    // What the schedule's issuer received and never deleted (it died, or
    // the schedule ended under it) is delivered again now.
    let taken: Vec<String> = std::mem::take(&mut *world.in_flight.lock().unwrap());
    for handle in taken {
        let _ = world
            .h
            .stack
            .sqs
            .change_message_visibility()
            .queue_url(&world.h.queue_url)
            .receipt_handle(handle)
            .visibility_timeout(0)
            .send()
            .await;
    }
    let reconciler = world
        .h
        .reconciler_over(&world.h.queue_url, SEND_WINDOW_MS, |ports| ports);
    let real: Arc<dyn IssueLedger> = Arc::new(DynamoIssueLedger::new(world.h.tables.clone()));
    let issuer = world.issuer(real);
    for round in 0..12 {
        // Retries, each on a fresh instance with the world's clock.
        for u in 0..world.users.len() {
            let pending = world.users[u].lock().unwrap().to_press.clone();
            for request in pending {
                let app = grab::wire(
                    &world.grab_config(),
                    grab::Clients {
                        redis: world.h.redis.clone(),
                        sqs: world.h.stack.sqs.clone(),
                        dynamodb: world.h.stack.ddb.clone(),
                        clock: Arc::new(world.h.clock.clone()),
                        metrics: world.h.metrics.clone(),
                        origin: None,
                    },
                );
                let (decided, told) = world.press(&app, u, &request).await;
                if !decided {
                    world
                        .sched
                        .tell(format!("heal {round}: {} {request} hears {told}", user_name(u)));
                }
            }
        }
        // Redelivery after the visibility timeout (1 s) of a batch whose
        // issuer died before its deletes.
        let mut drained = 0;
        for _ in 0..20 {
            let messages = receive(&world.h, 10).await;
            if messages.is_empty() {
                break;
            }
            drained += messages.len();
            if let Ok(r) = issuer::handle(&issuer, LambdaEvent::new(sqs_event(&messages), Default::default())).await {
                let failed: BTreeSet<String> = r.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
                for m in &messages {
                    if !m.message_id().is_some_and(|id| failed.contains(id)) {
                        delete(&world.h, m).await;
                    }
                }
            }
        }
        world.h.clock.advance(31_000);
        let report = reconciler.run().await.ok();
        let quiet = report
            .as_ref()
            .and_then(|r| coupon_domain::reconcile::find(r, &world.def.coupon_id))
            .is_some_and(|c| c.pending == 0 && c.shards_waiting == 0 && c.drift == 0)
            && drawn_and_issued(world).await;
        let undecided = world.users.iter().any(|u| !u.lock().unwrap().to_press.is_empty());
        world.sched.tell(format!(
            "heal {round}: drained {drained}, {}",
            report
                .map(|r| format!(
                    "{} {:?}",
                    summary(&r.coupons),
                    r.coupons.iter().flat_map(|c| c.causes.clone()).collect::<Vec<_>>()
                ))
                .unwrap_or_else(|| "pass failed".into())
        ));
        if quiet && !undecided && drained == 0 {
            return;
        }
        if drained == 0 {
            // Messages in flight (a batch whose issuer died) come back
            // after their visibility timeout.
            tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
        }
    }
}

/// In a draw world, whether the draw is recorded and DynamoDB holds a
/// coupon for each of its winners (true in any other world).
/// Each win counts against the risk limits it was reserved under: the
/// user's daily claims hold the press, and so do its device's claims. A
/// copy of the press that won on places another copy gave back would
/// count against none (the explorer's model never rolls the risk keys
/// back, so a missing place is the protocol's doing).
async fn wins_hold_their_places(world: &World) -> Vec<String> {
    use redis::AsyncCommands;
    let limits = &world.h.config.risk;
    let day = limits.day(world.h.clock.now_ms());
    let keys = world.h.redis.keys();
    let mut conn = world.h.redis.connection();
    let mut out = Vec::new();
    for (u, log) in world.users.iter().enumerate() {
        let won: Vec<String> = {
            let log = log.lock().unwrap();
            let wins = log.finals.iter().filter(|(_, f)| f.starts_with("SUCCESS"));
            wins.map(|(request, _)| request.clone()).collect()
        };
        let user = UserId::parse(&user_name(u)).unwrap();
        for request in won {
            let press = format!("{}:{request}", world.def.coupon_id);
            if limits.daily_claims_per_user > 0 {
                let held: bool = conn.hexists(keys.user_claims(&user, day), &press).await.unwrap_or(true);
                if !held {
                    out.push(format!(
                        "{user} {request} won, and the user's daily claims do not count it"
                    ));
                }
            }
            if let (Some(device), true) = (world.device(u), limits.claims_per_device > 0) {
                let member = format!("{user}|{press}");
                let held: bool = conn
                    .sismember(keys.device_claims(&device, day), &member)
                    .await
                    .unwrap_or(true);
                if !held {
                    out.push(format!("{user} {request} won, and its device's claims do not count it"));
                }
            }
        }
    }
    out
}

async fn drawn_and_issued(world: &World) -> bool {
    if !world.draws() {
        return true;
    }
    let entries = DynamoEntries::new(world.h.tables.clone());
    match entries.lottery(&world.def.coupon_id).await {
        Ok(Some(lottery)) => match lottery.drawn {
            Some(drawn) => DynamoFacts::new(world.h.tables.clone())
                .issued(&world.def.coupon_id)
                .await
                .is_ok_and(|issued| issued >= drawn.winners),
            None => false,
        },
        _ => false,
    }
}

/// A draw world's draw, judged as `couponctl verify-draw` judges it: the
/// holders are exactly the winners recomputed from the revealed seed and
/// the frozen entries; and each registration's answer is the truth (told
/// REGISTERED: in the draw; told ENDED: not in it).
async fn judge_draw(world: &World, holders: impl Iterator<Item = UserId>) -> Vec<String> {
    let mut out = Vec::new();
    let book = DynamoEntries::new(world.h.tables.clone());
    let coupon = &world.def.coupon_id;
    let mut entered = BTreeSet::new();
    for shard in 0..world.def.shards {
        entered.extend(book.entries(coupon, shard).await.expect("entries"));
    }
    for (u, log) in world.users.iter().enumerate() {
        let user = UserId::parse(&user_name(u)).unwrap();
        for answer in log.lock().unwrap().finals.values() {
            match (answer.as_str(), entered.contains(&user)) {
                ("REGISTERED", false) => out.push(format!("{user} was told REGISTERED and is not in the draw")),
                ("Ended", true) => out.push(format!("{user} was told ENDED and is in the draw")),
                _ => {}
            }
        }
    }
    let lottery = book.lottery(coupon).await.expect("lottery").expect("a lottery");
    let Some(drawn) = lottery.drawn else {
        if !entered.is_empty() {
            out.push(format!("{} registered, and the draw never ran", entered.len()));
        }
        return out;
    };
    let verdict = coupon_domain::lottery::verify(&lottery.seed, entered, drawn.places, holders);
    if !verdict.agrees() {
        out.push(format!(
            "the holders are not the draw's winners: winners without a coupon {:?}, holders who did not win {:?}",
            verdict.missing, verdict.extra
        ));
    }
    if verdict.drawing.winners.len() as u64 != drawn.winners {
        out.push(format!(
            "the draw recorded {} winner(s), the recomputed draw has {}",
            drawn.winners,
            verdict.drawing.winners.len()
        ));
    }
    out
}

/// The promise after healing, as users and the books see it.
pub(super) async fn judge(world: &World) -> Vec<String> {
    let mut out = std::mem::take(&mut *world.seen.lock().unwrap());
    let facts = DynamoFacts::new(world.h.tables.clone());
    let coupon: &CouponId = &world.def.coupon_id;
    let holdings = facts.holdings(coupon).await.expect("holdings");
    let rejected: BTreeSet<String> = facts
        .rejections(coupon)
        .await
        .expect("rejections")
        .into_iter()
        .map(|r| r.grant_id.to_string())
        .collect();
    let mut holder_of: BTreeMap<String, String> = BTreeMap::new();
    let mut held_total = 0u64;
    for (user, held) in &holdings {
        held_total += held.len() as u64;
        if held.len() > world.def.per_user_limit as usize {
            out.push(format!(
                "{user} holds {} coupons, above the limit {}",
                held.len(),
                world.def.per_user_limit
            ));
        }
        for h in held {
            if let Some((request, record)) = &h.outcome {
                if let Some(other) = holder_of.insert(record.grant_id.to_string(), user.to_string()) {
                    out.push(format!("grant {} is held by {other} and by {user}", record.grant_id));
                }
                // A press told a refusal holds nothing from it: the answer
                // is the truth, and the unit was another user's to win.
                // But on the Serverless stand-in, whose lost writes cost
                // this (docs/faults.md, "Engines"): a press whose win was
                // claimed, then lost with a failover, is decided afresh by
                // its retry or its other copy, which may be told a refusal
                // while the grant the claim names is issued to the user.
                let told = (0..world.users.len())
                    .find(|&u| user_name(u) == user.as_str())
                    .and_then(|u| world.users[u].lock().unwrap().finals.get(request.as_str()).cloned())
                    .filter(|_| !super::world::serverless());
                if let Some(final_answer) = told.filter(|f| !f.starts_with("SUCCESS")) {
                    out.push(format!(
                        "{user} {request} was told {final_answer}, and holds {} from it",
                        record.grant_id
                    ));
                }
            }
        }
    }
    if world.draws() {
        let holders = holdings
            .iter()
            .filter(|(_, held)| !held.is_empty())
            .map(|(user, _)| user.clone());
        out.extend(judge_draw(world, holders).await);
    }
    // The device's rule counts each win once: a win holds its press's
    // place among the device's daily claims, so no device wins more than
    // its limit (a lottery's draw is not a claim of the device).
    if !world.draws() {
        let mut wins: BTreeMap<u32, u32> = BTreeMap::new();
        for (u, log) in world.users.iter().enumerate() {
            if let Some(d) = world.devices[u] {
                let log = log.lock().unwrap();
                *wins.entry(d).or_default() += log.finals.values().filter(|f| f.starts_with("SUCCESS")).count() as u32;
            }
        }
        for (d, n) in wins {
            if n > world.claims_per_device {
                out.push(format!(
                    "device d{d} won {n} claims, above its daily limit {}: a win counted against no limit",
                    world.claims_per_device
                ));
            }
        }
    }
    if !world.draws() {
        out.extend(wins_hold_their_places(world).await);
    }
    // Every grant that reached DynamoDB was claimed before it was sent,
    // for the user it went to: a rebuild that found no claim would not
    // know it was on its way, and could sell its unit again.
    let claims: BTreeMap<String, String> = facts
        .claims(coupon)
        .await
        .expect("claims")
        .into_iter()
        .map(|g| (g.grant_id.to_string(), g.user_id.to_string()))
        .collect();
    for (grant, user) in &holder_of {
        match claims.get(grant) {
            None => out.push(format!(
                "{user} holds {grant}, which was never claimed before it was sent"
            )),
            Some(claimed) if claimed != user => {
                out.push(format!("{user} holds {grant}, which was claimed for {claimed}"))
            }
            Some(_) => {}
        }
    }
    if held_total > world.def.total_stock {
        out.push(format!(
            "{held_total} coupons issued of a stock of {}",
            world.def.total_stock
        ));
    }
    for (u, log) in world.users.iter().enumerate() {
        let log = log.lock().unwrap();
        let user = user_name(u);
        for (request, grants) in &log.told {
            if grants.len() > 1 {
                out.push(format!(
                    "{user} {request} was told SUCCESS with different grants {grants:?}"
                ));
            }
            for grant in grants {
                if rejected.contains(grant) {
                    out.push(format!(
                        "{user} {request} was told SUCCESS {grant}, and the grant was REJECTED"
                    ));
                } else if holder_of.get(grant) != Some(&user) {
                    out.push(format!(
                        "{user} {request} was told SUCCESS {grant}, and does not hold it (held by {:?})",
                        holder_of.get(grant)
                    ));
                }
            }
            // The same exception on the Serverless stand-in: a copy told
            // SUCCESS, another (after a failover took the win) a refusal,
            // the told grant held (checked above).
            let excused = super::world::serverless() && grants.iter().all(|g| holder_of.get(g) == Some(&user));
            if let Some(last) = log.finals.get(request) {
                if !last.starts_with("SUCCESS") && !excused {
                    out.push(format!(
                        "{user} {request} was told SUCCESS, then {last} (a replay must answer the first)"
                    ));
                }
            }
        }
        for request in &log.to_press {
            out.push(format!("{user} {request} was never decided after healing"));
        }
    }
    let reconciler = world
        .h
        .reconciler_over(&world.h.queue_url, SEND_WINDOW_MS, |ports| ports);
    if let Ok(report) = reconciler.run().await {
        if let Some(c) = coupon_domain::reconcile::find(&report, coupon) {
            // No false SOLD_OUT: a sale whose every unit is gone from Redis
            // (none remaining, none on its way) while fewer were issued than
            // its total lost units to grants DynamoDB refused, and told
            // someone it was sold out.
            let sold_out_told = world
                .users
                .iter()
                .any(|u| u.lock().unwrap().finals.values().any(|f| f == "SoldOut"));
            if sold_out_told && c.remaining <= 0 && c.pending == 0 && c.issued < c.total {
                out.push(format!(
                    "a user heard SOLD_OUT, and the sale ended with {} of {} issued, none left to sell ({})",
                    c.issued,
                    c.total,
                    summary(std::slice::from_ref(c))
                ));
            }
            if c.drift != 0 {
                out.push(format!(
                    "the stock equation is off by {} ({}; rejected grants {rejected:?})",
                    c.drift,
                    summary(std::slice::from_ref(c))
                ));
            }
        }
    }
    out
}
