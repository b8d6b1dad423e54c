"""template.yaml and the local provisioning (infra/resources.json) describe
the same tables and queues, and the template keeps the local-only identity
mode off."""
import json
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


class CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation short-form tags (!Ref, !GetAtt, !Sub, ...)."""


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {suffix: value}


CfnLoader.add_multi_constructor("!", _tag)


def template():
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=CfnLoader)


def resources():
    return json.loads((ROOT / "infra" / "resources.json").read_text())


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
            for g in props.get("GlobalSecondaryIndexes", [])
        }
        want = {
            g["name"]: {k: v for k, v in (("HASH", g["hashKey"]), ("RANGE", g.get("rangeKey"))) if v}
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


FUNCTIONS = {
    "grab": "GrabFunction",
    "issuer": "IssuerFunction",
    "reconciler": "ReconcilerFunction",
    "wallet": "WalletFunction",
    "admin": "AdminFunction",
    "notifier": "NotifierFunction",
}


def config_source(function):
    """The function's own `Config` (functions/<name>/src/config.rs)."""
    return (ROOT / "functions" / function / "src" / "config.rs").read_text()


def required_settings():
    """Each function config's required variables, read from the code."""
    found = {}
    for function in FUNCTIONS:
        block = config_source(function).split("impl Config {", 1)[1].split("\nimpl ", 1)[0]
        names = set(re.findall(r'env\.required\("([A-Z_]+)"\)', block))
        if "TableNames::from_env(env)" in block:
            names |= {"COUPONS_TABLE", "USER_COUPONS_TABLE"}
        if "RedisSettings::from_env(env)" in block or "RedisSettings::is_configured(env)" in block:
            names.add("REDIS_URL|REDIS_HOST")
        found[function] = names
    return found


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


def test_the_grab_function_reads_one_table_item_by_key_and_writes_nothing_in_dynamodb():
    """The grab reads a coupon's definition only when Redis knows nothing of
    it (lost or never created); it never writes, queries or scans."""
    policies = template()["Resources"]["GrabFunction"]["Properties"]["Policies"]
    dynamodb = [
        statement
        for policy in policies if "Statement" in policy
        for statement in policy["Statement"]
        if "dynamodb" in json.dumps(statement["Action"]).lower()
    ]
    assert dynamodb == [{"Effect": "Allow", "Action": "dynamodb:GetItem",
                         "Resource": {"GetAtt": "CouponsTable.Arn"}}], dynamodb
    assert "dynamodb" not in json.dumps([p for p in policies if "Statement" not in p]).lower()


def test_every_table_has_point_in_time_recovery_and_encryption():
    for name, res in template()["Resources"].items():
        if res["Type"] == "AWS::DynamoDB::Table":
            props = res["Properties"]
            assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True, name
            assert props["SSESpecification"]["SSEEnabled"] is True, name


def test_the_alarms_watch_what_the_design_says():
    alarms = {
        res["Properties"]["MetricName"]: res["Properties"]
        for res in template()["Resources"].values()
        if res["Type"] == "AWS::CloudWatch::Alarm"
    }
    for metric in ("ApproximateNumberOfMessagesVisible", "Errors", "5xx", "ReconcileDriftTotal", "GrantRejected", "DatabaseMemoryUsagePercentage"):
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
    resources = template()["Resources"]
    env = resources["GrabFunction"]["Properties"]["Environment"]["Variables"]
    acks = int(env["REDIS_REPLICA_ACKS"])
    assert acks >= 1
    replicas = template()["Parameters"]["RedisReplicasPerShard"]
    assert replicas["MinValue"] >= acks
    assert replicas["Default"] >= acks + 1
    prod = re.search(r"RedisReplicasPerShard=(\d+)", (ROOT / "samconfig.toml").read_text())
    assert prod and int(prod.group(1)) >= acks + 1
    # The reconciler re-drives a grant only once as many replicas hold it.
    reconciler = resources["ReconcilerFunction"]["Properties"]["Environment"]["Variables"]
    assert int(reconciler["REDIS_REPLICA_ACKS"]) == acks


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
    assert offered == {"redis": ["7.0", "7.1"], "valkey": ["7.2", "8.0", "8.1"]}
    assert sorted(v for vs in offered.values() for v in vs) == sorted(params["EngineVersion"]["AllowedValues"])
    assert params["EngineVersion"]["Default"] in offered[params["Engine"]["Default"]]
    families = {(e, v): family_for(e, v) for e, vs in offered.items() for v in vs}
    assert families == {
        ("redis", "7.0"): "redis7", ("redis", "7.1"): "redis7",
        ("valkey", "7.2"): "valkey7", ("valkey", "8.0"): "valkey8", ("valkey", "8.1"): "valkey8",
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


def http_routes():
    """(method, path, authorizer) of every HttpApi event in the template."""
    routes = []
    for res in template()["Resources"].values():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        for event in res["Properties"].get("Events", {}).values():
            if event["Type"] == "HttpApi":
                p = event["Properties"]
                routes.append((p["Method"].lower(), p["Path"], p.get("Auth", {}).get("Authorizer")))
    return routes


def openapi():
    return yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())


def test_the_openapi_document_describes_exactly_the_deployed_routes():
    documented = {
        (method, path)
        for path, ops in openapi()["paths"].items()
        for method in ops
        if method in ("get", "put", "post", "delete", "patch")
    }
    deployed = {(m, p) for m, p, _ in http_routes()}
    assert documented == deployed


def test_admin_and_order_routes_use_iam_and_every_other_route_the_user_jwt():
    """Operators (/admin) and the order service (/redemptions) sign with
    IAM; users present a JWT; never the other way round."""
    api = template()["Resources"]["HttpApi"]["Properties"]["Auth"]
    assert api["DefaultAuthorizer"] == "UserJwt"
    assert api["EnableIamAuthorizer"] is True
    server_to_server = ("/admin/", "/redemptions/")
    for method, path, authorizer in http_routes():
        if path.startswith(server_to_server):
            assert authorizer == "AWS_IAM", (method, path)
        else:
            assert authorizer is None, (method, path)
    doc = openapi()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            scheme = {"/admin/": "operatorSigV4", "/redemptions/": "orderSigV4"}.get(
                next((p for p in server_to_server if path.startswith(p)), ""), "userJwt"
            )
            assert op["security"] == [{scheme: []}], (method, path)
    policies = template()["Resources"]
    order = json.dumps(policies["OrderServicePolicy"]["Properties"]["PolicyDocument"])
    assert "/redemptions/*" in order and "/admin/" not in order


def test_the_admin_function_never_trusts_the_local_actor_header_in_aws():
    env = template()["Resources"]["AdminFunction"]["Properties"]["Environment"]["Variables"]
    assert env["ADMIN_LOCAL_MODE"] == "false"


def test_the_bus_and_its_rules_match_and_every_rule_target_may_be_written_by_eventbridge():
    tpl = template()["Resources"]
    buses = {k for k, v in tpl.items() if v["Type"] == "AWS::Events::EventBus"}
    assert buses == set(resources()["buses"])
    rules = {k: v["Properties"] for k, v in tpl.items() if v["Type"] == "AWS::Events::Rule"}
    policies = [v["Properties"] for v in tpl.values() if v["Type"] == "AWS::SQS::QueuePolicy"]
    local = {
        name: (bus, rule)
        for bus, spec in resources()["buses"].items()
        for name, rule in spec["rules"].items()
        if not rule.get("localOnly")
    }
    assert set(rules) == set(local)
    for name, (bus, rule) in local.items():
        props = rules[name]
        assert props["EventBusName"] == {"Ref": bus}, name
        pattern = {"source": [resources()["buses"][bus]["source"]]}
        if rule["detailTypes"]:
            pattern["detail-type"] = rule["detailTypes"]
        assert props["EventPattern"] == pattern, name
        (target,) = props["Targets"]
        assert target["Arn"] == {"GetAtt": f"{rule['target']}.Arn"}, name
        assert target["DeadLetterConfig"]["Arn"] == {"GetAtt": f"{rule['deadLetterQueue']}.Arn"}, name
        for queue in (rule["target"], rule["deadLetterQueue"]):
            assert any(
                {"Ref": queue} in p["Queues"]
                and s["Principal"] == {"Service": "events.amazonaws.com"}
                and s["Condition"]["ArnEquals"]["aws:SourceArn"] == {"GetAtt": f"{name}.Arn"}
                for p in policies
                for s in p["PolicyDocument"]["Statement"]
            ), (name, queue)
    # The code publishes under the source the rules match.
    code = (ROOT / "shared" / "adapters" / "src" / "eventbridge.rs").read_text()
    for spec in resources()["buses"].values():
        assert f'pub const SOURCE: &str = "{spec["source"]}";' in code


def test_the_notifier_reads_the_stream_with_bounded_retries_and_drops_nothing_in_silence():
    tpl = template()
    resources_ = tpl["Resources"]
    notifier = resources_["NotifierFunction"]["Properties"]
    (event,) = notifier["Events"].values()
    assert event["Type"] == "DynamoDB"
    props = event["Properties"]
    assert props["Stream"] == {"GetAtt": "UserCouponsTable.StreamArn"}
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BisectBatchOnFunctionError"] is True
    retries = tpl["Parameters"][props["MaximumRetryAttempts"]["Ref"]]
    assert 0 <= retries["Default"] <= retries["MaxValue"] <= 10000
    # Given up before the stream's 24 hours of retention lose the record.
    assert 0 < props["MaximumRecordAgeInSeconds"] < 86400
    failure = props["DestinationConfig"]["OnFailure"]
    assert failure == {"Type": "SQS", "Destination": {"GetAtt": "NotifierFailureQueue.Arn"}}
    assert {"SQSSendMessagePolicy": {"QueueName": {"GetAtt": "NotifierFailureQueue.QueueName"}}} in notifier["Policies"]
    alarmed = {
        json.dumps(res["Properties"].get("Dimensions"))
        for res in resources_.values()
        if res["Type"] == "AWS::CloudWatch::Alarm"
    }
    for queue in ("NotifierFailureQueue", "EventDeadLetterQueue"):
        assert json.dumps([{"Name": "QueueName", "Value": {"GetAtt": f"{queue}.QueueName"}}]) in alarmed, queue
    assert json.dumps([{"Name": "FunctionName", "Value": {"Ref": "NotifierFunction"}}]) in alarmed


def emitted_metrics():
    """The code's catalogue (shared/domain/src/metrics.rs, `Metric`): name ->
    (service, dimension or None), read from its three match tables."""
    src = (ROOT / "shared" / "domain" / "src" / "metrics.rs").read_text()

    def table(fn):
        body = src.split(f"pub fn {fn}(self)", 1)[1].split("\n    }\n", 1)[0]
        found = {}
        for arm in re.findall(r"((?:\s*\|?\s*Self::\w+)+)\s*=>\s*(\{?\s*(?:Some\()?\"?[\w]*\"?\)?)", body):
            variants, value = arm
            value = re.search(r'"(\w+)"', value)
            for v in re.findall(r"Self::(\w+)", variants):
                found[v] = value.group(1) if value else None
        return found

    names, services, dims = table("name"), table("service"), table("dimension")
    assert len(names) == 23 and set(services) == set(names), "is the catalogue parser still right?"
    return {names[v]: (services[v], dims.get(v)) for v in names}


def referenced_metrics():
    """(name, service, dimension or None, where) of every CouponGrab metric
    the template's dashboard and alarms name."""
    resources = template()["Resources"]
    found = []
    body = resources["Dashboard"]["Properties"]["DashboardBody"]["Sub"]
    dashboard = json.loads(re.sub(r"\$\{[^}]+\}", "x", body))
    for widget in dashboard["widgets"]:
        for row in widget.get("properties", {}).get("metrics", []):
            if row[0] == "CouponGrab":
                labels = [x for x in row[1:] if isinstance(x, str)]
                name, pairs = labels[0], dict(zip(labels[1::2], labels[2::2]))
                assert set(pairs) == {"Service"}, row
                found.append((name, pairs["Service"], None, widget["properties"]["title"]))
            for item in row:
                if isinstance(item, dict) and "expression" in item:
                    for dims, name in re.findall(r"\{CouponGrab,([\w,]+)\} MetricName=\"(\w+)\"", item["expression"]):
                        keys = dims.split(",")
                        assert keys[0] == "Service" and len(keys) <= 2, item
                        found.append((name, None, keys[1] if len(keys) == 2 else None, widget["properties"]["title"]))
    for logical, res in resources.items():
        if res["Type"] == "AWS::CloudWatch::Alarm" and res["Properties"].get("Namespace") == "CouponGrab":
            props = res["Properties"]
            dims = {d["Name"]: d["Value"] for d in props["Dimensions"]}
            found.append((props["MetricName"], dims["Service"], None, logical))
    return found


def test_the_dashboard_and_alarms_watch_only_metrics_the_code_emits_and_every_one_of_them():
    emitted = emitted_metrics()
    referenced = referenced_metrics()
    for name, service, dimension, where in referenced:
        assert name in emitted, f"{where}: {name} is not emitted by any function"
        want_service, want_dimension = emitted[name]
        if service is not None:
            assert service == want_service, f"{where}: {name} comes from {want_service}, not {service}"
        if dimension is not None:
            assert dimension == want_dimension, f"{where}: {name} is split by {want_dimension}, not {dimension}"
        elif service is not None and want_dimension is not None:
            # A plain metric row names every dimension: a split metric is
            # only reachable through a SEARCH over its dimension.
            raise AssertionError(f"{where}: {name} is split by {want_dimension}; graph it with SEARCH")
    assert {n for n, *_ in referenced} == set(emitted), "metrics no widget shows: " + str(
        set(emitted) - {n for n, *_ in referenced}
    )


def test_every_alarm_threshold_is_a_parameter_and_every_alarm_notifies_the_topic():
    tpl = template()
    for logical, res in tpl["Resources"].items():
        if res["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = res["Properties"]
        assert props["Threshold"].get("Ref") in tpl["Parameters"], logical
        assert props["AlarmActions"] == {"If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}, logical


def test_every_function_ships_through_its_alias_with_a_canary_in_prod_watched_by_its_own_alarms():
    tpl = template()
    glob = tpl["Globals"]["Function"]
    assert glob["AutoPublishAlias"] == "live"
    assert glob["DeploymentPreference"]["Type"] == {"If": ["IsProd", "Canary10Percent5Minutes", "AllAtOnce"]}
    resources = tpl["Resources"]
    for name, res in resources.items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        alarms = [a["Ref"] for a in res["Properties"]["DeploymentPreference"]["Alarms"]]
        assert alarms, name
        for alarm in alarms:
            dims = {d["Name"]: d["Value"] for d in resources[alarm]["Properties"]["Dimensions"]}
            assert dims["FunctionName"] == {"Ref": name}, (name, alarm)
            assert dims["Resource"] == {"Sub": f"${{{name}}}:live"}, (name, alarm)
    grab = [a["Ref"] for a in resources["GrabFunction"]["Properties"]["DeploymentPreference"]["Alarms"]]
    assert {resources[a]["Properties"]["MetricName"] for a in grab} == {"Errors", "Duration"}


def test_the_grab_alias_is_warmed_for_the_sale_and_released_after_it():
    tpl = template()
    warm = tpl["Resources"]["GrabWarmCapacity"]
    assert warm["Condition"] == "HasWarmSchedule" and warm["DependsOn"] == "GrabFunctionAliaslive"
    props = warm["Properties"]
    assert props["ResourceId"] == {"Sub": "function:${GrabFunction}:live"}
    assert props["ScalableDimension"] == "lambda:function:ProvisionedConcurrency"
    start, end = props["ScheduledActions"]
    assert start["Schedule"] == {"Ref": "WarmStartSchedule"} and end["Schedule"] == {"Ref": "WarmEndSchedule"}
    assert start["ScalableTargetAction"]["MinCapacity"] == {"Ref": "WarmConcurrency"}
    assert end["ScalableTargetAction"] == {"MinCapacity": 0, "MaxCapacity": 0}
    # Billed until released: a start without an end is refused at deploy.
    rule = tpl["Rules"]["WarmScheduleIsComplete"]
    assert rule["Assertions"][0]["Assert"] == {"Not": [{"Equals": [{"Ref": "WarmEndSchedule"}, ""]}]}


def test_redis_keeps_daily_snapshots_and_leaves_a_final_one():
    redis = template()["Resources"]["Redis"]
    assert redis["DeletionPolicy"] == "Snapshot"
    assert redis["Properties"]["SnapshotRetentionLimit"] == {"Ref": "RedisSnapshotRetentionDays"}
    assert template()["Parameters"]["RedisSnapshotRetentionDays"]["MinValue"] >= 1
