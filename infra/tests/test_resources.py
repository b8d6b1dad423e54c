"""template.yaml and the local provisioning (infra/local/resources.json) describe
the same tables and queues, and the template keeps the local-only identity
mode off."""
import json
import re

import pytest

from infra.tests.cfn import CACHES, FUNCTIONS, ROOT, deployed, required_settings, resolve, resources, template


def test_every_local_table_is_in_the_template_with_the_same_keys_indexes_and_ttl():
    tpl = template()["Resources"]
    for logical, spec in resources()["tables"].items():
        props = tpl[logical]["Properties"]
        attrs = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
        assert attrs == spec["attributes"], logical
        keys = {k["KeyType"]: k["AttributeName"] for k in props["KeySchema"]}
        assert keys.get("HASH") == spec["hashKey"], logical
        assert keys.get("RANGE") == spec.get("rangeKey"), logical
        gsis = {
            g["IndexName"]: {k["KeyType"]: k["AttributeName"] for k in g["KeySchema"]}
            | {"projection": (g["Projection"]["ProjectionType"], sorted(g["Projection"].get("NonKeyAttributes", [])))}
            for g in props.get("GlobalSecondaryIndexes", [])
        }
        want = {
            g["name"]: {k: v for k, v in (("HASH", g["hashKey"]), ("RANGE", g.get("rangeKey"))) if v}
            | {"projection": (g.get("projection", "ALL"), sorted(g.get("nonKeyAttributes", [])))}
            for g in spec["globalSecondaryIndexes"]
        }
        assert gsis == want, logical
        ttl = props.get("TimeToLiveSpecification", {})
        assert (ttl.get("AttributeName") if ttl.get("Enabled") else None) == spec["ttlAttribute"], logical
        stream = props.get("StreamSpecification", {}).get("StreamViewType")
        assert stream == spec.get("stream"), logical
        assert props["BillingMode"] == "PAY_PER_REQUEST"


def test_every_template_table_is_provisioned_locally():
    tpl = template()["Resources"]
    tables = {k for k, v in tpl.items() if v["Type"] == "AWS::DynamoDB::Table"}
    assert tables == set(resources()["tables"])


def test_queues_and_redrive_match():
    tpl = template()["Resources"]
    local = {k: v for k, v in resources()["queues"].items() if not v.get("localOnly")}
    queues = {k for k, v in tpl.items() if v["Type"] == "AWS::SQS::Queue"}
    assert queues == set(local)
    for logical, spec in local.items():
        props = tpl[logical]["Properties"]
        assert props["MessageRetentionPeriod"] == spec["messageRetentionPeriod"], logical
        assert bool(props.get("FifoQueue")) == bool(spec.get("fifo")), logical
        high = props.get("DeduplicationScope") == "messageGroup" and props.get("FifoThroughputLimit") == "perMessageGroupId"
        assert high == bool(spec.get("highThroughput")), logical
        assert spec["localName"].endswith(".fifo") == bool(spec.get("fifo")), logical
        redrive = props.get("RedrivePolicy")
        if "deadLetterQueue" in spec:
            assert redrive["deadLetterTargetArn"] == {"GetAtt": f"{spec['deadLetterQueue']}.Arn"}
            count = redrive["maxReceiveCount"]
            if isinstance(count, dict):
                count = template()["Parameters"][count["Ref"]]["Default"]
            assert count == spec["maxReceiveCount"], logical
        else:
            assert redrive is None, logical


def test_the_grab_function_trusts_only_verified_identity_in_aws():
    env = template()["Resources"]["GrabFunction"]["Properties"]["Environment"]["Variables"]
    assert str(env.get("TRUST_IDENTITY_HEADERS", "false")).lower() == "false"
    api = template()["Resources"]["HttpApi"]["Properties"]
    assert api["Auth"]["DefaultAuthorizer"] in api["Auth"]["Authorizers"]


def test_every_required_setting_of_every_function_is_set_by_the_template():
    resources = template()["Resources"]
    for config, names in required_settings().items():
        assert names, f"{config}: no required settings found; is the parser still right?"
        env = set(resources[FUNCTIONS[config]]["Properties"]["Environment"]["Variables"])
        missing = {n for n in names if not any(alt in env for alt in n.split("|"))}
        assert not missing, (config, missing)


def test_the_issuer_reports_partial_batch_failures_and_the_queue_outlives_its_timeout():
    tpl = template()
    resources = tpl["Resources"]
    issuer = resources["IssuerFunction"]["Properties"]
    event = issuer["Events"]["Grants"]["Properties"]
    assert event["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert "MaximumConcurrency" in event["ScalingConfig"]
    longest = tpl["Parameters"][issuer["Timeout"]["Ref"]]["MaxValue"]
    assert resources["GrantQueue"]["Properties"]["VisibilityTimeout"] >= 6 * longest


def test_redis_is_a_tls_cluster_with_failover_and_a_generated_token():
    resources = template()["Resources"]
    redis = resources["Redis"]["Properties"]
    for flag in ("TransitEncryptionEnabled", "AtRestEncryptionEnabled", "MultiAZEnabled", "AutomaticFailoverEnabled"):
        assert redis[flag] is True, flag
    # Cluster mode, and Redis holds decisions, not a cache: nothing may be
    # evicted to make room.
    group = resources[redis["CacheParameterGroupName"]["Ref"]]["Properties"]
    assert group["Properties"]["cluster-enabled"] == "yes"
    assert group["Properties"]["maxmemory-policy"] == "noeviction"
    assert "resolve:secretsmanager" in str(redis["AuthToken"])
    for name in ("GrabFunction", "WalletFunction", "ReconcilerFunction"):
        env = resources[name]["Properties"]["Environment"]["Variables"]
        assert env["REDIS_CLUSTER"] == "true" and env["REDIS_TLS"] == "true", name
        assert "REDIS_AUTH_SECRET_ARN" in env and "REDIS_URL" not in env, name


def test_every_function_takes_memory_and_timeout_as_parameters():
    tpl = template()
    for name, res in tpl["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function":
            for prop in ("MemorySize", "Timeout"):
                ref = res["Properties"][prop]
                assert isinstance(ref, dict) and ref.get("Ref") in tpl["Parameters"], (name, prop)


def test_the_grab_function_reads_items_by_key_and_the_live_index_and_writes_only_entries_and_claims():
    """The grab reads a coupon's definition only when Redis knows nothing of
    it (lost or never created), a lottery's draw and a user's entry, and
    queries the definitions-only `live` index for the coupon center; what
    it writes is a lottery entry (a put, with the draw's freeze checked in
    the same transaction) and a win's claim (a put in the claims table,
    which it also reads by key for a win a restarted shard remembers): it
    never updates or deletes, never scans, never queries a table."""
    policies = template()["Resources"]["GrabFunction"]["Properties"]["Policies"]
    dynamodb = [
        statement
        for policy in policies if "Statement" in policy
        for statement in policy["Statement"]
        if "dynamodb" in json.dumps(statement["Action"]).lower()
    ]
    assert dynamodb == [{"Effect": "Allow", "Action": "dynamodb:GetItem",
                         "Resource": {"GetAtt": "CouponsTable.Arn"}},
                        {"Effect": "Allow", "Action": ["dynamodb:PutItem", "dynamodb:ConditionCheckItem"],
                         "Resource": {"GetAtt": "CouponsTable.Arn"},
                         "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["ENTRIES#*"]}}},
                        {"Effect": "Allow", "Action": "dynamodb:Query",
                         "Resource": {"Sub": "${CouponsTable.Arn}/index/live"}},
                        {"Effect": "Allow", "Action": ["dynamodb:PutItem", "dynamodb:GetItem"],
                         "Resource": {"GetAtt": "ClaimsTable.Arn"}}], dynamodb
    assert "dynamodb" not in json.dumps([p for p in policies if "Statement" not in p]).lower()


def test_every_table_has_point_in_time_recovery_and_encryption():
    for name, res in template()["Resources"].items():
        if res["Type"] == "AWS::DynamoDB::Table":
            props = res["Properties"]
            assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True, name
            assert props["SSESpecification"]["SSEEnabled"] is True, name


def watched(alarm):
    """The metrics an alarm watches: its own, or those its queries name."""
    if "MetricName" in alarm:
        return {alarm["MetricName"]}
    return {m for q in alarm["Metrics"] for m in re.findall(r"SELECT \w+\((\w+)\)", json.dumps(q.get("Expression")))} | {
        q["MetricStat"]["Metric"]["MetricName"] for q in alarm["Metrics"] if "MetricStat" in q
    }


@pytest.mark.parametrize("cache", CACHES)
def test_the_alarms_watch_what_the_design_says(cache):
    alarms = set().union(*(
        watched(res["Properties"]) for res in deployed({"Cache": cache}).values()
        if res["Type"] == "AWS::CloudWatch::Alarm"
    ))
    # The cache's memory, as each kind publishes it (Serverless: the data
    # stored, against the stack's ceiling).
    memory = "BytesUsedForCache" if cache == "serverless" else "DatabaseMemoryUsagePercentage"
    for metric in ("ApproximateNumberOfMessagesVisible", "Errors", "5xx", "ReconcileDriftTotal", "GrantRejected", memory):
        assert metric in alarms, metric
    # The custom metrics are the ones the code emits.
    code = (ROOT / "shared" / "domain" / "src").rglob("*.rs")
    text = "".join(p.read_text() for p in code)
    assert '"ReconcileDriftTotal"' in text and '"GrantRejected"' in text


def test_a_win_waits_for_a_replica_in_aws_and_one_is_left_after_a_failover():
    """A SUCCESS survives a failover: the grab waits for a replica's
    acknowledgement, every shard has a replica to give it, and, as deployed
    by default and in prod, one more, so that a failover (which promotes a
    replica) leaves one to acknowledge and wins are not BUSY for the
    minutes ElastiCache takes to replace the failed node."""
    resources = resolve(template()["Resources"], {"Cache": "node"})
    env = resources["GrabFunction"]["Properties"]["Environment"]["Variables"]
    acks = int(env["REDIS_REPLICA_ACKS"])
    assert acks >= 1
    assert env["CACHE_DURABILITY"] == "replicated"
    assert "Durability" not in resources["Redis"]["Properties"]
    replicas = template()["Parameters"]["RedisReplicasPerShard"]
    assert replicas["MinValue"] >= acks
    assert replicas["Default"] >= acks + 1
    prod = re.search(r"RedisReplicasPerShard=(\d+)", (ROOT / "samconfig.toml").read_text())
    assert prod and int(prod.group(1)) >= acks + 1
    # The reconciler re-drives a grant only once as many replicas hold it.
    reconciler = resources["ReconcilerFunction"]["Properties"]["Environment"]["Variables"]
    assert int(reconciler["REDIS_REPLICA_ACKS"]) == acks


def test_a_durable_cache_is_valkey_9_with_sync_durability_and_nothing_waits_for_a_replica():
    """node-durable: ElastiCache for Valkey with durability `sync` (a write
    is in a multi-AZ log before its reply; `async` could lose the last 10 s
    of told wins), so no function waits for a replica, and the template's
    rules refuse the engine versions and node types durability lacks."""
    tpl = template()
    resources = resolve(tpl["Resources"], {"Cache": "node-durable", "Engine": "valkey", "EngineVersion": "9.0"})
    assert resources["Redis"]["Properties"]["Durability"] == "sync"
    for logical in ("GrabFunction", "AdminFunction", "ReconcilerFunction"):
        env = resources[logical]["Properties"]["Environment"]["Variables"]
        assert (env["CACHE_DURABILITY"], env["REDIS_REPLICA_ACKS"]) == ("durable", "0"), logical
    rule = json.dumps(tpl["Rules"]["DurableCacheIsValkey9"])
    assert '"Ref": "Cache"' in rule and '"9.0"' in rule and "cache.t4g.small" in rule


def test_memorydb_is_a_durable_tls_cluster_the_functions_sign_in_to_as_its_acl_user():
    """memorydb: MemoryDB acknowledges a write once its multi-AZ log holds
    it, so no function waits for a replica; it authenticates ACL users, so
    every function with Redis signs in as the stack's own user, whose
    password is the generated secret; nothing of the node-based cluster is
    created, and its alarms watch every node."""
    tpl = template()
    stack = deployed({"Cache": "memorydb", "Engine": "valkey", "EngineVersion": "7.2"})
    assert not {"Redis", "RedisSubnetGroup", "RedisParameterGroup", "RedisMemoryAlarm"} & set(stack)
    cluster = stack["MemoryDbCluster"]["Properties"]
    assert cluster["TLSEnabled"] is True
    assert cluster["ACLName"] == {"Ref": "MemoryDbAcl"}
    assert stack["MemoryDbAcl"]["Properties"]["UserNames"] == [{"Ref": "MemoryDbUser"}]
    user = stack["MemoryDbUser"]["Properties"]
    assert user["AuthenticationMode"]["Type"] == "password"
    assert "resolve:secretsmanager:${RedisAuthToken}" in json.dumps(user["AuthenticationMode"]["Passwords"])
    assert user["AccessString"].startswith("on ")
    group = stack[cluster["ParameterGroupName"]["Ref"]]["Properties"]
    assert group["Parameters"]["maxmemory-policy"] == "noeviction"
    signed_in = 0
    for logical, res in stack.items():
        env = res.get("Properties", {}).get("Environment", {}).get("Variables", {})
        if "REDIS_HOST" not in env:
            continue
        assert env["REDIS_HOST"] == {"GetAtt": "MemoryDbCluster.ClusterEndpoint.Address"}, logical
        assert env["REDIS_USERNAME"] == {"Ref": "MemoryDbUser"}, logical
        assert env["REDIS_AUTH_SECRET_ARN"] == {"Ref": "RedisAuthToken"}, logical
        assert (env.get("CACHE_DURABILITY"), env.get("REDIS_REPLICA_ACKS")) in {("durable", "0"), (None, None)}, logical
        assert "ELASTICACHE_REPLICATION_GROUP_ID" not in env, logical
        signed_in += 1
    assert signed_in >= 4
    reconciler = json.dumps(stack["ReconcilerFunction"]["Properties"]["Policies"])
    assert "elasticache:" not in reconciler
    for alarm in ("MemoryDbMemoryAlarm", "MemoryDbWriteLatencyAlarm"):
        query = json.dumps(stack[alarm]["Properties"]["Metrics"])
        assert '\\"AWS/MemoryDB\\"' in query and "${MemoryDbCluster}" in query, query
    # A node-based stack creates nothing of MemoryDB.
    assert not any(name.startswith("MemoryDb") for name in deployed({"Cache": "node"}))
    rule = json.dumps(tpl["Rules"]["MemoryDbVersionIsOffered"])
    assert '"7.2"' in rule and '"7.1"' in rule


def test_serverless_is_a_valkey_serverless_cache_the_functions_sign_in_to_and_claims_keep_its_told_wins():
    """serverless: ElastiCache Serverless for Valkey has no WAIT and no
    documented promise that a failover keeps an acknowledged write, so the
    functions run with CACHE_DURABILITY none (their claims in DynamoDB guard
    each user's ordinal) and wait for no replica; access is RBAC only, so
    they sign in as the stack's own user; pre-scaling and the ECPU ceiling
    are parameters, and its throttling and ECPU are alarmed."""
    tpl = template()
    stack = deployed({"Cache": "serverless", "Engine": "valkey", "EngineVersion": "8.0"})
    assert not {"Redis", "RedisSubnetGroup", "RedisParameterGroup", "RedisMemoryAlarm", "MemoryDbCluster"} & set(stack)
    cache = stack["ServerlessCache"]["Properties"]
    assert cache["Engine"] == "valkey"
    assert cache["MajorEngineVersion"] == {"Select": [0, {"Split": [".", "8.0"]}]}
    limits = cache["CacheUsageLimits"]
    assert limits["ECPUPerSecond"] == {"Minimum": 1000, "Maximum": 1000000}
    assert limits["DataStorage"]["Unit"] == "GB"
    assert cache["UserGroupId"] == {"Ref": "ServerlessCacheUserGroup"}
    assert stack["ServerlessCacheUserGroup"]["Properties"]["UserIds"] == [{"Ref": "ServerlessCacheUser"}]
    user = stack["ServerlessCacheUser"]["Properties"]
    assert user["Engine"] == "valkey" and user["UserId"] == user["UserName"]
    assert user["AuthenticationMode"]["Type"] == "password"
    assert "resolve:secretsmanager:${RedisAuthToken}" in json.dumps(user["AuthenticationMode"]["Passwords"])
    signed_in = 0
    for logical, res in stack.items():
        env = res.get("Properties", {}).get("Environment", {}).get("Variables", {})
        if "REDIS_HOST" not in env:
            continue
        assert env["REDIS_HOST"] == {"GetAtt": "ServerlessCache.Endpoint.Address"}, logical
        assert env["REDIS_PORT"] == {"GetAtt": "ServerlessCache.Endpoint.Port"}, logical
        assert (env["REDIS_TLS"], env["REDIS_CLUSTER"]) == ("true", "true"), logical
        assert env["REDIS_USERNAME"] == {"Ref": "ServerlessCacheUser"}, logical
        assert (env.get("CACHE_DURABILITY"), env.get("REDIS_REPLICA_ACKS")) in {("none", "0"), (None, None)}, logical
        assert "ELASTICACHE_REPLICATION_GROUP_ID" not in env, logical
        signed_in += 1
    assert signed_in >= 4
    assert "elasticache:" not in json.dumps(stack["ReconcilerFunction"]["Properties"]["Policies"])
    throttled = stack["ServerlessThrottledAlarm"]["Properties"]
    assert throttled["MetricName"] == "ThrottledCmds"
    assert throttled["Dimensions"] == [{"Name": "clusterId", "Value": {"Ref": "ServerlessCache"}}]
    ecpu = json.dumps(stack["ServerlessEcpuAlarm"]["Properties"]["Metrics"])
    assert "ElastiCacheProcessingUnits" in ecpu and "ServerlessMaxEcpuPerSecond" in ecpu
    assert "BytesUsedForCache" in json.dumps(stack["ServerlessStorageAlarm"]["Properties"]["Metrics"])
    assert not any(name.startswith("Serverless") for name in deployed({"Cache": "node"}))
    rule = json.dumps(tpl["Rules"]["ServerlessIsValkey"])
    assert '"Ref": "Engine"' in rule and '"valkey"' in rule


@pytest.mark.parametrize("cache", CACHES)
def test_every_function_with_redis_pairs_its_caches_durability_with_the_waits_its_start_accepts(cache):
    """The functions refuse to start on a pairing of `CACHE_DURABILITY`
    and `REDIS_REPLICA_ACKS` that disagrees (`CacheDurability::from_env`):
    replicated waits for at least one replica, durable for none. Every
    function the template gives a durability, for every choice."""
    resources = resolve(template()["Resources"], {"Cache": cache})
    paired = 0
    for logical, res in resources.items():
        env = res.get("Properties", {}).get("Environment", {}).get("Variables", {})
        if "CACHE_DURABILITY" not in env:
            assert "REDIS_REPLICA_ACKS" not in env, logical
            continue
        acks, durability = int(env["REDIS_REPLICA_ACKS"]), env["CACHE_DURABILITY"]
        assert (durability, acks >= 1) in {("replicated", True), ("durable", False), ("none", False)}, (logical, durability, acks)
        assert (durability == "none") == (cache == "serverless"), (logical, durability)
        paired += 1
    assert paired >= 3


def functions_running_the_pass():
    """The template's functions whose code builds the reconciler's pass
    (`Reconciler::new`), found in the source, not listed by hand: a new
    caller of the pass is checked the day it appears."""
    found = [
        FUNCTIONS[crate.name]
        for crate in sorted((ROOT / "functions").iterdir())
        if crate.name in FUNCTIONS
        and any("Reconciler::new(" in src.read_text() for src in (crate / "src").rglob("*.rs"))
    ]
    assert "ReconcilerFunction" in found and len(found) >= 2, found
    return found


# The settings of the pass itself: a function that runs it with another
# value runs another pass (with REDIS_REPLICA_ACKS 0, an operator's
# reconcile re-drove grants no replica held, after a failover exactly the
# case the setting exists for).
PASS_SETTINGS = ("CACHE_DURABILITY", "REDIS_REPLICA_ACKS", "REDIS_REPLICA_ACK_TIMEOUT_MS", "GRANT_DLQ_URL", "GRANT_QUEUE_URL",
                 "RECONCILE_GRACE_MS", "RECONCILE_SEND_WINDOW_MS", "GRANT_SEND_BUDGET_MS")


def test_every_function_that_runs_the_reconcilers_pass_runs_it_with_the_same_settings_and_rights():
    resources = resolve(template()["Resources"], {"Cache": "node"})
    grab = resources["GrabFunction"]["Properties"]["Environment"]["Variables"]
    scheduled = resources["ReconcilerFunction"]["Properties"]["Environment"]["Variables"]
    assert scheduled["REDIS_REPLICA_ACKS"] == grab["REDIS_REPLICA_ACKS"]
    assert scheduled["REDIS_REPLICA_ACK_TIMEOUT_MS"] == grab["REDIS_REPLICA_ACK_TIMEOUT_MS"]
    for logical in functions_running_the_pass():
        props = resources[logical]["Properties"]
        env = props["Environment"]["Variables"]
        for name in PASS_SETTINGS:
            assert env.get(name) == scheduled.get(name), (logical, name, env.get(name))
        # What the pass reads of the queues: the grant queue's messages on
        # their way, the dead-letter queue's depth.
        reads = [
            s["Resource"] for p in props["Policies"] if "Statement" in p for s in p["Statement"]
            if s["Action"] == "sqs:GetQueueAttributes" or "sqs:GetQueueAttributes" in s["Action"]
        ]
        readable = json.dumps(reads)
        for queue in ("GrantQueue", "GrantDeadLetterQueue"):
            assert json.dumps({"Fn::GetAtt": f"{queue}.Arn"})[1:-1] in readable or f'"{queue}.Arn"' in readable, (
                logical, queue, reads)


def family_for(engine, version):
    """What the parameter group's family expression evaluates to."""
    expr = template()["Resources"]["RedisParameterGroup"]["Properties"]["CacheParameterGroupFamily"]
    params = {"Engine": engine, "EngineVersion": version}

    def ev(node):
        if isinstance(node, str):
            return node
        (fn, arg), = node.items()
        if fn == "Ref":
            return params[arg]
        if fn == "Join":
            return arg[0].join(ev(x) for x in ev_list(arg[1]))
        if fn == "Select":
            return ev_list(arg[1])[int(arg[0])]
        raise AssertionError(f"unexpected function {fn}")

    def ev_list(node):
        if isinstance(node, list):
            return node
        (fn, arg), = node.items()
        assert fn == "Split", fn
        return ev(arg[1]).split(arg[0])

    return ev(expr)


def test_the_operator_chooses_the_engine_and_the_parameter_group_follows_it():
    """Both engines ElastiCache offers, each with the versions it offers,
    and the parameter group family that matches (a Redis family on a Valkey
    cluster fails the deployment); a pair ElastiCache does not offer is
    refused by a rule before anything is created."""
    tpl = template()
    params = tpl["Parameters"]
    assert set(params["Engine"]["AllowedValues"]) == {"redis", "valkey"}
    offered = {}
    for rule in tpl["Rules"].values():
        cond = rule.get("RuleCondition", {}).get("Equals")
        if cond and cond[0] == {"Ref": "Engine"}:
            (contains,) = [a["Assert"]["Contains"] for a in rule["Assertions"]]
            assert contains[1] == {"Ref": "EngineVersion"}
            offered[cond[1]] = contains[0]
    assert offered == {"redis": ["7.0", "7.1"], "valkey": ["7.2", "8.0", "8.1", "9.0"]}
    assert sorted(v for vs in offered.values() for v in vs) == sorted(params["EngineVersion"]["AllowedValues"])
    assert params["EngineVersion"]["Default"] in offered[params["Engine"]["Default"]]
    families = {(e, v): family_for(e, v) for e, vs in offered.items() for v in vs}
    assert families == {
        ("redis", "7.0"): "redis7", ("redis", "7.1"): "redis7",
        ("valkey", "7.2"): "valkey7", ("valkey", "8.0"): "valkey8", ("valkey", "8.1"): "valkey8",
        ("valkey", "9.0"): "valkey9",
    }
    group = tpl["Resources"]["Redis"]["Properties"]
    assert group["Engine"] == {"Ref": "Engine"} and group["EngineVersion"] == {"Ref": "EngineVersion"}


def test_no_http_function_trusts_identity_headers_in_aws():
    resources = template()["Resources"]
    for name in ("GrabFunction", "WalletFunction"):
        env = resources[name]["Properties"]["Environment"]["Variables"]
        assert str(env.get("TRUST_IDENTITY_HEADERS", "false")).lower() == "false", name


def test_functions_that_keep_request_records_agree_on_how_long():
    """The grab writes request records and the reconciler finishes borrows
    under them: both read IDEMPOTENCY_TTL_SECS (through the Redis settings),
    and the template must not give them different values."""
    resources = template()["Resources"]
    values = {
        name: resources[name]["Properties"]["Environment"]["Variables"].get("IDEMPOTENCY_TTL_SECS")
        for name in ("GrabFunction", "ReconcilerFunction", "AdminFunction")
    }
    assert len(set(map(str, values.values()))) == 1, values
    redis_settings = (ROOT / "shared" / "adapters" / "src" / "config.rs").read_text()
    assert 'env.number("IDEMPOTENCY_TTL_SECS"' in redis_settings


def test_the_local_stack_provides_every_table_and_queue_setting_the_code_requires():
    required = set().union(*required_settings().values()) - {"REDIS_URL|REDIS_HOST"}
    provided = {spec["env"] for kind in ("tables", "queues", "buses") for spec in resources()[kind].values()}
    assert required <= provided, required - provided
