//! A real primary and replica, started by a test and controlled by PID: the
//! harness for faults a single redis-server cannot show (a replica that
//! lags because it is stopped, a primary killed, the replica promoted; a
//! server killed and restarted from a snapshot older than its last writes).
//! The engine is the run's one setting, `REDIS_ENGINE` (infra/local/env.sh), as
//! the binaries it names: `REDIS_SERVER` and `REDIS_CLI` (redis-server and
//! redis-cli, or valkey-server and valkey-cli).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server binary of the run's engine (`REDIS_SERVER`).
fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// The command-line client of the run's engine (`REDIS_CLI`).
fn cli_binary() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// A server process of the test's own (the run's engine), on a free
/// loopback port.
pub struct Server {
    pub port: u16,
    child: Child,
    dir: std::path::PathBuf,
    /// Further command-line settings, kept for a restart.
    extra: Vec<String>,
}

impl Server {
    /// One server of the test's own, no replica.
    pub fn standalone() -> Self {
        Self::start(None)
    }

    /// One server of the test's own without `commands` (renamed away, as
    /// a managed cache withholds them: ElastiCache Serverless has no
    /// `WAIT`, `CONFIG` or `KEYS`).
    pub fn without(commands: &[&str]) -> Self {
        let removed: Vec<String> = commands
            .iter()
            .flat_map(|c| ["--rename-command".into(), (*c).into(), String::new()])
            .collect();
        Self::start_with(None, &removed)
    }

    /// Kills the server (SIGKILL: nothing is saved on the way down) and
    /// starts it again on the same port from the snapshot in its directory
    /// (written by `SAVE`): every write after the snapshot is gone, as
    /// after a crash of a node persisting by RDB, or a restore.
    pub fn restart_from_snapshot(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
        self.child = Self::spawn(self.port, &self.dir, None, &self.extra);
        self.wait_for(|info| info.contains("loading:0"), "back from its snapshot");
    }

    fn start(replica_of: Option<u16>) -> Self {
        Self::start_with(replica_of, &[])
    }

    fn start_with(replica_of: Option<u16>, extra: &[String]) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("coupon-replica-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("server dir");
        let child = Self::spawn(port, &dir, replica_of, extra);
        let server = Self {
            port,
            child,
            dir,
            extra: extra.to_vec(),
        };
        server.wait_for(|info| info.contains("redis_version"), "to answer");
        server
    }

    fn spawn(port: u16, dir: &std::path::Path, replica_of: Option<u16>, extra: &[String]) -> Child {
        let mut cmd = Command::new(server_binary());
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some(primary) = replica_of {
            cmd.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        cmd.spawn()
            .unwrap_or_else(|e| panic!("{} on the PATH (make setup installs it): {e}", server_binary()))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs a command on this server, waiting for nothing else.
    pub fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new(cli_binary())
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", cli_binary()));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends `signal` (STOP, CONT, KILL) to the process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{signal}");
    }

    fn wait_for(&self, ready: impl Fn(&str) -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if ready(&self.cmd(&["INFO"])) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server on {} did not come {what}", self.port);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A primary and two replicas in sync: a shard as the template deploys it
/// (a win waits for one replica, so a failover leaves one to acknowledge).
pub struct ReplicaSet {
    pub primary: Server,
    /// The replica a failover promotes.
    pub replica: Server,
    /// The other replica, which follows the promoted one.
    pub second: Server,
}

impl ReplicaSet {
    pub fn start() -> Self {
        let primary = Server::start(None);
        let replica = Server::start(Some(primary.port));
        let second = Server::start(Some(primary.port));
        for r in [&replica, &second] {
            r.wait_for(|info| info.contains("master_link_status:up"), "in sync");
        }
        primary.wait_for(|info| info.contains("connected_slaves:2"), "to see its replicas");
        // Replicas run long before a sale, as deployed: a promoted one sells
        // at once only if it was running when the shard was stamped (with
        // two seconds of margin for the clocks, and uptime counted in
        // whole seconds; lua/lib.lua, verified()).
        std::thread::sleep(std::time::Duration::from_millis(3_100));
        Self {
            primary,
            replica,
            second,
        }
    }

    /// Every replica stops (SIGSTOP): they lag behind every write from now on.
    pub fn stop_replicas(&self) {
        self.replica.signal("STOP");
        self.second.signal("STOP");
    }

    /// The replicas run again and catch up.
    pub fn resume_replicas(&self) {
        self.replica.signal("CONT");
        self.second.signal("CONT");
    }

    /// The replicas stop receiving (a partition between them and the
    /// primary): they keep what they had, and every write the primary takes
    /// from now on exists on the primary alone.
    pub fn partition(&self) {
        for r in [&self.replica, &self.second] {
            assert!(r.cmd(&["REPLICAOF", "NO", "ONE"]).contains("OK"));
        }
        self.primary
            .wait_for(|info| info.contains("connected_slaves:0"), "to lose its replicas");
    }

    /// What a failover does after a partition: the primary dies, `replica`
    /// (with whatever it had received) is the primary now, and `second`
    /// follows it, so wins are acknowledged again at once.
    pub fn fail_over(&self) {
        self.primary.signal("KILL");
        let port = self.replica.port.to_string();
        assert!(self.second.cmd(&["REPLICAOF", "127.0.0.1", &port]).contains("OK"));
        self.second.wait_for(
            |info| info.contains("master_link_status:up"),
            "following the new primary",
        );
        self.replica
            .wait_for(|info| info.contains("connected_slaves:1"), "to see its replica");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}
