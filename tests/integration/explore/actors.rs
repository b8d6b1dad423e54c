//! The explorer's actors: a user's presses, a second copy of a press, the
//! issuer behind its event source mapping, the reconciler's schedule. Each
//! runs the real use case over ports behind the scheduler's gate.

use std::collections::BTreeSet;
use std::sync::Arc;

use coupon_adapters::dynamodb::DynamoIssueLedger;
use coupon_domain::clock::Clock;
use coupon_domain::issuance::IssueLedger;
use coupon_domain::reconcile::{CouponReport, Reconciler};
use lambda_runtime::LambdaEvent;

use super::gated::{GatedClaims, GatedIssue, GatedLedger, GatedRedrive, GatedRepair};
use super::sched::ActorId;
use super::world::{user_name, World, SEND_WINDOW_MS};
use crate::support::{sqs_event, Harness};

/// A user's presses, from where the log says they are: each press retried
/// with its request id until decided (at most 4 attempts here; healing
/// finishes the rest).
pub(super) async fn user_actor(world: Arc<World>, actor: ActorId, user: usize, offset_ms: i64) {
    loop {
        let next = world.users[user].lock().unwrap().to_press.first().cloned();
        let Some(request) = next else { break };
        let attempt = {
            let mut log = world.users[user].lock().unwrap();
            log.attempts += 1;
            log.attempts
        };
        if attempt > 4 {
            break;
        }
        let who = format!("{} {request} (try {attempt})", user_name(user));
        let app = world.grab_instance(actor, who, offset_ms);
        let (decided, told) = world.press(&app, user, &request).await;
        world.sched.tell(format!("{} {request}: {told}", user_name(user)));
        if decided {
            world.users[user].lock().unwrap().attempts = 0;
        }
    }
    world.sched.finish(actor);
}

/// A second copy of `user`'s press `request` (a client that sent it again
/// while the first was in flight), on instances of its own.
pub(super) async fn twin_actor(world: Arc<World>, actor: ActorId, user: usize, request: String, offset_ms: i64) {
    for attempt in 1..=4 {
        let who = format!("{} {request} twin (try {attempt})", user_name(user));
        let app = world.grab_instance(actor, who, offset_ms);
        let (decided, told) = world.press(&app, user, &request).await;
        world.sched.tell(format!("{} {request} twin: {told}", user_name(user)));
        if decided {
            break;
        }
    }
    world.sched.finish(actor);
}

/// A user's registration for the lottery beside the sale, from the user's
/// device, retried until answered.
pub(super) async fn entrant_actor(world: Arc<World>, actor: ActorId, user: usize) {
    if let Some(entry) = world.entry(user) {
        for attempt in 1..=4 {
            let who = format!("{} registers (try {attempt})", user_name(user));
            let app = world.grab_instance(actor, who, 0);
            let answer = app.service.enter(&entry).await;
            world.sched.tell(format!(
                "{} registers for the lottery: {}",
                user_name(user),
                match &answer {
                    Ok(o) => format!("{o:?}"),
                    Err(e) => format!("retryable: {e}"),
                }
            ));
            if answer.is_ok() {
                break;
            }
        }
    }
    world.sched.finish(actor);
}

/// The SQS event source mapping and the issuer: batches received, issued,
/// the successes deleted (unless the issuer dies before its delete).
pub(super) async fn issuer_actor(world: Arc<World>, actor: ActorId, rounds: u32) {
    let gate = world.gate(actor, "issuer".into());
    let real: Arc<dyn IssueLedger> = Arc::new(DynamoIssueLedger::new(world.h.tables.clone()));
    let issuer = world.issuer(Arc::new(GatedIssue {
        inner: real,
        gate: gate.clone(),
    }));
    for _ in 0..rounds {
        world.sched.step(actor, "queue.receive()".into()).await;
        let messages = receive(&world.h, 10).await;
        world
            .sched
            .tell(format!("issuer: queue.receive() -> {} message(s)", messages.len()));
        if messages.is_empty() {
            continue;
        }
        // In flight until deleted: healing makes what is left visible at
        // once (its visibility timeout would, a second later).
        world
            .in_flight
            .lock()
            .unwrap()
            .extend(messages.iter().filter_map(|m| m.receipt_handle().map(str::to_owned)));
        let response = issuer::handle(&issuer, LambdaEvent::new(sqs_event(&messages), Default::default())).await;
        let failed: BTreeSet<String> = match response {
            Ok(r) => r.batch_item_failures.into_iter().map(|f| f.item_identifier).collect(),
            Err(_) => messages
                .iter()
                .filter_map(|m| m.message_id().map(str::to_owned))
                .collect(),
        };
        let dies = {
            let mut skip = world.skip_deletes.lock().unwrap();
            let dies = *skip > 0;
            *skip = skip.saturating_sub(1);
            dies
        };
        if dies {
            world
                .sched
                .tell("issuer: dies after its writes, before its deletes".into());
            world.sched.reached("issuer:died_before_delete");
            continue;
        }
        world.sched.step(actor, "queue.delete()".into()).await;
        for m in &messages {
            if !m.message_id().is_some_and(|id| failed.contains(id)) {
                delete(&world.h, m).await;
            }
        }
    }
    world.sched.finish(actor);
}

/// The reconciler's schedule: `passes` passes over the coupon; in a draw
/// world then the draw's instant (a step of its own, so presses and
/// faults interleave with it) and `draw_passes` more, which draw.
pub(super) async fn reconciler_actor(world: Arc<World>, actor: ActorId, passes: u32, draw_passes: u32) {
    let reconciler = gated_reconciler(&world, actor, "reconciler");
    let pass = || async {
        match reconciler.run().await {
            Ok(report) => world
                .sched
                .tell(format!("reconciler: pass -> {}", summary(&report.coupons))),
            Err(e) => world.sched.tell(format!("reconciler: pass failed: {e}")),
        }
    };
    for _ in 0..passes {
        pass().await;
    }
    if let Some(draw_at) = world.def.draw_at_ms.filter(|_| world.draws()) {
        world.sched.step(actor, "clock: the draw's instant".into()).await;
        if world.h.clock.now_ms() < draw_at {
            world.h.clock.set(draw_at);
        }
        world
            .sched
            .tell("the registrations are closed and the draw is due".into());
        for _ in 0..draw_passes {
            pass().await;
        }
    }
    world.sched.finish(actor);
}

/// The reconciler as deployed, its Redis, SQS and claim calls behind the
/// scheduler's gate as `who`.
fn gated_reconciler(world: &World, actor: ActorId, who: &str) -> Reconciler {
    let gate = world.gate(actor, who.into());
    world
        .h
        .reconciler_over(&world.h.queue_url, SEND_WINDOW_MS, |mut ports| {
            ports.repair = Arc::new(GatedRepair {
                inner: ports.repair,
                gate: gate.clone(),
            });
            ports.ledger = Arc::new(GatedLedger {
                inner: ports.ledger,
                gate: gate.clone(),
            });
            ports.redrive = Arc::new(GatedRedrive {
                inner: ports.redrive,
                gate: gate.clone(),
            });
            ports.claims = Arc::new(GatedClaims {
                inner: ports.claims,
                gate: gate.clone(),
            });
            ports
        })
}

/// The repair request's invocation after a node restarted from a snapshot:
/// the presses on the restarted shard answer BUSY and ask for a repair,
/// and the reconciler's invocation follows the coupon until the send
/// window has passed, then repairs it (the restart check: the shard
/// dropped or confirmed): a pass, then `passes` more, each after the window, among the schedule's other steps
/// and faults. Without it the check ran almost only in healing, outside
/// any interleaving: the in-schedule passes seldom saw the window pass.
pub(super) async fn repair_actor(world: Arc<World>, actor: ActorId, passes: u32) {
    let reconciler = gated_reconciler(&world, actor, "repair");
    let pass = || async {
        match reconciler.repair(std::slice::from_ref(&world.def.coupon_id)).await {
            Ok(report) => world
                .sched
                .tell(format!("repair: pass -> {}", summary(&report.coupons))),
            Err(e) => world.sched.tell(format!("repair: pass failed: {e}")),
        }
    };
    // The first pass opens the coupon's wait (or finds it open).
    pass().await;
    for _ in 0..passes {
        world.sched.step(actor, "clock: the send window passes".into()).await;
        world.h.clock.advance(SEND_WINDOW_MS);
        world
            .sched
            .tell(format!("repair: the send window ({SEND_WINDOW_MS} ms) passes"));
        pass().await;
    }
    world.sched.finish(actor);
}

pub(super) fn summary(coupons: &[CouponReport]) -> String {
    coupons
        .iter()
        .map(|c| {
            format!(
                "remaining {} issued {} pending {} rejected {} drift {} rebuilt {} rolled back {} waiting {}",
                c.remaining,
                c.issued,
                c.pending,
                c.rejected,
                c.drift,
                c.shards_rebuilt,
                c.shards_rolled_back,
                c.shards_waiting
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Up to `max` messages visible now, hidden for 1 s while in flight (a
/// fault takes one, so no other is hidden meanwhile).
pub(super) async fn receive(h: &Harness, max: i32) -> Vec<aws_sdk_sqs::types::Message> {
    h.stack
        .sqs
        .receive_message()
        .queue_url(&h.queue_url)
        .max_number_of_messages(max)
        .visibility_timeout(1)
        .wait_time_seconds(0)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .map(|out| out.messages.unwrap_or_default())
        .unwrap_or_default()
}

pub(super) async fn delete(h: &Harness, m: &aws_sdk_sqs::types::Message) {
    let _ = h
        .stack
        .sqs
        .delete_message()
        .queue_url(&h.queue_url)
        .receipt_handle(m.receipt_handle().unwrap_or_default())
        .send()
        .await;
}
