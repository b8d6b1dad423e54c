"""The deploy commands the docs give do what they say: each keeps its
stage's settings from samconfig.toml. A `sam deploy --parameter-overrides`
typed on the command line replaces the stage's whole list (the dev stack
got the template's production-sized defaults that way), so every command
is run here through infra/deploy/deploy.sh's dry run and the sam command
it prints is parsed by SAM CLI's own option parser: what sam would send."""
import os
import re
import shlex
import subprocess
import tomllib

import pytest

from infra.tests.cfn import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shell_blocks(path):
    """The shell commands of a Markdown file's fenced ```sh blocks, each
    with its backslash continuations joined and its comment dropped."""
    commands = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", path.read_text(), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def deploy_commands():
    found = [(p.relative_to(ROOT), c) for p in DOCS for c in shell_blocks(p) if "deploy.sh" in c or "sam deploy" in c]
    assert found, "the docs give no deploy command"
    return found


def stage_parameters(stage):
    listed = tomllib.loads((ROOT / "samconfig.toml").read_text())[stage]["deploy"]["parameters"]["parameter_overrides"]
    return dict(pair.split("=", 1) for pair in shlex.split(listed))


def what_sam_would_send(argv, monkeypatch):
    """The parameter overrides SAM CLI resolves for `sam deploy ARGV`
    (samconfig.toml read as sam reads it, from the project root)."""
    from samcli.commands.deploy.command import cli

    monkeypatch.chdir(ROOT)
    ctx = cli.make_context("deploy", list(argv))
    return dict(ctx.params.get("parameter_overrides") or {}), ctx.params.get("config_env")


@pytest.mark.parametrize("doc,command", deploy_commands())
def test_every_deploy_command_in_the_docs_keeps_its_stages_settings(doc, command, monkeypatch):
    # Placeholders such as <issuer URL> stand for the reader's values.
    command = re.sub(r"<[^>]+>", "placeholder", command)
    if command.startswith("sam deploy"):
        argv = shlex.split(command)  # what the reader types goes to sam as it is
    else:
        env = dict(os.environ, DEPLOY_DRY_RUN="1", JWT_ISSUER="https://issuer.example", JWT_AUDIENCE="app-client")
        run = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        assert run.returncode == 0, (doc, command, run.stderr)
        argv = shlex.split(run.stdout)
    assert argv[:2] == ["sam", "deploy"], run.stdout
    sent, stage = what_sam_would_send(argv[2:], monkeypatch)
    named = dict(a.split("=", 1) for a in shlex.split(command) if re.match(r"^[A-Z][A-Za-z]+=", a))
    for name, value in stage_parameters(stage).items():
        assert sent.get(name) == named.get(name, value), (doc, command, name, sent)
    assert sent["JwtIssuer"] and sent["JwtAudience"], sent
    for name, value in named.items():
        assert sent.get(name) == value, (doc, command, name, sent)


def test_the_deploy_script_refuses_an_unknown_stage_and_a_malformed_parameter():
    env = dict(os.environ, DEPLOY_DRY_RUN="1", JWT_ISSUER="i", JWT_AUDIENCE="a")
    for args in (["staging"], ["dev", "NoEqualsSign"]):
        run = subprocess.run(["bash", "infra/deploy/deploy.sh", *args], cwd=ROOT, env=env, capture_output=True,
                             text=True, stdin=subprocess.DEVNULL)
        assert run.returncode != 0 and run.stderr.strip(), (args, run.stdout)


def test_every_shell_script_parses():
    """`bash -n` over every script: deploy.sh once failed to parse on bash
    5.2 (an apostrophe inside ${VAR:?message}) and nothing ran it."""
    scripts = [p for p in ROOT.rglob("*.sh") if not any(part.startswith(".") or part == "target" for part in p.relative_to(ROOT).parts)]
    assert scripts
    for script in scripts:
        run = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert run.returncode == 0, (script, run.stderr)
