#!/usr/bin/env python3
"""Builds the per-scenario section of results/README.md from the Markdown files `sfb bench
--scenario NAME -o results` wrote: the tables and sections, with image paths relative to
results/.
Text between the markers <!-- results:begin --> and <!-- results:end --> is replaced;
findings written by hand go above the begin marker."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
ORDER = [
    "fms-vs-sfb", "q-sweep", "staleness", "scaling", "model-size", "optimizers", "adarevision",
    "saga", "kernel", "budget-check",
]
# Scenarios `all` does not run, each from its own command.
SEPARATE = {"budget-check": "sfb bench --scenario budget-check -o results  # as root; skipped otherwise"}
# The plots shown in results/README.md; every other one is linked from results/<scenario>.md.
SHOWN = {
    "fms-vs-sfb": ["fms-vs-sfb-objective-vs-time.png", "fms-vs-sfb-time-split.png"],
    "q-sweep": ["q-sweep-time-to-target.png", "q-sweep-final-objective.png"],
    "staleness": ["staleness-time-to-target.png", "staleness-compute-vs-wait.png"],
    "scaling": ["scaling-speedup.png"],
    "model-size": ["model-size-time-to-target.png", "model-size-bytes-vs-formula.png"],
    "optimizers": ["optimizers-final-objective-vs-lr.png", "optimizers-cost-per-clock.png"],
    "adarevision": ["adarevision-objective-s8.png"],
    "saga": ["saga-suboptimality-vs-epochs.png", "saga-suboptimality-vs-time-straggler.png"],
    "kernel": ["kernel.png"],
}


def section(name: str) -> str:
    md = (RESULTS / f"{name}.md").read_text()
    md = md.split("<details>")[0]
    out = []
    for line in md.splitlines():
        if line.startswith(("Command:", "Machine:")):
            if name in SEPARATE and line.startswith("Command:"):
                out.append(f"Separate run: `{SEPARATE[name]}`\n")
            continue
        m = re.match(r"!\[(.*)\]\((.*)\)", line)
        if m:
            if m.group(2) in SHOWN.get(name, []):
                out.append(f"![{m.group(1)}]({m.group(2)})")
            continue
        if line.startswith("## "):
            line = "### " + line[3:]
        elif line.startswith("### "):
            line = "#### " + line[4:]
        out.append(line)
    text = "\n".join(out).strip()
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text + f"\n\nAll files: [`{name}.md`]({name}.md), `.json`, `.csv`, plots.\n"


def main() -> None:
    body = "\n\n".join(section(n) for n in ORDER if (RESULTS / f"{n}.md").exists())
    readme = (RESULTS / "README.md").read_text()
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    if begin not in readme:
        sys.exit("results/README.md has no results markers")
    head, rest = readme.split(begin, 1)
    _, tail = rest.split(end, 1)
    (RESULTS / "README.md").write_text(f"{head}{begin}\n{body}\n{end}{tail}")


if __name__ == "__main__":
    main()
