"""The fault suite's scenarios (chaos.py runs them): one sale per fault,
each as a `Run` (the sale, its issuance, the grab host where the fault
needs one, a second sale beside it where it has one) and a fault builder
that turns the fault into hooks on the sale's presses; then the judgement
of the sale on the users' side (`judge`) and of what they could not do
(`availability`)."""

import collections
import threading
import time

from infra.harness.ledger import early, holders, ledger, rejected_ids
from infra.harness.lottery_faults import LOTTERY, lottery_scenario
from infra.harness.sale import Issuance, Sale, call, grab_host, host_press, wall_clock, watch_press


UNAVAILABLE = {"BUSY", "TRANSPORT_ERROR", "GATEWAY_ERROR"}


def availability(answers, healed_at, began):
    """What the users could not do, from every answer in the order heard:

    - busy: answers that decided nothing (503 BUSY, a 5xx, a broken
      connection);
    - unavailable_ms: the longest stretch from an undecided answer to the
      next decided one (any final answer, SUCCESS or a refusal such as
      SOLD_OUT), in which presses heard only BUSY/5xx; a stretch still open
      when the presses ended runs to the last answer;
    - recovery_ms: from the end of the fault (`healed_at`, None when the
      scenario has no fault with an end) to the first decided answer to a
      press sent after it (an answer in flight across the fault proves
      nothing);
    - unavailable_at: when that stretch opened and closed, in seconds
      from `began` (the sale's start, as the injected steps' `atSecond`)."""
    answers = sorted(answers)
    busy = sum(1 for _, _, code in answers if code in UNAVAILABLE)
    longest, opened, stretch = 0.0, None, None
    for at, _, code in answers:
        if code in UNAVAILABLE:
            opened = at if opened is None else opened
        elif opened is not None:
            if at - opened > longest:
                longest, stretch = at - opened, (opened, at)
            opened = None
    if opened is not None and answers[-1][0] - opened > longest:
        longest, stretch = answers[-1][0] - opened, (opened, answers[-1][0])
    recovery = None
    if healed_at is not None:
        after = [at for at, sent, code in answers if sent >= healed_at and code not in UNAVAILABLE]
        recovery = round(max(0.0, after[0] - healed_at) * 1000) if after else None
    return {"busy": busy, "unavailable_ms": round(longest * 1000), "recovery_ms": recovery,
            "unavailable_at": stretch and [round(t - began, 2) for t in stretch]}


def judge(sale, figures):
    coupons, rejections = ledger(sale.coupon)
    held, rejected = holders(coupons), rejected_ids(rejections)
    wallets = collections.defaultdict(set)
    for user, grant in held:
        wallets[user].add(grant)
    ids = [g for _, g in held]
    told = {(u, g) for u, grants in sale.told.items() for g in grants}
    return {
        "coupon": sale.coupon,
        "stock": sale.stock,
        "winners": len(sale.told),
        "issued": len(held),
        "oversell": max(0, len(held) - sale.stock),
        "duplicates": sum(max(0, len(g) - 1) for g in wallets.values()) + len(ids) - len(set(ids))
        + sum(max(0, len(g) - 1) for g in sale.told.values()),
        "lost": sum(1 for u, g in told if g not in wallets.get(u, set())),
        "rejected_after_success": sum(1 for _, g in told if g in rejected),
        "unsold": max(0, sale.stock - len(held)),
        "early": early(sale.waves, coupons),
        "answers": dict(sale.codes),
        "drift": figures.get("drift"),
    }


# --------------------------------------------------------------- scenarios

class Run:
    """One scenario's sale as it goes: the sale, its issuance, the grab
    host when the scenario needs one, another sale beside it when the
    scenario has one, and the log of what was injected when (`note`). The
    fault builders below read and drive it; `finish` judges it."""

    def __init__(self, name, rig, short, seed):
        self.name, self.rig = name, rig
        fault = name.removesuffix(WAVED)
        users = 120 if short else 300
        # snapshot_restore and the backlog scenarios: units left when the
        # fault lands, so every press could win (the time to sell again is
        # measured on presses that can win).
        every_press_wins = fault in ("snapshot_restore", *BACKLOG)
        stock = users if every_press_wins else 40 if short else 100
        # retry_during_lag: every press on a fresh process, as a retry after a
        # Lambda timeout always is: its connection has written nothing.
        self.host = (grab_host(rig["env"]) if name == "crash_after_decision"
                     else grab_host(rig["env"], recycle=True) if name == "retry_during_lag" else None)
        # A waved sale: three quarters of the stock released 3 s after the
        # coupon is created, the rest WAVE_GAP_SECONDS later.
        waves = ([(3.0, stock * 3 // 4), (3.0 + WAVE_GAP_SECONDS, stock - stock * 3 // 4)]
                 if name.endswith(WAVED) else None)
        self.sale = Sale(name, stock, 4 if every_press_wins else 2, users, seed,
                         host_press(self.host) if self.host else watch_press, waves=waves)
        self.issuance = Issuance(duplicate=name == "duplicate_delivery",
                                 reconcilers=2 if name == "concurrent_reconcilers" else 1)
        self.sale.create()
        self.people = [f"{name}-u{i}" for i in range(users)]
        self.beside, self.beside_thread = None, None
        self.backlog, self.queued_at_fault = [], None
        self.injected = []
        self.healed = []  # when the fault ended (its last step), for recovery_ms
        self.began = time.monotonic()
        if name == "flush_beside_other_sales":
            self.sell_beside(users, seed + 1)
        if fault in BACKLOG:
            self.sell_backlog(seed + 1)

    def sell_beside(self, users, seed):
        """Another coupon sells at a steady rate from before the fault until
        well after it, every press a win, so grants of another sale are on
        their way through the shared grant queue the whole time (at a rate
        the local issuer keeps up with, as a deployment's issuer does: a
        backlog that only grows is a capacity fault of its own)."""
        self.beside = Sale(f"{self.name}_beside", users * 2, 2, users, seed)
        self.beside.create()
        people = [f"{self.name}-b{i}" for i in range(users)]
        self.beside_thread = threading.Thread(target=self.beside.run_wave, args=(people, 1, {}),
                                              kwargs={"per_second": 3}, daemon=True)
        self.beside_thread.start()
        time.sleep(2)

    def sell_backlog(self, seed):
        """The issuer paused, then other coupons sold out, every press a
        win, so that at least BACKLOG_GRANTS grants are on the grant queue
        (several coupons' lanes) before this sale starts; this sale's own
        wins queue behind them. The issuer stays paused until this sale's
        presses are over (`finish`)."""
        self.issuance.paused.set()
        per_coupon = BACKLOG_GRANTS // 2
        for k in range(2):
            other = Sale(f"{self.name}_backlog{k}", per_coupon, 2, per_coupon, seed + k)
            other.create()
            other.run_wave([f"{self.name}-q{k}-{i}" for i in range(per_coupon)], 1, {})
            self.backlog.append(other)
        self.note(f"issuer paused; {sum(len(o.told) for o in self.backlog)} grants of 2 other coupons sold "
                  f"(queue: {self.issuance.pump.in_flight()} messages)")

    def note(self, what, ends_fault=False):
        """Logs a step of the fault; `ends_fault` marks its end (recovery_ms
        counts from the first such step)."""
        self.injected.append({"atSecond": round(time.monotonic() - self.began, 2),
                              "at": wall_clock(),
                              "atPress": sum(self.sale.codes.values()),
                              "successes": self.sale.codes["SUCCESS"], "what": what})
        if ends_fault:
            self.healed.append(time.monotonic())

    def finish(self):
        """Ends the sale beside and the grab host, settles the books and
        judges the sale (the promise over both sales when there are two,
        availability on this one)."""
        if self.beside:
            self.beside_thread.join()
            self.note(f"the other coupon's sale ended ({self.beside.codes['SUCCESS']} SUCCESS)")
        if self.backlog:
            self.note(f"presses over; the issuer resumes with {self.issuance.pump.in_flight()} messages queued")
            self.issuance.paused.clear()
        if self.host:
            if self.host.recycle:
                self.note(f"{self.host.restarts} grab processes started fresh, one per press")
            self.host.close()
        result = judge(self.sale, self.issuance.settle(self.sale.coupon))
        # The promise over every sale of the scenario; availability on this one.
        for label, sale in ([("beside", self.beside)] if self.beside else []) + [
                (f"backlog{k}", b) for k, b in enumerate(self.backlog)]:
            other = judge(sale, self.issuance.settle(sale.coupon))
            for key in ("winners", "issued", "oversell", "duplicates", "lost", "rejected_after_success", "unsold",
                        "early"):
                result[key] += other[key]
            result["drift"] = (result["drift"] or 0) + (other["drift"] or 0)
            result[label] = other
        if self.backlog:
            result["queued_at_fault"] = self.queued_at_fault
        result.update(availability(self.sale.answers, self.healed[0] if self.healed else None, self.began))
        result["injected"] = self.injected
        # Repair requests grabs sent when they found the coupon's state gone,
        # handed to the reconciler by the pump (the repair queue's mapping).
        result["repairRequests"] = self.issuance.pump.repairs
        return result


# Each fault: what it does, as hooks (a share of the wave's presses -> the
# step to run then, in a thread of its own).

def sqs_outage(run):
    faults = run.rig["sqs"]

    def outage():
        run.note("SQS refuses every SendMessage for 3 s")
        faults.refusing.set()
        time.sleep(3)
        faults.refusing.clear()
        run.note(f"SQS takes sends again ({faults.refused} refused)", ends_fault=True)
    return {0.2: outage}


def flush_all(run):
    def flush():
        run.rig["redis"].cli("FLUSHALL")
        run.note("Redis FLUSHALL (every shard, outbox and record gone)", ends_fault=True)
    return {0.3: flush}


def flush_one(run):
    # Only this coupon's keys, as a lost cluster node loses only its slots:
    # the other sale keeps its state and keeps selling.
    def flush():
        keys = run.rig["redis"].engine.command("KEYS")
        deleted = run.rig["redis"].cli(
            "EVAL", f"local n = 0 for _, k in ipairs(redis.call('{keys}', ARGV[1])) do "
            "n = n + redis.call('DEL', k) end return n", "0", f"*cpn:{run.sale.coupon}:*").strip()
        run.note(f"this coupon's Redis state deleted ({deleted} keys); the other coupons' state is kept",
                 ends_fault=True)
    return {0.3: flush}


def flush_with_backlog(run):
    # This coupon's keys deleted (a lost node's slots) while the issuer is
    # paused with the backlog, and this sale's own wins, on the queue.
    flush = flush_one(run)[0.3]

    def flush_queued():
        run.queued_at_fault = run.issuance.pump.in_flight()
        flush()
    return {0.3: flush_queued}


def snapshot_restore_with_backlog(run):
    # snapshot_restore while the issuer is paused: no grant of the sale has
    # reached DynamoDB, so only the claims tell the check what was sold.
    step = snapshot_restore(run)[0.0]

    def restore_queued():
        step()
        run.queued_at_fault = run.issuance.pump.in_flight()
    return {0.0: restore_queued}


def recreate_after_loss(run):
    def recreate():
        run.rig["redis"].cli("FLUSHALL")
        run.note("Redis FLUSHALL")
        created = run.sale.create()
        run.note(f"coupon created again (created={created['data']['created']})", ends_fault=True)
    return {0.3: recreate}


def failover(run):
    # retry_during_lag: the replica lags long enough for the BUSY of a win
    # to be retried many times, each on a fresh process (a connection that
    # wrote nothing), before the failover.
    lag = 5.0 if run.name == "retry_during_lag" else 2.0
    redis, replacement = run.rig["redis"], run.rig["replacement_seconds"]

    def fail_over():
        run.note(f"replication stalls (the replica lags); {lag:g} s later the primary is killed, the replica promoted")
        redis.fail_over(
            lag_seconds=lag,
            replacement_seconds=replacement,
            promoted=lambda: run.note(f"endpoint moved to the promoted replica ({redis.replicas_left()} replica(s) "
                                      f"in sync); the replacement node comes {replacement:g} s later",
                                      ends_fault=True),
        )
        run.note("the replacement replica is in sync")
    return {0.3: fail_over}


def snapshot_restore(run):
    # By units sold, not presses: the snapshot at 30% of the stock, the
    # restore at 60%, so the units between were issued and told SUCCESS.
    sale, redis = run.sale, run.rig["redis"]

    def sold(share):
        deadline = time.monotonic() + 60
        while sale.codes["SUCCESS"] < share * sale.stock and time.monotonic() < deadline:
            time.sleep(0.01)

    def snapshot_then_restore():
        sold(0.3)
        redis.cli("SAVE")
        run.note("snapshot written (SAVE)")
        sold(0.6)
        redis.restart_from_snapshot()
        run.note("every node killed; the primary restarted from the snapshot, the replicas synced from it",
                 ends_fault=True)
    return {0.0: snapshot_then_restore}


def crash_after_decision(run):
    proxy, host = run.rig["redis"].proxy, run.host

    def crashes():
        killed = 0
        for _ in range(8):
            # Replies held at the endpoint: whatever a grab process asked
            # Redis has run there, and the answer has not reached it.
            proxy.holding.set()
            time.sleep(0.15)
            killed += host.kill_busy()
            time.sleep(0.05)
            proxy.holding.clear()
            time.sleep(0.4)
        run.note(f"{killed} grab processes killed by PID between a Redis call and its answer "
                 f"(8 rounds; {host.restarts} fresh processes started)", ends_fault=True)
    return {0.15: crashes}


def poison_messages(run):
    pump = run.issuance.pump

    def poison():
        for i in range(10):
            # A FIFO queue: each in a group of its own, so none holds up a lane.
            pump.sqs.send_message(QueueUrl=pump.queue, MessageBody=f'{{"not":"a grant {i}"}}',
                                  MessageGroupId=f"poison-{i}",
                                  MessageDeduplicationId=f"poison-{time.time_ns()}-{i}")
        run.note("10 poison messages on the grant queue", ends_fault=True)
    return {0.3: poison}


def refill_after_sell_out(run):
    """refill_during_sale, after the first wave sold out: half the stock
    again through the admin API, and the users who won nothing press again."""
    sale = run.sale
    add = sale.stock // 2
    status, _ = call("POST", f"/lambda-url/admin/admin/coupons/{sale.coupon}/stock", {"add": add},
                     {"idempotency-key": f"refill-{sale.coupon}"})
    run.note(f"{add} units added after the sell-out (status {status}), presses go on")
    sale.stock += add
    time.sleep(1.2)  # past the instances' sold-out memory
    sale.run_wave([u for u in run.people if u not in sale.told], 2, {})


FAULTS = {
    "sqs_outage": sqs_outage,
    "redis_flush": flush_all,
    "concurrent_reconcilers": flush_all,
    "flush_beside_other_sales": flush_one,
    "recreate_after_loss": recreate_after_loss,
    "failover_rollback": failover,
    "retry_during_lag": failover,
    "snapshot_restore": snapshot_restore,
    "crash_after_decision": crash_after_decision,
    "poison_messages": poison_messages,
    "flush_with_backlog": flush_with_backlog,
    "snapshot_restore_with_backlog": snapshot_restore_with_backlog,
}
# The scenarios with a backlog: the issuer paused and at least
# BACKLOG_GRANTS grants of other coupons on the queue before the sale.
BACKLOG = ("flush_with_backlog", "snapshot_restore_with_backlog")
BACKLOG_GRANTS = 500
# A failover must land while units are still being won: arrivals spread
# over a few seconds instead of a burst that sells out in one (presses per
# second; the others as fast as the clients go).
PACE = {"snapshot_restore": 50, "snapshot_restore_with_backlog": 50, "failover_rollback": 80,
        "retry_during_lag": 80}


# `<fault>_waves`: the fault during the first release wave of a coupon
# with two; the users who won nothing press again once the second is out.
WAVED = "_waves"
WAVE_GAP_SECONDS = 12.0


def until(instant_ms):
    """Sleeps until `instant_ms` (ms since epoch) has passed."""
    time.sleep(max(0.0, instant_ms / 1000 - time.time()) + 0.05)


def scenario(name, rig, short, seed):
    """One sale under the fault `name`: the first round of presses with
    the fault's hooks, a second round where the scenario has one, then the
    judgement."""
    if name.endswith(LOTTERY):
        return lottery_scenario(name, rig, short, seed)
    run = Run(name, rig, short, seed)
    fault = name.removesuffix(WAVED)
    hooks = FAULTS[fault](run) if fault in FAULTS else {}
    sale = run.sale
    if sale.waves:
        until(sale.waves[0][0])
    sale.run_wave(run.people, 1, hooks, per_second=PACE.get(fault))
    if name == "refill_during_sale":
        refill_after_sell_out(run)
    if len(sale.waves) > 1:
        run.note(f"{sale.codes['SUCCESS']} SUCCESS in the first wave; the second is out "
                 f"{max(0.0, sale.waves[1][0] / 1000 - time.time()):.1f} s later")
        until(sale.waves[1][0])
        sale.run_wave([u for u in run.people if u not in sale.told], 2, {})
    return run.finish()


SCENARIOS = [
    "sqs_outage", "crash_after_decision", "redis_flush", "failover_rollback", "refill_during_sale",
    "recreate_after_loss", "duplicate_delivery", "concurrent_reconcilers", "poison_messages", "retry_during_lag",
    "snapshot_restore", "flush_beside_other_sales", "redis_flush_waves", "failover_rollback_waves",
    "snapshot_restore_waves", "redis_flush_lottery", "duplicate_delivery_lottery", "flush_with_backlog",
    "snapshot_restore_with_backlog",
]
SHORT = ["sqs_outage", "crash_after_decision", "redis_flush", "failover_rollback", "refill_during_sale",
         "retry_during_lag", "snapshot_restore", "flush_beside_other_sales", "redis_flush_waves",
         "redis_flush_lottery", "flush_with_backlog", "snapshot_restore_with_backlog"]
# The short pass on the Serverless stand-in: the faults where a cache that
# loses acknowledged writes and has no WAIT differs (a lost or rolled-back
# win, a send that fails after the claim, a rebuild counting claims); the
# others run on it in the full `make chaos` (CI's time goes to three engines).
SERVERLESS_SHORT = ["sqs_outage", "crash_after_decision", "redis_flush", "failover_rollback", "retry_during_lag",
                    "snapshot_restore", "flush_with_backlog", "snapshot_restore_with_backlog"]
