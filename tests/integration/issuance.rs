//! The issuer: grants become exactly one coupon each, whatever SQS does.

use std::sync::Arc;

use async_trait::async_trait;
use coupon_adapters::dynamodb::DynamoIssueLedger;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::grant::Grant;
use coupon_domain::ids::{CouponId, GrantId};
use coupon_domain::issuance::IssueLedger;
use coupon_domain::issuance::{IssueError, IssueOutcome};
use coupon_domain::reconcile::ports::DurableFacts;

use aws_sdk_sqs::types::Message;

use crate::support::Harness;

/// `m` as SQS would deliver it again, under another message id.
fn redelivered(m: &Message, message_id: &str, body: Option<&str>) -> Message {
    Message::builder()
        .message_id(message_id)
        .set_receipt_handle(m.receipt_handle().map(str::to_owned))
        .body(body.or(m.body()).unwrap_or_default())
        .build()
}

/// The real ledger, except that writes for one grant are throttled, as
/// DynamoDB does under a hot partition.
struct ThrottleOne {
    inner: DynamoIssueLedger,
    grant_id: GrantId,
}

#[async_trait]
impl IssueLedger for ThrottleOne {
    async fn issue(&self, grant: &Grant, def: &CouponDefinition, now: i64) -> Result<IssueOutcome, IssueError> {
        if grant.grant_id == self.grant_id {
            return Err(IssueError::Throttled("ProvisionedThroughputExceededException".into()));
        }
        self.inner.issue(grant, def, now).await
    }
    async fn raise_high_water(
        &self,
        coupon: &coupon_domain::ids::CouponId,
        shard: u32,
        seq: u64,
    ) -> Result<(), IssueError> {
        self.inner.raise_high_water(coupon, shard, seq).await
    }
}

#[tokio::test]
async fn a_grant_delivered_three_times_makes_one_coupon() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "dup-user", "r1").await.code(), "SUCCESS");
    let messages = h.receive().await;
    assert_eq!(messages.len(), 1);
    // The same message three times in one batch (distinct message ids, as
    // SQS gives a duplicate), then once more in a later batch.
    let mut copies = Vec::new();
    for i in 0..3 {
        copies.push(redelivered(&messages[0], &format!("copy-{i}"), None));
    }
    let issuer = h.issuer();
    assert!(h.deliver(&issuer, &copies).await.is_empty());
    assert!(h.deliver(&issuer, &messages).await.is_empty());
    let coupons = h.coupons_of("dup-user").await;
    assert_eq!(coupons.len(), 1);
    assert_eq!(coupons[0].coupon_id, coupon);
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 1, "the counter moved once");
    assert_eq!(h.metrics.total("CouponIssued"), 1);
    assert_eq!(h.metrics.total("DuplicateDelivery"), 3);
}

#[tokio::test]
async fn a_batch_with_a_poison_message_and_a_throttled_write_fails_exactly_those_two() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    for user in ["ok-user", "throttled-user"] {
        assert_eq!(h.grab(&coupon, user, "r").await.code(), "SUCCESS");
    }
    let mut messages = h.receive().await;
    assert_eq!(messages.len(), 2);
    let throttled: Grant = messages
        .iter()
        .map(|m| serde_json::from_str::<Grant>(m.body().unwrap()).unwrap())
        .find(|g| g.user_id.as_str() == "throttled-user")
        .unwrap();
    let throttled_message = messages
        .iter()
        .find(|m| m.body().unwrap().contains("throttled-user"))
        .unwrap()
        .message_id()
        .unwrap()
        .to_owned();
    let poison = redelivered(&messages[0], "poison-1", Some("{\"not\":\"a grant\"}"));
    messages.push(poison);
    let issuer = h.issuer_with(Arc::new(ThrottleOne {
        inner: h.issue_ledger(),
        grant_id: throttled.grant_id.clone(),
    }));
    let mut failed = h.deliver(&issuer, &messages).await;
    failed.sort();
    let mut expected = vec!["poison-1".to_owned(), throttled_message];
    expected.sort();
    assert_eq!(failed, expected);
    assert_eq!(h.coupons_of("ok-user").await.len(), 1);
    assert!(h.coupons_of("throttled-user").await.is_empty());
}

#[tokio::test]
async fn a_batch_with_a_record_without_message_id_fails_as_a_whole() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "u", "r").await.code(), "SUCCESS");
    let messages = h.receive().await;
    let mut event = crate::support::sqs_event(&messages);
    event.records[0].message_id = None;
    let result = issuer::handle(&h.issuer(), lambda_runtime::LambdaEvent::new(event, Default::default())).await;
    assert!(result.is_err());
    assert!(
        h.coupons_of("u").await.is_empty(),
        "nothing issued from an unanswerable batch"
    );
}

#[tokio::test]
async fn grants_beyond_the_durable_cap_are_rejected_and_counted_never_issued() {
    let h = Harness::new().await;
    let def = h.coupon(2);
    let coupon = h.create(&def).await;
    let issuer = h.issuer();
    // Grants Redis should never have made (as after a data loss): four
    // grants for a coupon of two.
    for i in 0..4 {
        let grant = Grant {
            grant_id: GrantId::new(&coupon, 0, 100 + i),
            coupon_id: coupon.clone(),
            user_id: coupon_domain::ids::UserId::parse(&format!("cap-{i}")).unwrap(),
            ordinal: 1,
            request_id: coupon_domain::ids::RequestId::parse("r").unwrap(),
            shard: 0,
            granted_at_ms: 0,
        };
        issuer.service.issue(&grant, 0).await.unwrap();
    }
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 2);
    let rejected = h.facts().rejections(&coupon).await.unwrap();
    assert_eq!(rejected.len(), 2);
    assert!(rejected.iter().all(|r| r.reason.as_str() == "CAP_REACHED"));
    assert_eq!(h.metrics.total("GrantRejected"), 2);
}

/// Delivers `first` (as `message` carries it) and `second`, another grant
/// for the same claim, in one batch: the issuer issues one and rejects the
/// other as ORDINAL_TAKEN (issued concurrently: either may take the key).
/// The rejected grant, then the issued one.
async fn issue_both<'g>(
    h: &Harness,
    coupon: &CouponId,
    message: &Message,
    first: &'g Grant,
    second: &'g Grant,
) -> (&'g Grant, &'g Grant) {
    let body = serde_json::to_string(second).unwrap();
    let copy = redelivered(message, "second", Some(&body));
    assert!(h.deliver(&h.issuer(), &[message.clone(), copy]).await.is_empty());
    let rejections = h.facts().rejections(coupon).await.unwrap();
    assert_eq!(rejections.len(), 1, "ORDINAL_TAKEN");
    if rejections[0].grant_id == second.grant_id {
        (second, first)
    } else {
        (first, second)
    }
}

/// Two grants for one claim (one user, one ordinal: a borrow resumed after
/// a refill can make a second one): the issuer issues the first and
/// rejects the second as ORDINAL_TAKEN, and the reconciler must know both
/// as settled, or it re-drives one of them forever.
#[tokio::test]
async fn two_grants_for_one_claim_are_both_known_to_the_durable_store() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "twice", "r1").await.code(), "SUCCESS");
    let messages = h.receive().await;
    let first: Grant = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    let second = Grant {
        grant_id: GrantId::new(&coupon, 0, 999),
        ..first.clone()
    };
    let (_, issued) = issue_both(&h, &coupon, &messages[0], &first, &second).await;

    let known = h.facts().issued_grants(&[first.clone(), second.clone()]).await.unwrap();
    assert!(known.contains(&issued.grant_id), "{known:?}");
    let report = h.reconcile(&def).await;
    assert_eq!((report.pending, report.redriven), (0, 0), "{report:?}");

    // The issued grant's id minted again for another request of the same
    // user and ordinal (a shard a failover rolled back, the press decided
    // afresh) is not that grant: never taken for issued.
    let minted_again = Grant {
        request_id: coupon_domain::ids::RequestId::parse("r-again").unwrap(),
        ..issued.clone()
    };
    let known = h
        .facts()
        .issued_grants(std::slice::from_ref(&minted_again))
        .await
        .unwrap();
    assert!(known.is_empty(), "{known:?}");
}

/// A grant's claim is written once, and again only identically: the same
/// id for another grant (a shard that rolled back and minted it again) is
/// refused as such, and holds up none of the other claims beside it.
#[tokio::test]
async fn a_claim_is_refused_for_another_grant_under_a_claimed_id_and_holds_up_no_other() {
    use coupon_adapters::dynamodb::DynamoClaims;
    use coupon_domain::grab::ports::{ClaimError, GrantClaims};

    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "first", "r1").await.code(), "SUCCESS");
    let first: Grant = serde_json::from_str(h.receive().await[0].body().unwrap()).unwrap();
    let again = Grant {
        user_id: coupon_domain::ids::UserId::parse("someone-else").unwrap(),
        ..first.clone()
    };
    let beside = Grant {
        grant_id: GrantId::new(&coupon, 0, 999),
        ..first.clone()
    };
    let claims = DynamoClaims::new(h.tables.clone());

    let answers = claims.claim(&[first.clone(), again, beside.clone()], 5_000).await;

    assert!(answers[0].is_ok(), "the same claim again: {:?}", answers[0]);
    assert!(
        matches!(&answers[1], Err(ClaimError::Reminted(id)) if *id == first.grant_id),
        "{:?}",
        answers[1]
    );
    assert!(answers[2].is_ok(), "{:?}", answers[2]);
    let mut stored = h.facts().claims(&coupon).await.unwrap();
    let mut expected = vec![first, beside];
    for list in [&mut stored, &mut expected] {
        list.sort_by(|a, b| a.grant_id.as_str().cmp(b.grant_id.as_str()));
    }
    assert_eq!(stored, expected, "the first grant's claim stands");
}

/// A win a restarted shard remembers is replayed before the check only on
/// `holds`: its own claim (not another grant under its id) and no
/// rejection of it, which a rebuild would neither count nor answer for.
#[tokio::test]
async fn a_grant_is_held_only_when_claimed_as_itself_and_not_rejected() {
    use coupon_adapters::dynamodb::DynamoClaims;
    use coupon_domain::grab::ports::GrantClaims;

    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "held", "r1").await.code(), "SUCCESS");
    let messages = h.receive().await;
    let first: Grant = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    let claims = DynamoClaims::new(h.tables.clone());
    let other_user = Grant {
        user_id: coupon_domain::ids::UserId::parse("someone-else").unwrap(),
        ..first.clone()
    };
    let unclaimed = Grant {
        grant_id: GrantId::new(&coupon, 0, 998),
        ..first.clone()
    };
    assert!(claims.holds(&first).await.unwrap());
    assert!(!claims.holds(&other_user).await.unwrap());
    assert!(!claims.holds(&unclaimed).await.unwrap());

    // A second grant for the same claim, claimed too, and rejected by the
    // issuer as ORDINAL_TAKEN: its claim stays, and vouches for nothing.
    let second = Grant {
        grant_id: GrantId::new(&coupon, 0, 999),
        ..first.clone()
    };
    assert!(claims.claim(std::slice::from_ref(&second), 5_000).await[0].is_ok());
    assert!(claims.holds(&second).await.unwrap());
    let (refused, issued) = issue_both(&h, &coupon, &messages[0], &first, &second).await;
    assert!(!claims.holds(refused).await.unwrap(), "a rejected grant is not held");
    assert!(claims.holds(issued).await.unwrap());
}

/// On a cache whose failover may lose a win its user was told
/// (`CACHE_DURABILITY=none`), a claim also holds its user's ordinal and its
/// request: a second grant for the same user and ordinal (a home shard that
/// rolled back past the first and counted its user one claim short), or
/// for the same request (its record lost), is refused as such, with
/// nothing of it written, until the issuer rejects the first; then the
/// ordinal is the second's. The same grant decided again a moment later
/// (the same id, user, ordinal and request) is the same claim.
#[tokio::test]
async fn a_claim_guarding_ordinals_refuses_a_second_grant_for_a_users_ordinal_or_request_until_the_first_is_rejected() {
    use coupon_adapters::dynamodb::DynamoClaims;
    use coupon_domain::grab::ports::{ClaimError, GrantClaims};

    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "told", "r1").await.code(), "SUCCESS");
    let messages = h.receive().await;
    let first: Grant = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    let claims = DynamoClaims::new(h.tables.clone()).guarding_ordinals(true);
    let second = Grant {
        grant_id: GrantId::new(&coupon, 0, 999),
        request_id: coupon_domain::ids::RequestId::parse("r2").unwrap(),
        ..first.clone()
    };
    let next_ordinal = Grant {
        grant_id: GrantId::new(&coupon, 0, 998),
        ordinal: first.ordinal + 1,
        ..second.clone()
    };

    // The same press decided afresh after a failover took its win: the
    // same id, user, ordinal and request, a moment later. The same grant.
    let decided_again = Grant {
        granted_at_ms: first.granted_at_ms + 250,
        ..first.clone()
    };
    // The same request winning another ordinal (its record was lost): a
    // second coupon for one press.
    let same_request = Grant {
        grant_id: GrantId::new(&coupon, 0, 996),
        ordinal: first.ordinal + 2,
        ..first.clone()
    };

    let answers = claims
        .claim(
            &[
                first.clone(),
                second.clone(),
                next_ordinal,
                decided_again,
                same_request.clone(),
            ],
            5_000,
        )
        .await;

    assert!(answers[0].is_ok(), "the grab's own claim again: {:?}", answers[0]);
    assert!(
        matches!(&answers[1], Err(ClaimError::OrdinalClaimed(id)) if *id == second.grant_id),
        "{:?}",
        answers[1]
    );
    assert!(answers[2].is_ok(), "another ordinal of the same user: {:?}", answers[2]);
    assert!(answers[3].is_ok(), "the same grant decided again: {:?}", answers[3]);
    assert!(
        matches!(&answers[4], Err(ClaimError::RequestClaimed(id)) if *id == same_request.grant_id),
        "{:?}",
        answers[4]
    );
    assert!(
        !claims.holds(&second).await.unwrap(),
        "nothing of the refused claim is written"
    );

    // The first grant rejected by the issuer (its ordinal taken by a
    // second claimed without the guard, issued first): the ordinal is free.
    let unguarded = DynamoClaims::new(h.tables.clone());
    assert!(unguarded.claim(std::slice::from_ref(&second), 5_000).await[0].is_ok());
    let (refused, issued) = issue_both(&h, &coupon, &messages[0], &first, &second).await;
    let (refused, issued) = (refused.clone(), issued.clone());
    let third = Grant {
        grant_id: GrantId::new(&coupon, 0, 997),
        request_id: coupon_domain::ids::RequestId::parse("r3").unwrap(),
        ..first.clone()
    };
    let answer = claims.claim(std::slice::from_ref(&third), 5_000).await.remove(0);
    if refused.grant_id == first.grant_id {
        // The guard names the first, which counts nowhere now: taken over.
        assert!(answer.is_ok(), "{answer:?}");
    } else {
        assert!(
            matches!(answer, Err(ClaimError::OrdinalClaimed(_))),
            "{answer:?} (issued {})",
            issued.grant_id
        );
    }
}
