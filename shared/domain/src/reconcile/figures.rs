//! The reconciler's arithmetic, kept pure so it can be tested alone: the
//! stock equation and its causes, what a rebuild may restore, and how that
//! is split over the lost shards.

use super::ports::ShardUnits;
use super::report::CouponReport;

/// Completes `r.drift` and `r.causes` from the other terms:
/// `drift = total - (remaining + issued + pending + rejected - overgranted)`.
///
/// Positive drift is stock nobody holds any more (grants lost with Redis
/// before they reached SQS or DynamoDB); negative drift is units granted
/// twice after a data loss, which the DynamoDB cap keeps from being issued.
pub fn balance(r: &mut CouponReport) {
    let durable = (r.issued + r.pending + r.rejected).saturating_sub(r.overgranted);
    let accounted = r.remaining.saturating_add(i64::try_from(durable).unwrap_or(i64::MAX));
    r.drift = i64::try_from(r.total).unwrap_or(i64::MAX).saturating_sub(accounted);
    if r.drift > 0 {
        r.causes.push(format!(
            "{} unit(s) unaccounted: grants lost with Redis data before they reached SQS or DynamoDB",
            r.drift
        ));
    } else if r.drift < 0 {
        r.causes.push(format!(
            "{} unit(s) granted twice after Redis data loss (in flight during the rebuild); \
             the DynamoDB cap keeps issued <= total",
            -r.drift
        ));
    }
}

/// What lost shards may hand out again: never more than what no durable
/// record (`issued`, `rejected`), no grant on its way (`pending`) and no
/// surviving shard (`held`) accounts for. A negative `held` counts as 0.
pub fn restorable(total: u64, held: i64, r: &CouponReport) -> u64 {
    let accounted = (held.max(0) as u64)
        .saturating_add(r.issued)
        .saturating_add(r.rejected)
        .saturating_add(r.pending);
    total.saturating_sub(accounted)
}

/// `units` over lost shards that hold back `held` units each for waves to
/// come: each first gets what it holds back (so no later wave sells early
/// from a rebuilt shard), the rest split evenly. Without waves (`held` all
/// 0) it is [`split`].
pub fn split_holding_back(units: u64, held: &[u64]) -> Vec<u64> {
    let mut left = units;
    let mut shares: Vec<u64> = held
        .iter()
        .map(|&h| {
            let take = h.min(left);
            left -= take;
            take
        })
        .collect();
    for (share, extra) in shares.iter_mut().zip(split(left, held.len())) {
        *share += extra;
    }
    shares
}

/// `units` over lost shards as stock and units written off. Each first
/// gets what it holds back for later waves (`held`, [`split_holding_back`]).
/// With rollover (`wave_left` all `None`) the rest is stock, split evenly.
/// Without it, each then gets what the wave out now has left on it
/// (`wave_left`), and what remains belongs to waves gone by: written off
/// (expired), split evenly. Capping each shard after an even split would
/// write off a shard's live units while another, which had sold its share,
/// wrote off what it could not sell.
pub fn split_rebuild(units: u64, held: &[u64], wave_left: &[Option<u64>]) -> Vec<ShardUnits> {
    if wave_left.iter().all(Option::is_none) {
        return split_holding_back(units, held)
            .into_iter()
            .map(|stock| ShardUnits { stock, expired: 0 })
            .collect();
    }
    let mut left = units;
    let mut take = |want: u64| {
        let got = want.min(left);
        left -= got;
        got
    };
    let stock: Vec<u64> = held.iter().map(|&h| take(h)).collect();
    let stock: Vec<u64> = stock
        .into_iter()
        .zip(wave_left)
        .map(|(s, l)| s + take(l.unwrap_or(0)))
        .collect();
    stock
        .into_iter()
        .zip(split(left, held.len()))
        .map(|(stock, expired)| ShardUnits { stock, expired })
        .collect()
}

/// `units` split over `shards` as evenly as possible, the remainder going to
/// the first ones; the parts always add up to `units`.
pub fn split(units: u64, shards: usize) -> Vec<u64> {
    (0..shards as u64)
        .map(|i| crate::coupon::even_share(units, shards as u64, i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(total: u64, remaining: i64, issued: u64, pending: u64, rejected: u64) -> CouponReport {
        CouponReport {
            total,
            remaining,
            issued,
            pending,
            rejected,
            ..CouponReport::default()
        }
    }

    #[test]
    fn a_rebuild_gives_each_lost_shard_what_its_waves_hold_back_before_the_rest() {
        assert_eq!(split_holding_back(2, &[0, 0, 1, 1]), vec![0, 0, 1, 1]);
        assert_eq!(split_holding_back(5, &[0, 2, 0]), vec![1, 3, 1]);
        assert_eq!(split_holding_back(1, &[1, 1]), vec![1, 0]);
        assert_eq!(split_holding_back(4, &[0, 0]), split(4, 2));
        assert_eq!(split_holding_back(7, &[2, 0, 1]).iter().sum::<u64>(), 7);
    }

    #[test]
    fn without_rollover_a_rebuild_gives_each_lost_shard_what_it_holds_back_and_what_its_wave_has_left() {
        let units = |u: u64, h: &[u64], l: &[Option<u64>]| -> Vec<(u64, u64)> {
            split_rebuild(u, h, l).iter().map(|s| (s.stock, s.expired)).collect()
        };
        assert_eq!(units(5, &[0, 0], &[None, None]), vec![(3, 0), (2, 0)]);
        assert_eq!(units(5, &[0], &[Some(2)]), vec![(2, 3)]);
        assert_eq!(units(7, &[4], &[Some(2)]), vec![(6, 1)]);
        assert_eq!(units(3, &[4], &[Some(2)]), vec![(3, 0)], "never more than there is");
        // One shard sold its wave's 50, the other none; 20 of an earlier
        // wave are left over: the one with 50 to sell keeps them all.
        assert_eq!(units(170, &[50, 50], &[Some(0), Some(50)]), vec![(50, 10), (100, 10)]);
    }

    #[test]
    fn a_balanced_coupon_has_no_drift_and_no_cause() {
        let mut r = report(100, 40, 50, 7, 3);
        balance(&mut r);
        assert_eq!(r.drift, 0);
        assert!(r.causes.is_empty());
    }

    #[test]
    fn lost_grants_are_positive_drift_with_their_cause() {
        let mut r = report(100, 40, 50, 0, 0);
        balance(&mut r);
        assert_eq!(r.drift, 10);
        assert!(r.causes[0].starts_with("10 unit(s) unaccounted"));
    }

    #[test]
    fn units_granted_twice_are_negative_drift() {
        let mut r = report(10, 0, 10, 2, 0);
        balance(&mut r);
        assert_eq!(r.drift, -2);
        assert!(r.causes[0].contains("granted twice"));
    }

    #[test]
    fn overgranted_rejections_are_not_units_of_stock() {
        let mut r = report(10, 0, 10, 0, 3);
        r.overgranted = 3;
        balance(&mut r);
        assert_eq!(r.drift, 0);
    }

    #[test]
    fn a_rebuild_restores_only_what_nothing_accounts_for() {
        let r = report(100, 0, 30, 5, 2);
        assert_eq!(restorable(100, 20, &r), 43);
        assert_eq!(restorable(100, -4, &r), 63, "a negative surviving stock counts as none");
        let everything_issued = report(100, 0, 100, 5, 0);
        assert_eq!(restorable(100, 0, &everything_issued), 0, "never below zero");
    }

    #[test]
    fn a_split_is_even_and_adds_up() {
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(split(0, 2), vec![0, 0]);
        for (units, shards) in [(7u64, 1usize), (1_000_003, 16), (5, 5)] {
            assert_eq!(split(units, shards).iter().sum::<u64>(), units);
        }
    }
}
