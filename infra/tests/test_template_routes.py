"""The template's routes against the OpenAPI document and their
authorizers, the event bus and its rules, and the notifier's stream
mapping."""
import json

import yaml

from infra.tests.cfn import ROOT, resources, template


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
