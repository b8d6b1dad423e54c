//! The explorer's nodes: each shard of the sale on a node group of its own
//! (the template's shape at its most adverse: a borrow's home and donor on
//! different nodes), each with a replica and the snapshots it saves.
//!
//! One primary holds every shard (its real replicas, in sync, acknowledge
//! every `WAIT` as deployed with `REDIS_REPLICA_ACKS=1`, and the fence
//! script runs before each), so what a shard's node would have kept is an
//! image of the shard's keys (`DUMP` with their TTLs):
//!
//! - **The replica** holds what a replica acknowledged: the shard's image
//!   is taken inside the step of every `WAIT` that answered (the ledger's
//!   `replicated`, at the grab's send and the reconciler's re-drive), and
//!   nothing after it, the most a replica may lag by. A *failover*
//!   restores that image: the promoted replica continues the replication
//!   history (its `run` stamp is the current one), so the shard sells at
//!   once, as `lib.lua`'s `verified()` lets a promoted replica do.
//! - **A snapshot** is an image saved at a step the seed picks. A
//!   *restart* restores it on a new replication history (its `run` stamp
//!   no longer matches and its `suspect` stamp is gone, as after a real
//!   restart): the shard sells nothing until the reconciler's check.
//!
//! On the Serverless stand-in (`REDIS_ENGINE=valkey-serverless`) nothing
//! waits for a replica (`REDIS_REPLICA_ACKS` 0, `CACHE_DURABILITY=none`):
//! replication is asynchronous, so the replica holds the shard as it was
//! when it last *caught up*, a step the seed picks (heal.rs's
//! `node_fault`), whatever any caller was told since. A failover restores
//! that image on the same history, as before. The node faults draw no
//! restart there (a failover instead): Serverless replaces a failed node
//! from its replicas, not from a snapshot, and tells no restart (`INFO`
//! there does not document its replication history; lib.lua's
//! `history()`). The stale-snapshot stream's restarts (a snapshot from
//! before a loss brought back) still come, on a new history the stand-in
//! tells: a fault outside Serverless's model, judged by the restart check.
//!
//! Not modelled: a node holding several shards (one `WAIT` acknowledging
//! them together makes a failover lose less, never more), the risk keys'
//! nodes (users', devices' limits are not rolled back), a replica ahead of
//! its last acknowledgement (it loses less).

use std::collections::BTreeMap;
use std::sync::Mutex;

use coupon_adapters::redis::Redis;
use coupon_domain::ids::CouponId;

/// A shard's keys at one instant: `(key, ms to live or 0, DUMP payload)`.
#[derive(Debug, Clone, Default)]
pub(super) struct Image(Vec<(String, i64, Vec<u8>)>);

impl Image {
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// The replicas and snapshots of one sale's shards.
pub(super) struct Nodes {
    redis: Redis,
    coupon: CouponId,
    /// What each shard's replica holds (its image at the last `WAIT`).
    replica: Mutex<BTreeMap<u32, Image>>,
    /// Each shard's last saved snapshot.
    saved: Mutex<BTreeMap<u32, Image>>,
    /// How often each shard's node lost its data, and how often it had
    /// when its last snapshot was saved: a snapshot older than a loss
    /// holds a state the rebuild that followed the loss superseded.
    losses: Mutex<BTreeMap<u32, (u32, u32)>>,
    /// Replication is asynchronous and nothing waits for it (the
    /// Serverless stand-in): a `WAIT` never updates the replica, a catch-up
    /// does ([`Self::caught_up`]).
    pub(super) asynchronous: bool,
}

impl Nodes {
    /// The sale's nodes, their replicas and snapshots holding the shards
    /// as they are now (the sale was created and acknowledged).
    pub(super) async fn new(redis: Redis, coupon: CouponId, shards: u32, asynchronous: bool) -> Self {
        let nodes = Self {
            redis,
            coupon,
            replica: Mutex::new(BTreeMap::new()),
            saved: Mutex::new(BTreeMap::new()),
            losses: Mutex::new(BTreeMap::new()),
            asynchronous,
        };
        for shard in 0..shards {
            let image = nodes.image(shard).await;
            nodes.replica.lock().unwrap().insert(shard, image.clone());
            nodes.saved.lock().unwrap().insert(shard, image);
        }
        nodes
    }

    fn tag(&self, shard: u32) -> String {
        let meta = self.redis.keys().shard(&self.coupon, shard).meta();
        meta.trim_end_matches(":meta").to_owned()
    }

    async fn keys(&self, shard: u32) -> Vec<String> {
        let mut conn = self.redis.connection();
        crate::support::keys_matching(&mut conn, &format!("{}*", self.tag(shard))).await
    }

    /// The shard's keys now.
    async fn image(&self, shard: u32) -> Image {
        let mut conn = self.redis.connection();
        let mut keys = self.keys(shard).await;
        keys.sort();
        let mut image = Vec::with_capacity(keys.len());
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.unwrap_or(-2);
            let dump: Option<Vec<u8>> = redis::cmd("DUMP")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap_or(None);
            if let (Some(dump), true) = (dump, ttl != -2) {
                image.push((key, ttl.max(0), dump));
            }
        }
        Image(image)
    }

    /// A replica acknowledged every write on `shard` so far (a `WAIT`
    /// answered): it holds the shard as it is now.
    pub(super) async fn acknowledged(&self, coupon: &CouponId, shard: u32) {
        if coupon != &self.coupon || self.asynchronous {
            return;
        }
        self.caught_up(shard).await;
    }

    /// The shard's replica caught up with its primary (asynchronous
    /// replication, at a step the seed picks): it holds the shard as it
    /// is now.
    pub(super) async fn caught_up(&self, shard: u32) -> usize {
        let image = self.image(shard).await;
        let n = image.len();
        self.replica.lock().unwrap().insert(shard, image);
        n
    }

    /// The shard's node lost its data: its replica, resynchronising from
    /// it, holds nothing either (an older snapshot may still be restored).
    pub(super) fn lost(&self, shard: u32) {
        self.replica.lock().unwrap().insert(shard, Image::default());
        self.losses.lock().unwrap().entry(shard).or_default().0 += 1;
    }

    /// Whether the shard's last snapshot was saved before its node last
    /// lost its data (a restart from it brings back a superseded state).
    pub(super) fn snapshot_predates_a_loss(&self, shard: u32) -> bool {
        let (losses, at_save) = self.losses.lock().unwrap().get(&shard).copied().unwrap_or_default();
        losses > at_save
    }

    /// The shard's node saves a snapshot now.
    pub(super) async fn save(&self, shard: u32) -> usize {
        let image = self.image(shard).await;
        let n = image.len();
        self.saved.lock().unwrap().insert(shard, image);
        let mut losses = self.losses.lock().unwrap();
        let entry = losses.entry(shard).or_default();
        entry.1 = entry.0;
        n
    }

    /// The shard's node fails over to its replica: the shard becomes what
    /// the replica holds, on the same replication history. The new
    /// primary's replica starts from it. Keys written since are gone.
    pub(super) async fn fail_over(&self, shard: u32) -> (usize, usize) {
        let image = self.replica.lock().unwrap().get(&shard).cloned().unwrap_or_default();
        let lost = self.replace(shard, &image).await;
        (image.len(), lost)
    }

    /// The shard's node restarts from its last snapshot, on a new
    /// replication history; its replica resynchronises from it.
    pub(super) async fn restart(&self, shard: u32) -> (usize, usize) {
        let image = self.saved.lock().unwrap().get(&shard).cloned().unwrap_or_default();
        let lost = self.replace(shard, &image).await;
        let meta = self.redis.keys().shard(&self.coupon, shard).meta();
        let mut conn = self.redis.connection();
        let exists: bool = redis::cmd("EXISTS")
            .arg(&meta)
            .query_async(&mut conn)
            .await
            .unwrap_or(false);
        if exists {
            let _: Result<(), _> = redis::pipe()
                .cmd("HSET")
                .arg(&meta)
                .arg("run")
                .arg("restarted")
                .ignore()
                .cmd("HDEL")
                .arg(&meta)
                .arg("suspect")
                .ignore()
                .query_async(&mut conn)
                .await;
        }
        // The replica resynchronises from the restarted node: it holds the
        // snapshot on the new history (its stamp too), so a failover now
        // promotes a state that is just as unverified.
        let restarted = self.image(shard).await;
        self.replica.lock().unwrap().insert(shard, restarted);
        (image.len(), lost)
    }

    /// Makes the shard's keys exactly `image`; how many keys of now were
    /// not in it.
    async fn replace(&self, shard: u32, image: &Image) -> usize {
        let mut conn = self.redis.connection();
        let now = self.keys(shard).await;
        let lost = now.iter().filter(|k| !image.0.iter().any(|(i, _, _)| i == *k)).count();
        for key in &now {
            let _: Result<(), _> = redis::cmd("DEL").arg(key).query_async(&mut conn).await;
        }
        for (key, ttl, dump) in &image.0 {
            let _: Result<(), _> = redis::cmd("RESTORE")
                .arg(key)
                .arg(*ttl)
                .arg(dump.as_slice())
                .arg("REPLACE")
                .query_async(&mut conn)
                .await;
        }
        lost
    }
}
