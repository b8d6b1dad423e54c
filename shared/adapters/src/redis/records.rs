//! The records the scripts store under a request id, the one reader and
//! writer of them on the Rust side (`lua/lib.lua` and `lua/grab.lua`,
//! `lua/settle.lua` write them in Lua):
//!
//! - `W|<grantId>|<ordinal>|<shard>|<grantedAtMs>`: the request won; its
//!   replay answers with the same grant.
//! - `B|<ordinal>|<epoch>|<ms>`: the request's claim is reserved on its
//!   home shard while it borrows a unit from another (settled by
//!   `lua/settle.lua`).
//! - `L|<refusal>` (`L|SOLD_OUT`, `L|ENDED`, `L|BETWEEN_WAVES|<ms>`, ...,
//!   the script's reply joined by `|`): the request lost after it began (a
//!   borrow that ended without a unit, a commit refused after the risk
//!   reservation), remembered so every copy and retry hears the same answer.
//!
//! As stored, each record ends `#<base>`: the incarnation of the shard's
//! state that wrote it, which only that state honours (`own_record()` in
//! `lua/lib.lua`). The scripts strip the stamp from what they answer, so
//! it never reaches this side; a rebuild's records are stamped as
//! `lua/restore_requests.lua` writes them.
//!
//! The domain sees only [`Recorded`] and [`GrantRecord`]; the text is this
//! store's format, as DynamoDB's items are `super::super::dynamodb`'s.

use coupon_domain::error::StoreError;
use coupon_domain::grab::ports::Recorded;
use coupon_domain::grant::GrantRecord;
use coupon_domain::ids::GrantId;
use coupon_domain::outcome::Rejection;

use super::conn::protocol;
use super::ledger::rejection;

/// A `W|...` record; `None` for anything else (another kind, or a
/// malformed one).
pub fn parse_win(record: &str) -> Option<GrantRecord> {
    let mut parts = record.split('|');
    if parts.next()? != "W" {
        return None;
    }
    let grant_id = GrantId::parse(parts.next()?).ok()?;
    let ordinal = parts.next()?.parse().ok()?;
    let shard = parts.next()?.parse().ok()?;
    let granted_at_ms = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some(GrantRecord {
        grant_id,
        ordinal,
        shard,
        granted_at_ms,
    })
}

/// The `W|...` record of a win, as the scripts store it (the inverse of
/// [`parse_win`]): what a rebuild restores under a request id.
pub fn encode_win(rec: &GrantRecord) -> String {
    format!("W|{}|{}|{}|{}", rec.grant_id, rec.ordinal, rec.shard, rec.granted_at_ms)
}

/// Any record a script answered with or stored, read for the domain;
/// `what` names the script or command in the error a foreign record makes.
pub(super) fn parse_recorded(what: &'static str, record: &str) -> Result<Recorded, StoreError> {
    if let Some(rec) = parse_win(record) {
        return Ok(Recorded::Won(rec));
    }
    if let Some(reply) = record.strip_prefix("L|") {
        // The refusal as the script answered it, its fields joined by `|`.
        let reply: Vec<String> = reply.split('|').map(str::to_owned).collect();
        return match rejection(what, &reply)? {
            Rejection::SoldOut => Ok(Recorded::SoldOut),
            // Never stored: no state decides nothing, and a commit takes
            // no token of the rate limit.
            Rejection::NotFound | Rejection::RateLimited { .. } => Err(protocol(
                what,
                format!("a stored loss that decides nothing: {record:?}"),
            )),
            reason => Ok(Recorded::Closed(reason)),
        };
    }
    if let Some(rest) = record.strip_prefix("B|") {
        // B|<ordinal>|<epoch>|<reservedAtMs>
        let mut fields = rest.split('|');
        let ordinal = fields.next().and_then(|o| o.parse().ok());
        let at_ms = fields.nth(1).and_then(|t| t.parse().ok());
        if let (Some(ordinal), Some(at_ms)) = (ordinal, at_ms) {
            return Ok(Recorded::Borrowing { ordinal, at_ms });
        }
    }
    Err(protocol(
        what,
        format!("unknown record kind {:?}", record.get(..2).unwrap_or("")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_win_record_round_trips() {
        let rec = parse_win("W|c1-0-7|2|0|1700000000000").unwrap();
        assert_eq!(rec.grant_id, "c1-0-7");
        assert_eq!(rec.ordinal, 2);
        assert_eq!(encode_win(&rec), "W|c1-0-7|2|0|1700000000000");
    }

    #[test]
    fn other_records_are_not_wins() {
        for bad in ["B|1|1|5", "L|SOLD_OUT", "W|x|y|0|1", "W||1|0|1", "W|a|1|0|1|extra"] {
            assert!(parse_win(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn every_kind_of_record_reads_as_what_it_stands_for() {
        assert!(matches!(parse_recorded("t", "W|c1-0-7|2|0|1"), Ok(Recorded::Won(_))));
        assert!(matches!(
            parse_recorded("t", "B|3|1|1700000000000"),
            Ok(Recorded::Borrowing {
                ordinal: 3,
                at_ms: 1_700_000_000_000
            })
        ));
        assert!(matches!(parse_recorded("t", "L|SOLD_OUT"), Ok(Recorded::SoldOut)));
        assert!(matches!(
            parse_recorded("t", "L|ENDED"),
            Ok(Recorded::Closed(Rejection::Ended))
        ));
        assert!(matches!(
            parse_recorded("t", "L|OFFLINE"),
            Ok(Recorded::Closed(Rejection::Offline))
        ));
        // A commit's refusal, stored with its details.
        assert!(matches!(
            parse_recorded("t", "L|BETWEEN_WAVES|1700000000000"),
            Ok(Recorded::Closed(Rejection::BetweenWaves {
                next_wave_at_ms: 1_700_000_000_000
            }))
        ));
        assert!(matches!(
            parse_recorded("t", "L|NOT_ELIGIBLE|3"),
            Ok(Recorded::Closed(Rejection::NotEligible { min_level: 3 }))
        ));
        assert!(matches!(
            parse_recorded("t", "L|ALREADY_CLAIMED"),
            Ok(Recorded::Closed(Rejection::AlreadyClaimed))
        ));
        // What decides nothing is never a stored loss.
        assert!(parse_recorded("t", "L|NOT_FOUND").is_err());
        assert!(parse_recorded("t", "L|RATE_LIMITED|5").is_err());
        assert!(parse_recorded("t", "L|NOT_ELIGIBLE|x").is_err());
        assert!(parse_recorded("t", "X|1").is_err());
        assert!(parse_recorded("t", "B|x").is_err());
    }
}
