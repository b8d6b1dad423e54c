//! Query parameters the list routes (the wallet, the coupon center) read
//! alike: the page size, refused with one message wherever it is wrong.

use crate::render::Reply;

/// The `limit` parameter of a list route: `default` when absent, else an
/// integer from 1 to `max`; anything else is a 400 that names it (and never
/// echoes the input).
pub fn page_limit(raw: Option<&str>, default: usize, max: usize) -> Result<usize, Reply> {
    match raw {
        None => Ok(default),
        Some(raw) => raw
            .parse()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| Reply::invalid(format!("limit must be an integer from 1 to {max}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_a_whole_number_within_the_route_s_bound() {
        assert_eq!(page_limit(None, 10, 50).ok(), Some(10));
        assert_eq!(page_limit(Some("50"), 10, 50).ok(), Some(50));
        for bad in ["0", "51", "-1", "1.5", "ten", ""] {
            assert!(page_limit(Some(bad), 10, 50).is_err(), "{bad:?}");
        }
    }
}
