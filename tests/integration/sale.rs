//! The main job's path at small scale: a coupon, hundreds of users through
//! the HTTP handler, issuance through SQS events, a final reconciliation.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use coupon_domain::reconcile::ports::DurableFacts;
use futures::stream::{self, StreamExt};

use crate::support::{send, Event, Harness, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_small_flash_sale_issues_every_unit_once_and_the_books_balance() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let mut def = h.coupon(60);
    def.shards = 3;
    let coupon = h.create(&def).await;
    let app = Arc::clone(&h.app);
    let presses: Vec<(String, String)> = (0..300)
        .flat_map(|i| {
            [
                (format!("buyer-{i}"), "p1".to_owned()),
                (format!("buyer-{i}"), "p1".to_owned()),
            ]
        })
        .collect();
    let results: Vec<(String, crate::support::Resp)> = stream::iter(presses)
        .map(|(user, request)| {
            let app = Arc::clone(&app);
            let event = Event::grab(coupon.as_str(), &user, &request).build();
            tokio::spawn(async move { (user, send(&app, event).await) })
        })
        .buffer_unordered(64)
        .map(|r| r.unwrap())
        .collect()
        .await;
    let mut winners: HashMap<String, HashSet<String>> = HashMap::new();
    for (user, resp) in &results {
        if let Some(grant) = resp.grant_id() {
            winners.entry(user.clone()).or_default().insert(grant);
        }
    }
    assert_eq!(winners.len(), 60);
    assert!(winners.values().all(|g| g.len() == 1));

    h.pump().await;
    let report = h.reconcile(&def).await;
    assert_eq!(
        (
            report.issued,
            report.pending,
            report.rejected,
            report.remaining,
            report.drift
        ),
        (60, 0, 0, 0, 0)
    );
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 60);
    for (user, grants) in &winners {
        let held = h.coupons_of(user).await;
        assert_eq!(held.len(), 1, "{user}");
        assert!(
            grants.contains(&held[0].grant_id.to_string()),
            "{user} holds the grant they won"
        );
    }
}
