"""The parameters infra/deploy/deploy.sh sends for a stage: the stage's
list in samconfig.toml with the additions given merged in, a later
`Name=Value` replacing an earlier one of the same name in place. One
`Name=Value` a line on standard output.

Usage: python3 infra/deploy/stage_params.py STAGE [Name=Value ...]
"""

import pathlib
import shlex
import sys
import tomllib

SAMCONFIG = pathlib.Path(__file__).resolve().parents[2] / "samconfig.toml"


def stages(config):
    """The stages samconfig.toml deploys."""
    return [name for name, table in config.items() if isinstance(table, dict) and "deploy" in table]


def merged(stage, additions, config=None):
    """`{name: value}`: the stage's parameter overrides, then `additions`."""
    if config is None:
        config = tomllib.loads(SAMCONFIG.read_text())
    if stage not in stages(config):
        raise ValueError(f"samconfig.toml has no stage {stage!r} (one of: {', '.join(stages(config))})")
    out = {}
    listed = config[stage]["deploy"]["parameters"].get("parameter_overrides", "")
    for pair in shlex.split(listed) + list(additions):
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"{pair!r}: expected Name=Value")
        out[name] = value
    return out


def main(argv):
    if not argv:
        sys.exit("usage: stage_params.py STAGE [Name=Value ...]")
    try:
        params = merged(argv[0], argv[1:])
    except ValueError as e:
        sys.exit(str(e))
    for name, value in params.items():
        print(f"{name}={value}")


if __name__ == "__main__":
    main(sys.argv[1:])
