"""The edge option (EdgeProtection): CloudFront with an AWS WAF web ACL in
front of the HTTP API. The ACL is attached, its rules are the ones
docs/operations.md describes, and the API's own endpoint is no way around
it: the header CloudFront adds is the secret the user-facing functions
check, and the functions that read it may."""
from infra.tests.cfn import template


def resources():
    return template()["Resources"]


def test_the_distribution_carries_the_web_acl_the_template_creates_or_is_given():
    dist = resources()["EdgeDistribution"]
    assert dist["Condition"] == "UseEdge"
    acl = dist["Properties"]["DistributionConfig"]["WebACLId"]
    assert acl == {"If": ["CreateEdgeWebAcl", {"GetAtt": "EdgeWebAcl.Arn"}, {"Ref": "EdgeWebAclArn"}]}
    web_acl = resources()["EdgeWebAcl"]
    assert web_acl["Properties"]["Scope"] == "CLOUDFRONT"
    assert web_acl["Condition"] == "CreateEdgeWebAcl"


def rules():
    """The ACL's rules by name, conditional ones unwrapped."""
    found = {}
    for rule in resources()["EdgeWebAcl"]["Properties"]["Rules"]:
        if "If" in rule:
            rule = rule["If"][1]
        found[rule["Name"]] = rule
    return found


def test_the_web_acl_has_ip_reputation_a_rate_per_ip_a_challenge_on_the_presses_and_bot_control():
    r = rules()
    assert r["ip-reputation"]["Statement"]["ManagedRuleGroupStatement"]["Name"] == "AWSManagedRulesAmazonIpReputationList"
    rate = r["rate-per-ip"]["Statement"]["RateBasedStatement"]
    assert rate["AggregateKeyType"] == "IP" and rate["Limit"] == {"Ref": "EdgeRateLimitPerIp"}
    assert "Block" in r["rate-per-ip"]["Action"]
    challenge = r["challenge-presses"]
    assert "Challenge" in challenge["Action"]
    # By method: a path match would let /grab/ or an escape around it.
    match = challenge["Statement"]["ByteMatchStatement"]
    assert (match["FieldToMatch"], match["PositionalConstraint"], match["SearchString"]) == ({"Method": {}}, "EXACTLY", "POST")
    bots = r["bot-control"]["Statement"]["ManagedRuleGroupStatement"]
    assert bots["Name"] == "AWSManagedRulesBotControlRuleSet"
    priorities = [rule["Priority"] for rule in r.values()]
    assert len(set(priorities)) == len(priorities), "each rule its own priority"


def test_a_rotation_s_generation_reaches_both_the_distribution_and_the_functions():
    comment = resources()["EdgeDistribution"]["Properties"]["DistributionConfig"]["Comment"]
    assert "${EdgeSecretGeneration}" in comment["Sub"]
    for name in ("GrabFunction", "WalletFunction"):
        env = resources()[name]["Properties"]["Environment"]["Variables"]
        assert env["EDGE_SECRET_GENERATION"] == {"If": ["UseEdge", {"Ref": "EdgeSecretGeneration"}, ""]}, name


def test_the_origin_header_is_the_secret_the_user_facing_functions_check():
    origin = resources()["EdgeDistribution"]["Properties"]["DistributionConfig"]["Origins"][0]
    (header,) = origin["OriginCustomHeaders"]
    assert header["HeaderName"].lower() == "x-origin-verify"
    assert header["HeaderValue"] == {"Sub": "{{resolve:secretsmanager:${EdgeOriginSecret}:SecretString}}"}
    for name in ("GrabFunction", "WalletFunction"):
        props = resources()[name]["Properties"]
        env = props["Environment"]["Variables"]
        assert env["ORIGIN_VERIFY_SECRET_ARN"] == {"If": ["UseEdge", {"Ref": "EdgeOriginSecret"}, ""]}, name
        readable = [
            p["If"][1]["AWSSecretsManagerGetSecretValuePolicy"]["SecretArn"]
            for p in props["Policies"]
            if isinstance(p, dict) and "If" in p
        ]
        assert {"Ref": "EdgeOriginSecret"} in readable, name


def test_the_origin_check_is_in_the_code_the_functions_run():
    from infra.tests.cfn import ROOT

    for function in ("grab", "wallet"):
        source = (ROOT / "functions" / function / "src" / "lib.rs").read_text()
        handle = source.split("pub async fn handle", 1)[1].split("\n}\n", 1)[0]
        assert "came_through_edge" in handle, function


def test_the_viewer_address_reaches_the_function_set_by_cloudfront_itself():
    behaviour = resources()["EdgeDistribution"]["Properties"]["DistributionConfig"]["DefaultCacheBehavior"]
    (assoc,) = behaviour["FunctionAssociations"]
    assert assoc["EventType"] == "viewer-request"
    code = resources()["EdgeViewerAddress"]["Properties"]["FunctionCode"]
    assert "request.headers['x-viewer-ip'] = { value: event.viewer.ip }" in code
