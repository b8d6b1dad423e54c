//! The Lua scripts, compiled in from the repository's `lua/` folder and run
//! through [`redis::Script`]: EVALSHA, with a SCRIPT LOAD and retry when
//! Redis answers NOSCRIPT (after a restart or failover). Every script gets
//! all its keys in KEYS, and all of them share one hash tag
//! ([`super::keys`]). What the scripts store is read in [`super::records`].

use std::sync::LazyLock;

use coupon_domain::error::StoreError;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind};

use super::conn::{protocol, RedisConnection};

macro_rules! lua {
    ($name:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../../../lua/lib.lua"),
                include_str!(concat!("../../../../lua/", $name))
            ))
        })
    };
}

pub(super) static GRAB: LazyLock<Script> = lua!("grab.lua");
pub(super) static PEEK: LazyLock<Script> = lua!("peek.lua");
pub(super) static RECORDED: LazyLock<Script> = lua!("recorded.lua");
pub(super) static ENTER: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../../lua/enter.lua")));
pub(super) static STANDING: LazyLock<Script> = lua!("standing.lua");
pub(super) static AVAILABLE: LazyLock<Script> = lua!("available.lua");
pub(super) static TAKE: LazyLock<Script> = lua!("take.lua");
pub(super) static SETTLE: LazyLock<Script> = lua!("settle.lua");
pub(super) static PREHEAT: LazyLock<Script> = lua!("preheat.lua");
pub(super) static VERIFY: LazyLock<Script> = lua!("verify.lua");
pub(super) static FENCE: LazyLock<Script> = lua!("fence.lua");
pub(super) static RISK_USER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/risk_reserve_user.lua")));
pub(super) static RISK_IP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/risk_reserve_ip.lua")));
pub(super) static RISK_DEVICE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/risk_reserve_device.lua")));
pub(super) static RESTORE_HASH: LazyLock<Script> = lua!("restore_hash.lua");
pub(super) static RESTORE_REQUESTS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/restore_requests.lua")));
pub(super) static RESTORE_OUTBOX: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/restore_outbox.lua")));
pub(super) static BUMP_EPOCH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/bump_epoch.lua")));
pub(super) static APPLY_SETTINGS: LazyLock<Script> = lua!("apply_settings.lua");
pub(super) static DROP_IF_BEHIND: LazyLock<Script> = lua!("drop_if_behind.lua");
pub(super) static RISK_CHECK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/risk_check.lua")));
pub(super) static RISK_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../../lua/risk_release.lua")));

/// An EVALSHA of `script` with `keys` keys, for the caller to add the keys
/// and arguments to: written straight into the command, where
/// [`Script::key`] first collects each into a vector of its own (the
/// grab's hot path; the profile in docs/performance.md).
pub(super) fn evalsha(script: &Script, keys: usize) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

/// Runs an [`evalsha`] command; when Redis answers NOSCRIPT (a restart, a
/// failover, a flush) loads `script` and runs it again, as
/// `ScriptInvocation::invoke_async` does.
pub(super) async fn run<T: FromRedisValue>(conn: &mut RedisConnection, script: &Script, cmd: &Cmd) -> RedisResult<T> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            cmd.query_async(conn).await
        }
        other => other,
    }
}

pub(super) fn number<T: std::str::FromStr>(what: &'static str, reply: &[String], at: usize) -> Result<T, StoreError> {
    reply
        .get(at)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol(what, format!("missing number at {at}")))
}

#[cfg(test)]
mod tests {
    /// ElastiCache Serverless refuses a script that declares no keys
    /// (`ERR Lua scripts without any input keys are not supported`), and
    /// no local server can be told to: every script reads its first key
    /// from KEYS, so no call can pass none and still do its work.
    #[test]
    fn every_script_works_on_the_keys_it_declares() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lua");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".lua") || name == "lib.lua" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains("KEYS[1]"), "{name} reads no key from KEYS");
            seen += 1;
        }
        assert!(seen >= 20, "only {seen} scripts found in {}", dir.display());
    }
}
