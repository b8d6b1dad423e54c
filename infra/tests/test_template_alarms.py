"""The template's dashboard and alarms against the metrics the code emits,
the alarms' thresholds and topic, the canary deployments and the grab's
warm-up, and Redis's snapshots."""
import json
import re

from infra.tests.cfn import ROOT, template


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
    if isinstance(body, list):  # !Sub [text, variables]
        body = body[0]
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
