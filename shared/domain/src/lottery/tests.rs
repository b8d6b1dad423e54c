use super::*;

fn seed(n: u8) -> Seed {
    Seed::from_bytes([n; 32])
}

fn users(n: usize) -> Vec<UserId> {
    (0..n).map(|i| UserId::parse(&format!("u{i}")).unwrap()).collect()
}

#[test]
fn the_commitment_is_the_sha256_of_the_seed_and_the_seed_round_trips_through_hex() {
    // SHA-256 of 32 zero bytes.
    assert_eq!(
        seed(0).commitment(),
        "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
    );
    let s = seed(7);
    assert_eq!(Seed::from_hex(&s.to_hex()), Some(s.clone()));
    assert_eq!(Seed::from_hex(&s.to_hex().to_uppercase()), Some(s));
    for bad in ["", "00", &"g".repeat(64), &"0".repeat(63)] {
        assert!(Seed::from_hex(bad).is_none(), "{bad:?}");
    }
    assert!(
        !format!("{:?}", seed(9)).contains(&seed(9).to_hex()),
        "a seed is never printed"
    );
}

#[test]
fn a_rank_is_hmac_sha256_of_the_user_id_keyed_by_the_seed() {
    // HMAC-SHA256 with a 32-byte key of 0x0b over "Hi-There", as Python's
    // hmac module computes it: what a verifier in any language gets.
    let key = Seed::from_bytes([0x0b; 32]);
    let user = UserId::parse("Hi-There").unwrap();
    let a = rank(&key, &user);
    assert_eq!(
        a.to_hex(),
        "7c7742dd7438d1d60436b7c329caa5dadb14b20b10df648ba897b5def4e2664c"
    );
    assert_eq!(a, rank(&key, &user), "deterministic");
    assert_ne!(a, rank(&seed(1), &user), "another seed, another rank");
    assert_ne!(
        a,
        rank(&key, &UserId::parse("Hi-there").unwrap()),
        "another user, another rank"
    );
}

#[test]
fn the_draw_takes_the_smallest_ranks_up_to_the_places_whatever_the_order_of_entries() {
    let s = seed(3);
    let all = users(1_000);
    let drawn = draw(&s, all.clone(), 10);
    assert_eq!((drawn.winners.len(), drawn.entries), (10, 1_000));
    let mut by_rank: Vec<(Rank, UserId)> = all.iter().map(|u| (rank(&s, u), u.clone())).collect();
    by_rank.sort();
    let expected: Vec<UserId> = by_rank.iter().take(10).map(|(_, u)| u.clone()).collect();
    assert_eq!(drawn.winners, expected);
    assert_eq!(drawn.threshold, Some(by_rank[9].0));
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(draw(&s, reversed, 10), drawn, "the order of entries changes nothing");
    for u in &all {
        assert_eq!(won(&s, u, drawn.threshold.as_ref()), drawn.winners.contains(u), "{u}");
    }
}

#[test]
fn fewer_entries_than_places_all_win_and_repeated_entries_count_once() {
    let s = seed(4);
    let mut entries = users(3);
    entries.extend(users(3));
    let drawn = draw(&s, entries, 10);
    assert_eq!((drawn.winners.len(), drawn.entries), (3, 3));
    let none = draw(&s, Vec::new(), 10);
    assert_eq!((none.winners.len(), none.threshold), (0, None));
    assert!(!won(&s, &users(1)[0], None));
}

#[test]
fn every_entry_is_as_likely_to_win() {
    // 200 draws with different seeds over 20 users and 5 places: each user
    // wins about 50 times (binomial, sd ~6); none is far off.
    let all = users(20);
    let mut wins = std::collections::HashMap::new();
    for n in 0..200u16 {
        let mut bytes = [0u8; 32];
        bytes[..2].copy_from_slice(&n.to_be_bytes());
        for w in draw(&Seed::from_bytes(bytes), all.clone(), 5).winners {
            *wins.entry(w).or_insert(0) += 1;
        }
    }
    for u in &all {
        let w = wins.get(u).copied().unwrap_or(0);
        assert!((20..=80).contains(&w), "{u} won {w} of 200");
    }
}

#[test]
fn a_verification_agrees_with_the_draw_s_winners_and_names_every_difference() {
    let s = seed(5);
    let all = users(50);
    let winners = draw(&s, all.clone(), 7).winners;
    assert!(verify(&s, all.clone(), 7, winners.clone()).agrees());
    let mut wrong = winners.clone();
    let swapped = wrong.pop().unwrap();
    let outsider = all.iter().find(|u| !winners.contains(u)).unwrap().clone();
    wrong.push(outsider.clone());
    let verdict = verify(&s, all.clone(), 7, wrong);
    assert!(!verdict.agrees());
    assert_eq!((verdict.missing, verdict.extra), (vec![swapped], vec![outsider]));
    assert_eq!(verdict.commitment, s.commitment());
    assert!(
        !verify(&seed(6), all, 7, winners).agrees(),
        "another seed, other winners"
    );
}
