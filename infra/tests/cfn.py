"""What the template tests read: template.yaml (with CloudFormation's
short-form tags), the local resources, and each function's required
settings as its `Config` reads them."""
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


# The template's `Cache` choices, each deployed and checked on its own.
CACHES = ("node", "node-durable", "memorydb", "serverless")


def resolve(node, parameters, tpl=None):
    """`node` as CloudFormation resolves it for the stack `parameters`
    (the others at their defaults): `Fn::If` on a condition of the
    template, `Ref` to a parameter, a property of `AWS::NoValue` left out;
    anything else is left as written."""
    return _resolver(parameters, tpl)[0](node)


def deployed(parameters, tpl=None):
    """The resources a stack with `parameters` creates (those whose
    `Condition` holds), resolved as `resolve` does."""
    tpl = tpl or template()
    value, condition = _resolver(parameters, tpl)
    return {
        name: value(res) for name, res in tpl["Resources"].items()
        if "Condition" not in res or condition(res["Condition"])
    }


def _resolver(parameters, tpl):
    tpl = tpl or template()
    params = {k: v.get("Default") for k, v in tpl["Parameters"].items()} | parameters

    def condition(c):
        if isinstance(c, str):
            return condition(tpl["Conditions"][c])
        (fn, arg), = c.items()
        if fn == "Condition":
            return condition(arg)
        if fn == "Equals":
            return value(arg[0]) == value(arg[1])
        if fn == "Not":
            return not condition(arg[0])
        if fn == "And":
            return all(condition(a) for a in arg)
        if fn == "Or":
            return any(condition(a) for a in arg)
        raise ValueError(f"condition {fn}")

    def value(n):
        if isinstance(n, list):
            # An element set to AWS::NoValue is not in the list.
            return [v for v in map(value, n) if v != {"Ref": "AWS::NoValue"}]
        if not isinstance(n, dict):
            return n
        if list(n) == ["If"]:
            name, yes, no = n["If"]
            return value(yes if condition(name) else no)
        if list(n) == ["Ref"] and n["Ref"] in params:
            return params[n["Ref"]]
        # A property set to AWS::NoValue is not set at all.
        resolved = {k: value(v) for k, v in n.items()}
        return {k: v for k, v in resolved.items() if v != {"Ref": "AWS::NoValue"}}

    return value, condition


def resources():
    return json.loads((ROOT / "infra" / "local" / "resources.json").read_text())


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
            names |= {"COUPONS_TABLE", "USER_COUPONS_TABLE", "CLAIMS_TABLE"}
        if "RedisSettings::from_env(env)" in block or "RedisSettings::is_configured(env)" in block:
            names.add("REDIS_URL|REDIS_HOST")
        found[function] = names
    return found
